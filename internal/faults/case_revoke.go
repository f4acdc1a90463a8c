package faults

import (
	"fmt"
	"strings"
	"sync"
	"time"
)

// caseRevoke: a closed grid (omst grid init at the root; a head h1 and 4
// workers joined with tokens, the workers' redeemed through h1), a root
// paced to 16 MiB/s, and an outsider (no certificate) under h1. All four
// workers get a fresh blob at once while the outsider keeps trying to;
// after a random delay the root revokes a worker drawn at random
// (`omst grid revoke`).
//
// The other three complete with exact bytes; the revoked one ends with
// exact bytes or a clear error, never other or partial bytes, and gets
// nothing afterwards; the outsider never reads a byte; h1 adopted the
// revocation list; no daemon panics or leaks descriptors.
func caseRevoke(e *Env) error {
	ports, err := FreePorts(7)
	if err != nil {
		return err
	}
	root := e.NewDaemonAt("root", e.Dir+"/root", ports[0], nil, "--max-upload-rate", "16M")
	e.Step("omst grid init at the root, start it")
	if r := RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", root.Home, "grid", "init"); r.Code != 0 {
		return fmt.Errorf("grid init: %s", r.Describe())
	}
	if err := e.Start(root); err != nil {
		return err
	}
	token := func(role, prefix string) (string, error) {
		r := RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", root.Home, "grid", "token", "--role", role, "--prefix", prefix, "--ttl", "10m")
		if r.Code != 0 {
			return "", fmt.Errorf("grid token: %s", r.Describe())
		}
		lines := strings.Split(strings.TrimSpace(string(r.Stdout)), "\n")
		return strings.TrimSpace(lines[len(lines)-1]), nil
	}
	tok, err := token("head", "results/s1/")
	if err != nil {
		return err
	}
	e.Step("h1 and 4 workers join with tokens")
	h1 := e.NewDaemonAt("h1", e.Dir+"/h1", ports[1], []*Daemon{root}, "--site", "s1", "--join", tok)
	if err := e.Start(h1); err != nil {
		return err
	}
	var ws []*Daemon
	for i := 1; i <= 4; i++ {
		name := fmt.Sprintf("h1w%d", i)
		tok, err := token("worker", "results/s1/"+name+"/")
		if err != nil {
			return err
		}
		w := e.NewDaemonAt(name, e.Dir+"/"+name, ports[1+i], []*Daemon{h1, root}, "--site", "s1", "--join", tok, "--parent-retry", "2s")
		if err := e.Start(w); err != nil {
			return err
		}
		ws = append(ws, w)
	}
	outsider := e.NewDaemonAt("outsider", e.Dir+"/outsider", ports[6], []*Daemon{h1}, "--site", "s1")
	if err := outsider.Start(e.Ctx, StartTimeout, false); err != nil { // it never gets a session
		return err
	}
	all := append([]*Daemon{root, h1, outsider}, ws...)
	if err := e.SetBaselines(all...); err != nil {
		return err
	}

	name := "rv/blob"
	data := e.Blob(e.Size(24<<20, 48<<20))
	e.Step("put %q (%d bytes) at the root", name, len(data))
	if err := e.MustPut(root, name, data); err != nil {
		return err
	}
	victim := e.Rng.IntN(len(ws))
	delay := time.Duration(200+e.Rng.IntN(1200)) * time.Millisecond
	e.Step("get %q at every worker at once, the outsider trying too; revoke %s after %v", name, ws[victim].Name, delay)
	gets := e.startGets(ws, name)
	stop := make(chan struct{})
	var outsiderRuns []CLIResult
	var owg sync.WaitGroup
	owg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			outsiderRuns = append(outsiderRuns, RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", outsider.Home, "get", name))
		}
	})
	revoked := make(chan CLIResult, 1)
	go func() {
		e.sleep(delay)
		revoked <- RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", root.Home, "grid", "revoke", ws[victim].PeerID())
	}()
	gets.wait()
	close(stop)
	owg.Wait()
	if r := <-revoked; r.Code != 0 {
		return fmt.Errorf("grid revoke: %s", r.Describe())
	}
	verdicts, results, err := gets.judge(e, ws[victim].Name+" revoked")
	if err != nil {
		return err
	}
	for i, w := range ws {
		r, v := results[i], verdicts[i]
		if i != victim && v != Exact {
			return violation("get %q at %s must return the put bytes while %s was revoked: %s, exit %d: %s",
				name, w.Name, ws[victim].Name, v, r.Code, trim(r.Stderr))
		}
	}
	for _, r := range outsiderRuns {
		if r.Err != nil {
			return r.Err
		}
		if r.Code == 0 || len(r.Stdout) > 0 {
			return violation("the outsider's get %q exited %d with %d bytes: a node without a certificate must read nothing", name, r.Code, len(r.Stdout))
		}
	}
	ost, _, err := outsider.Status(e.Ctx)
	if err != nil {
		return err
	}
	e.Printf("outsider: %d gets, all refused; %d chunk bytes fetched", len(outsiderRuns), ost.BytesFetched)
	if ost.BytesFetched != 0 {
		return violation("the outsider fetched %d chunk bytes", ost.BytesFetched)
	}

	e.Step("the revocation reached h1; %s gets nothing new", ws[victim].Name)
	deadline := time.Now().Add(reconnectWithin)
	for {
		st, _, err := h1.Status(e.Ctx)
		if err != nil {
			return err
		}
		if st.Membership != nil && st.Membership.RevocationSeq >= 1 {
			break
		}
		if time.Now().After(deadline) {
			return violation("h1 has not adopted the revocation list %v after omst grid revoke", reconnectWithin)
		}
		e.sleep(200 * time.Millisecond)
	}
	fresh := "rv/after"
	if err := e.MustPut(root, fresh, e.Blob(1<<20)); err != nil {
		return err
	}
	r := RunCLI(e.Ctx, e.Bin, OpTimeout, nil, "--home", ws[victim].Home, "get", fresh)
	if r.Code == 0 {
		return violation("the revoked %s still got %q", ws[victim].Name, fresh)
	}
	e.Printf("%s after its revocation: exit %d: %s", ws[victim].Name, r.Code, trim(r.Stderr))
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(all...)
}
