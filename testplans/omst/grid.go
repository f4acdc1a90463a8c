package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	gosync "sync"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/testground/sdk-go/sync"
)

// Grid membership (param grid): the root runs `omst grid init` in its home
// before its daemon starts, mints one join token per other instance with
// `omst grid token` and hands each its own through the sync service; every
// other daemon starts with --join TOKEN and redeems it through its parent
// (a head with the root, a worker through its head) on its start.

// gridToken is what the root publishes on an instance's token topic.
type gridToken struct {
	Token string `json:"token"`
}

// gridStatus is a daemon's membership as its status reports it, recorded
// with the instance's results when grid is on.
type gridStatus struct {
	Grid     string   `json:"grid"`
	Role     string   `json:"role"`
	Prefixes []string `json:"prefixes,omitempty"`
	Issuer   bool     `json:"issuer,omitempty"`
	Admitted int      `json:"admitted"`
	Joins    uint64   `json:"joins,omitempty"`   // join and renewal requests served (the root, heads)
	Refused  uint64   `json:"refused,omitempty"` // certificates refused
	Denied   uint64   `json:"denied,omitempty"`  // streams reset for a peer not admitted
}

func gridStatusOf(m *rpcbridge.Membership) *gridStatus {
	if m == nil {
		return nil
	}
	return &gridStatus{Grid: m.Grid, Role: m.Role, Prefixes: m.Prefixes, Issuer: m.Issuer, Admitted: m.Admitted,
		Joins: m.Joins, Refused: m.Refused, Denied: m.Denied}
}

// resultName is the name a worker puts its result under (gather, dht).
func resultName(site, index int) string { return fmt.Sprintf("results/site-%d/worker-%d", site, index) }

// headPrefix is what a head may write under: its site's results.
func headPrefix(site int) string { return fmt.Sprintf("results/site-%d/", site) }

// workerPrefix is what a worker may write under: its result's name. The
// certificate's prefixes are plain string prefixes, so this one also
// covers names that extend it (worker-1 covers worker-10...); the plan
// writes none such (the names stay as they were without the grid).
func workerPrefix(site, index int) string { return resultName(site, index) }

func headTokenTopic(site int) string { return fmt.Sprintf("omst-grid-token-head-%d", site) }

func workerTokenTopic(site, index int) string {
	return fmt.Sprintf("omst-grid-token-worker-%d-%d", site, index)
}

// tokenTTL: a token stays redeemable over the whole run (late joiners of
// the churn case redeem theirs after the start signal).
func (cfg *config) tokenTTL() time.Duration {
	return min(cfg.startupTimeout+cfg.timeout+time.Hour, 30*24*time.Hour)
}

// omstCLI runs `omst --home home -q ARGS...` and returns its standard
// output.
func omstCLI(ctx context.Context, bin, home string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"--home", home, "-q"}, args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("omst %s: %w: %s", strings.Join(args[:min(2, len(args))], " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// gridInit makes home the root of a new grid (before its daemon starts).
func gridInit(ctx context.Context, bin, home string) error {
	_, err := omstCLI(ctx, bin, home, "grid", "init")
	return err
}

// mintToken makes a join token at the root whose home is home; the token
// is the last line of the command's output.
func mintToken(ctx context.Context, bin, home, role, prefix string, ttl time.Duration) (string, error) {
	out, err := omstCLI(ctx, bin, home, "grid", "token", "--role", role, "--prefix", prefix,
		"--ttl", fmt.Sprintf("%ds", int64(ttl/time.Second)))
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	tok := strings.TrimSpace(lines[len(lines)-1])
	if !strings.HasPrefix(tok, "omst-join-") {
		return "", fmt.Errorf("omst grid token printed %q, not a join token", tok)
	}
	return tok, nil
}

// publishTokens (the root, with its daemon's home a grid) mints a token
// for every head and every worker and publishes each on its own topic.
func (in *instance) publishTokens(ctx context.Context) error {
	cfg := in.cfg
	type job struct{ topic, role, prefix string }
	var jobs []job
	for s := 0; s < cfg.sites; s++ {
		jobs = append(jobs, job{headTokenTopic(s), roleHead, headPrefix(s)})
		for i := 0; i < cfg.workersPerSite; i++ {
			jobs = append(jobs, job{workerTokenTopic(s, i), roleWorker, workerPrefix(s, i)})
		}
	}
	t0 := time.Now()
	ch := make(chan job)
	errs := make(chan error, len(jobs))
	var wg gosync.WaitGroup
	for range min(8, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				tok, err := mintToken(ctx, cfg.omstBin, in.d.home, j.role, j.prefix, cfg.tokenTTL())
				if err == nil {
					_, err = in.sc.Publish(ctx, sync.NewTopic(j.topic, &gridToken{}), &gridToken{Token: tok})
				}
				if err != nil {
					errs <- fmt.Errorf("grid token for %s %s: %w", j.role, j.prefix, err)
				}
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
	close(errs)
	var all []error
	for err := range errs {
		all = append(all, err)
	}
	if err := errors.Join(all...); err != nil {
		return err
	}
	in.re.RecordMessage("grid: %d join tokens minted and published in %.3fs", len(jobs), time.Since(t0).Seconds())
	return nil
}

// waitToken (a head or a worker, grid on) waits for its own join token.
func (in *instance) waitToken(ctx context.Context) error {
	if !in.cfg.grid {
		return nil
	}
	topic := headTokenTopic(in.site)
	if in.role == roleWorker {
		topic = workerTokenTopic(in.site, in.index)
	}
	t, err := waitFirst[gridToken](ctx, in.sc, topic, nil)
	if err != nil {
		return fmt.Errorf("wait for this instance's grid join token: %w", err)
	}
	in.joinToken = t.Token
	return nil
}

// checkMember (grid on) requires the daemon just started to be a member of
// the grid: the root its issuer, the others with the role of their token.
func (in *instance) checkMember() error {
	if !in.cfg.grid {
		return nil
	}
	st := in.d.status
	m := st.Membership
	want := in.role
	if in.role == roleRoot {
		want = "client" // grid init gives the root a client's certificate
	}
	switch {
	case st.Open || m == nil:
		return errors.New("grid=true but the daemon is open (no grid material)")
	case m.Role != want || (in.role == roleRoot) != m.Issuer:
		return fmt.Errorf("grid=true but the daemon's membership is role %q issuer %v, want role %q issuer %v",
			m.Role, m.Issuer, want, in.role == roleRoot)
	}
	in.grid = gridStatusOf(m)
	return nil
}
