package main

// omst grid up | status | down: bring a grid described by a topology file
// up over ssh, look at it, take it down. The decisions (what to do on each
// host given what was observed there), the ssh command lines and the remote
// scripts are in pkg/gridops; this file runs ssh and prints.

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"debug/macho"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/omst-project/omst/pkg/gridops"
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/topology"
)

// Time bounds of the remote steps.
const (
	probeTimeout = 90 * time.Second // one probe script (the status request inside has 30 s)
	copyTimeout  = 15 * time.Minute // copying the binary to one host
	startWait    = 60 * time.Second // a started daemon has this long to answer (its join included)
	stopWait     = 30 * time.Second // a stopped daemon has this long to exit before SIGKILL (restarts)
	tokenTTL     = 15 * time.Minute // join tokens grid up issues are redeemed at once
)

// sshFlags are the flags every grid command that uses ssh takes.
type sshFlags struct {
	options        []string
	config         string
	connectTimeout time.Duration
	parallel       int
}

func (f *sshFlags) register(fs *pflag.FlagSet) {
	fs.StringArrayVar(&f.options, "ssh-option", nil, "an ssh option, as ssh -o takes it (e.g. UserKnownHostsFile=/path, StrictHostKeyChecking=accept-new),\n"+
		"given to every ssh, jump hops included, ahead of omst's own; repeatable")
	fs.StringVar(&f.config, "ssh-config", "", "ssh configuration file for every ssh, jump hops included (ssh -F; default: ssh's, ~/.ssh/config)")
	fs.DurationVar(&f.connectTimeout, "connect-timeout", 10*time.Second, "ssh connect timeout per connection (ssh -o ConnectTimeout)")
	fs.IntVar(&f.parallel, "parallel", 16, "hosts worked on at once")
}

// ssh checks the flags and finds the ssh client.
// load parses the topology file and builds the ssh client from the flags:
// what every `omst grid up|status|down` starts with.
func (f *sshFlags) load(file string) (*topology.Topology, gridops.SSH, error) {
	top, err := topology.ParseFile(file)
	if err != nil {
		return nil, gridops.SSH{}, topoError(err)
	}
	s, err := f.ssh()
	if err != nil {
		return nil, gridops.SSH{}, err
	}
	return top, s, nil
}

func (f *sshFlags) ssh() (gridops.SSH, error) {
	if f.parallel < 1 {
		return gridops.SSH{}, usageError{fmt.Errorf("--parallel %d: want at least 1", f.parallel)}
	}
	if f.connectTimeout <= 0 {
		return gridops.SSH{}, usageError{fmt.Errorf("--connect-timeout %s: want a positive duration", f.connectTimeout)}
	}
	for _, o := range f.options {
		if k, _, ok := strings.Cut(o, "="); !ok || strings.TrimSpace(k) == "" || strings.ContainsAny(o, "\n\r") {
			return gridops.SSH{}, usageError{fmt.Errorf("--ssh-option %q: want Key=Value, as ssh -o takes it", o)}
		}
	}
	if f.config != "" {
		if _, err := os.Stat(f.config); err != nil {
			return gridops.SSH{}, usageError{fmt.Errorf("--ssh-config: %w", err)}
		}
	}
	path, err := exec.LookPath("ssh")
	if err != nil {
		return gridops.SSH{}, fmt.Errorf("no ssh client: %w (Debian: apt-get install openssh-client)", err)
	}
	return gridops.SSH{Path: path, ConfigFile: f.config, Options: f.options, ConnectTimeout: f.connectTimeout}, nil
}

// gridRunner runs scripts on a grid's hosts and prints progress lines.
type gridRunner struct {
	ssh   gridops.SSH
	top   *topology.Topology
	cols  gridops.Columns
	outMu sync.Mutex // over out
	out   io.Writer
}

// line prints one progress line for h.
func (r *gridRunner) line(h *topology.Host, fields ...string) {
	r.outMu.Lock()
	defer r.outMu.Unlock()
	fmt.Fprintln(r.out, r.cols.Line(h, fields...))
}

// raw runs the remote command on h with standard input from in within
// timeout and returns its standard output. The error holds ssh's or the
// command's standard error, trimmed to a line.
func (r *gridRunner) raw(ctx context.Context, h *topology.Host, remote string, in io.Reader, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	argv := r.ssh.Command(h.SSH, remote)
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Stdin = in
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.WaitDelay = 5 * time.Second // a ProxyCommand's ssh that outlives ours
	err := cmd.Run()
	msg := gridops.TrimStderr(stderr.Bytes())
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), nil
	case ctx.Err() != nil:
		if msg != "" {
			msg = ": " + msg
		}
		return stdout.String(), fmt.Errorf("timed out after %v%s", timeout, msg)
	case errors.As(err, &ee) && ee.ExitCode() == 255:
		switch {
		case msg == "":
			msg = "ssh: exited with status 255"
		case !strings.HasPrefix(msg, "ssh:"):
			msg = "ssh: " + msg
		}
		return stdout.String(), errors.New(msg)
	case errors.As(err, &ee):
		if msg == "" {
			msg = "(nothing on standard error)"
		}
		return stdout.String(), fmt.Errorf("%s (exit status %d)", msg, ee.ExitCode())
	}
	return stdout.String(), err
}

// scriptOut runs a script on h (sent to the remote sh on its standard
// input) and returns its standard output.
func (r *gridRunner) scriptOut(ctx context.Context, h *topology.Host, script string, timeout time.Duration) (string, error) {
	return r.raw(ctx, h, gridops.ScriptCommand, strings.NewReader(script), timeout)
}

// scriptReport runs a script on h and parses its report.
func (r *gridRunner) scriptReport(ctx context.Context, h *topology.Host, script string, timeout time.Duration) (gridops.Report, error) {
	return r.report(ctx, h, gridops.ScriptCommand, strings.NewReader(script), timeout)
}

// report runs the remote command on h with standard input from in (a
// script for gridops.ScriptCommand) and parses its report.
func (r *gridRunner) report(ctx context.Context, h *topology.Host, remote string, in io.Reader, timeout time.Duration) (gridops.Report, error) {
	out, err := r.raw(ctx, h, remote, in, timeout)
	if err != nil {
		return gridops.Report{}, err
	}
	rep, err := gridops.ParseReport(out)
	if err != nil {
		return rep, fmt.Errorf("%w (is there a POSIX sh on the host?)", err)
	}
	return rep, nil
}

// forEach calls f(0) ... f(n-1), at most limit at once, and waits.
func forEach(n, limit int, f func(i int)) {
	sem := make(chan struct{}, limit)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// lower is the key of a host in maps.
func lower(h *topology.Host) string { return strings.ToLower(h.Host) }

func gridUpCmd(g *globals) *cobra.Command {
	var (
		sf     sshFlags
		binary string
	)
	c := &cobra.Command{
		Use:   "up FILE",
		Short: "Bring the grid of a topology file up over ssh: install omst, configure and start every daemon",
		Long: "Over ssh, host by host, parents before children (the root, then the heads, then the workers, each\n" +
			"group in parallel): make DIR, copy the omst binary to DIR/bin/omst unless the same one is there,\n" +
			"write the daemon's configuration (DIR/home/config.toml: site, listen, settings, --parent with its\n" +
			"parent's and fallbacks' peer IDs), and start the daemon detached unless it answers and is\n" +
			"current (restart it if its binary or configuration changed). In a closed grid (the root holds\n" +
			"HOME/grid/grid.key) every host without a certificate gets a join token issued on the root.\n" +
			"Prints a line per host: host, role, site, copied|up-to-date, started|restarted|running, peer ID.\n" +
			"A host that fails is reported with ssh's error and its subtree skipped; the exit status is 1\n" +
			"if any host failed. It refuses a DIR (or a directory above it) that another user owns or may\n" +
			"write. Run it again at any time: it changes nothing on hosts that are up and\n" +
			"current and starts what is missing. See docs/operations.md.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			top, s, err := sf.load(args[0])
			if err != nil {
				return err
			}
			if binary == "" {
				if binary, err = os.Executable(); err != nil {
					return fmt.Errorf("find this omst binary: %w (give --binary)", err)
				}
			}
			lb, err := inspectBinary(binary)
			if err != nil {
				return err
			}
			if lb.interp != "" && !g.quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "note: %s is dynamically linked (%s): hosts without the same C library cannot run it;\n"+
					"  build a static one with CGO_ENABLED=0 (make build does) and give it with --binary\n", binary, lb.interp)
			}
			u := &upRun{gridRunner: gridRunner{ssh: s, top: top, cols: gridops.NewColumns(top), out: cmd.OutOrStdout()},
				bin: lb, parallel: sf.parallel}
			t0 := time.Now()
			err = u.run(cmd.Context())
			if !g.quiet {
				fmt.Fprintf(cmd.ErrOrStderr(), "grid up: %s in %v\n", u.summary(), time.Since(t0).Round(100*time.Millisecond))
			}
			return err
		},
	}
	sf.register(c.Flags())
	c.Flags().StringVar(&binary, "binary", "", "the omst binary to install on the hosts (default: this one); it must run there: a static build for their OS and CPU")
	return c
}

// localBinary is the binary grid up installs.
type localBinary struct {
	path     string
	sha256   string
	platform string // GOOS/GOARCH, "" unknown
	interp   string // the ELF interpreter of a dynamically linked binary
}

// inspectBinary hashes the binary at path and reads its platform and
// whether it is dynamically linked.
func inspectBinary(path string) (localBinary, error) {
	lb := localBinary{path: path}
	f, err := os.Open(path)
	if err != nil {
		return lb, fmt.Errorf("--binary: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return lb, fmt.Errorf("--binary: %w", err)
	}
	lb.sha256 = hex.EncodeToString(h.Sum(nil))
	if ef, err := elf.NewFile(f); err == nil {
		goos := "linux"
		switch ef.OSABI {
		case elf.ELFOSABI_FREEBSD:
			goos = "freebsd"
		case elf.ELFOSABI_NETBSD:
			goos = "netbsd"
		case elf.ELFOSABI_OPENBSD:
			goos = "openbsd"
		}
		arch := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386", elf.EM_ARM: "arm",
			elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64", elf.EM_LOONGARCH: "loong64"}[ef.Machine]
		if ef.Machine == elf.EM_PPC64 {
			arch = map[bool]string{true: "ppc64le", false: "ppc64"}[ef.ByteOrder.String() == "LittleEndian"]
		}
		if arch != "" {
			lb.platform = goos + "/" + arch
		}
		for _, p := range ef.Progs {
			if p.Type == elf.PT_INTERP {
				b, _ := io.ReadAll(p.Open())
				lb.interp = strings.TrimRight(string(b), "\x00")
				if lb.interp == "" {
					lb.interp = "an interpreter"
				}
			}
		}
		return lb, nil
	}
	if mf, err := macho.NewFile(f); err == nil {
		if arch := map[macho.Cpu]string{macho.CpuAmd64: "amd64", macho.CpuArm64: "arm64"}[mf.Cpu]; arch != "" {
			lb.platform = "darwin/" + arch
		}
		return lb, nil
	}
	if fat, err := macho.NewFatFile(f); err == nil {
		fat.Close()
		return lb, fmt.Errorf("--binary %s: a universal macOS binary: hosts need a Linux build (GOOS=linux CGO_ENABLED=0 go build ./cmd/omst)", path)
	}
	return lb, nil
}

// upRun is one `omst grid up`.
type upRun struct {
	gridRunner
	bin      localBinary
	parallel int

	mu       sync.Mutex
	ids      map[string]string // lower-cased host -> peer ID of its daemon, once up
	failed   map[string]bool   // lower-cased host -> failed or skipped
	closed   bool              // the root holds a grid key
	counts   map[string]int    // daemon word -> hosts
	nFailed  int
	nSkipped int
}

// upHost is one host's state through a phase.
type upHost struct {
	h      *topology.Host
	rep    gridops.Report
	err    error  // the probe's, or a decision's: the host failed
	skip   string // why it is skipped
	config string // its configuration, without join
	act    gridops.Action
	token  string
}

func (u *upRun) run(ctx context.Context) error {
	u.ids, u.failed, u.counts = map[string]string{}, map[string]bool{}, map[string]int{}
	for pi, phase := range gridops.Phases(u.top) {
		hosts := make([]*upHost, len(phase))
		for i, h := range phase {
			hosts[i] = &upHost{h: h, skip: gridops.Blocked(h, u.failed)}
		}
		forEach(len(hosts), u.parallel, func(i int) {
			x := hosts[i]
			if x.skip == "" {
				x.rep, x.err = u.scriptReport(ctx, x.h, gridops.ProbeScript(x.h), probeTimeout)
			}
		})
		if pi == 0 && hosts[0].err == nil && hosts[0].skip == "" {
			u.closed = hosts[0].rep.HasGridKey
		}
		var reqs []gridops.TokenRequest
		var need []*upHost
		for _, x := range hosts {
			if x.skip != "" || x.err != nil {
				continue
			}
			x.err = u.decide(x)
			if x.err == nil && x.act.Token {
				reqs = append(reqs, gridops.TokenFor(x.h))
				need = append(need, x)
			}
		}
		if len(reqs) > 0 {
			u.issueTokens(ctx, reqs, need)
		}
		forEach(len(hosts), u.parallel, func(i int) { u.finish(ctx, hosts[i]) })
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	if n := u.nFailed + u.nSkipped; n > 0 {
		return fmt.Errorf("%d of %d hosts are not up (%d failed, %d skipped)", n, len(u.top.Hosts), u.nFailed, u.nSkipped)
	}
	return nil
}

// decide works out x's configuration and actions from its probe.
func (u *upRun) decide(x *upHost) error {
	u.mu.Lock()
	parents, err := gridops.ParentAddrs(u.top, x.h, u.ids)
	u.mu.Unlock()
	if err != nil {
		return err
	}
	if x.config, err = daemonConfig(x.h, parents); err != nil {
		return err
	}
	x.act, err = gridops.Decide(x.h.Role, gridops.Want{Platform: u.bin.platform, BinSHA256: u.bin.sha256, Config: x.config, Closed: u.closed}, x.rep.Observation)
	return err
}

// issueTokens issues the join tokens of reqs on the root, in one ssh
// session, and gives them to the hosts that need them.
func (u *upRun) issueTokens(ctx context.Context, reqs []gridops.TokenRequest, need []*upHost) {
	root := u.top.Root()
	out, err := u.scriptOut(ctx, root, gridops.TokenScript(root, reqs, tokenTTL), probeTimeout+time.Duration(len(reqs))*5*time.Second)
	var toks []string
	var errs []error
	if err == nil {
		toks, errs, err = gridops.ParseTokens(out, len(reqs))
	}
	for i, x := range need {
		switch {
		case err != nil:
			x.err = fmt.Errorf("join token from the root %s: %w", root.Host, err)
		case errs[i] != nil:
			x.err = fmt.Errorf("join token: %w", errs[i])
		default:
			x.token = toks[i]
		}
	}
}

// finish acts on one host (copy, configure, start) and prints its line.
func (u *upRun) finish(ctx context.Context, x *upHost) {
	fail := func(kind, msg string) {
		u.mu.Lock()
		u.failed[lower(x.h)] = true
		if kind == "skipped" {
			u.nSkipped++
		} else {
			u.nFailed++
		}
		u.mu.Unlock()
		u.line(x.h, msg)
	}
	if x.skip != "" {
		fail("skipped", x.skip)
		return
	}
	if x.err == nil {
		x.err = u.act(ctx, x)
	}
	if x.err != nil {
		fail("failed", "FAILED: "+x.err.Error())
		return
	}
	st := x.rep.Status
	bin, daemon := x.act.Words()
	u.mu.Lock()
	u.ids[lower(x.h)] = st.PeerID
	u.counts[daemon]++
	u.mu.Unlock()
	fields := []string{bin, daemon, st.PeerID}
	if x.token != "" {
		fields = append(fields, "(joined the grid with a token)")
	}
	u.line(x.h, fields...)
}

// act carries out x.act; x.rep ends up with the daemon's status.
func (u *upRun) act(ctx context.Context, x *upHost) error {
	a := x.act
	if a.Copy {
		f, err := os.Open(u.bin.path)
		if err != nil {
			return err
		}
		rep, err := u.report(ctx, x.h, gridops.CopyCommand(x.h), f, copyTimeout)
		f.Close()
		if err != nil {
			return fmt.Errorf("copy the binary: %w", err)
		}
		if rep.BinSHA256 != "" && rep.BinSHA256 != u.bin.sha256 {
			return fmt.Errorf("copy the binary: its SHA-256 on the host is %s, not %s", rep.BinSHA256, u.bin.sha256)
		}
	}
	if a.WriteConfig || a.Stop || a.Start {
		cfg := x.config
		if x.token != "" {
			b, err := toml.Marshal(map[string]string{"join": x.token})
			if err != nil {
				return err
			}
			cfg += string(b)
		}
		rep, err := u.scriptReport(ctx, x.h, gridops.ApplyScript(x.h, a, cfg, stopWait, startWait), startWait+stopWait+probeTimeout)
		if err != nil {
			return fmt.Errorf("start the daemon: %w", err)
		}
		x.rep.Status, x.rep.StatusErr = rep.Status, rep.StatusErr
	}
	if x.rep.Status == nil || x.rep.Status.PeerID == "" {
		why := x.rep.StatusErr
		if why == "" {
			why = "no peer ID"
		}
		return fmt.Errorf("the daemon does not answer: %s (its log: %s/daemon.log)", why, x.h.Home())
	}
	return nil
}

// summary counts the hosts by outcome.
func (u *upRun) summary() string {
	up := 0
	var parts []string
	for _, w := range []string{gridops.Started, gridops.Restarted, gridops.Running} {
		if n := u.counts[w]; n > 0 {
			up += n
			parts = append(parts, fmt.Sprintf("%d %s", n, w))
		}
	}
	s := fmt.Sprintf("%d of %d hosts up", up, len(u.top.Hosts))
	if len(parts) > 0 {
		s += " (" + strings.Join(parts, ", ") + ")"
	}
	if u.nFailed > 0 {
		s += fmt.Sprintf(", %d failed", u.nFailed)
	}
	if u.nSkipped > 0 {
		s += fmt.Sprintf(", %d skipped", u.nSkipped)
	}
	return s
}

// gridUpHeader heads every configuration file grid up writes.
const gridUpHeader = "# Written by `omst grid up` from the grid's topology file: change that file and run it\n" +
	"# again (what is edited here is replaced). Keys are `omst daemon` flags.\n"

// daemonConfig is host h's HOME/config.toml: its topology settings
// (DaemonArgs: site, listen, relay mode, sizes, daemon_args) and parents,
// as the daemon's configuration keys, in name order.
func daemonConfig(h *topology.Host, parents []string) (string, error) {
	args := h.DaemonArgs()
	if len(args) < 3 || args[0] != "daemon" || args[1] != "--home" {
		return "", fmt.Errorf("unexpected daemon arguments %q", args)
	}
	rest := slices.Clone(args[3:])
	for _, p := range parents {
		rest = append(rest, "--parent", p)
	}
	fs := daemonCmd(&globals{}).Flags()
	fs.SetOutput(io.Discard)
	if err := fs.Parse(rest); err != nil {
		return "", fmt.Errorf("daemon_args %q: %w", h.Daemon.ExtraArgs, err)
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("daemon_args %q: %q is not a flag", h.Daemon.ExtraArgs, fs.Arg(0))
	}
	var keys []string
	fs.Visit(func(f *pflag.Flag) { keys = append(keys, f.Name) })
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString(gridUpHeader)
	for _, k := range keys {
		if notInConfig[k] {
			return "", fmt.Errorf("daemon_args: --%s cannot be set there", k)
		}
		line, err := toml.Marshal(map[string]any{k: flagValue(fs.Lookup(k))})
		if err != nil {
			return "", err
		}
		b.Write(line)
	}
	return b.String(), nil
}

func gridStatusCmd(g *globals) *cobra.Command {
	var (
		sf     sshFlags
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "status FILE",
		Short: "Show every host of a topology file over ssh: daemon up or down, parent connected, cache, bytes, transfers",
		Long: "Ask every host's daemon for its status over ssh (in parallel) and print a table: state (up;\n" +
			"down: omst installed, no daemon answers; no-omst; unreachable: ssh failed), the parent it is\n" +
			"connected to (the host, matched by peer ID; '(fallback)' when it is not its own parent), cache\n" +
			"used/capacity, bytes received and sent, transfers under way; then why each host that is not\n" +
			"up is not. Exits 1 if any host is not up.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			top, s, err := sf.load(args[0])
			if err != nil {
				return err
			}
			r := &gridRunner{ssh: s, top: top}
			probes := make([]gridops.Probe, len(top.Hosts))
			forEach(len(top.Hosts), sf.parallel, func(i int) {
				rep, err := r.scriptReport(cmd.Context(), top.Hosts[i], gridops.ProbeScript(top.Hosts[i]), probeTimeout)
				probes[i] = gridops.Probe{Obs: rep.Observation}
				if err != nil {
					probes[i].Err = err.Error()
				}
			})
			if err := cmd.Context().Err(); err != nil {
				return err
			}
			byHost := map[string]gridops.Probe{}
			for i, h := range top.Hosts {
				byHost[lower(h)] = probes[i]
			}
			rows := gridops.StatusRows(top, byHost)
			notUp := 0
			for _, row := range rows {
				if row.State != gridops.StateUp {
					notUp++
				}
			}
			if asJSON {
				out := make([]gridStatusJSON, len(rows))
				for i, row := range rows {
					out[i] = gridStatusJSON{Host: row.Host.Host, Role: string(row.Host.Role), Site: row.Host.Site, State: row.State,
						Parent: row.Parent, ParentOK: row.ParentOK, Detail: row.Detail, Status: byHost[lower(row.Host)].Obs.Status}
				}
				if err := printJSON(cmd.OutOrStdout(), out); err != nil {
					return err
				}
			} else {
				printGridStatus(cmd.OutOrStdout(), rows)
			}
			if notUp > 0 {
				return fmt.Errorf("%d of %d hosts are not up", notUp, len(rows))
			}
			return nil
		},
	}
	sf.register(c.Flags())
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON: per host its state, parent, detail and the daemon's status (as omst status --json)")
	return c
}

// gridStatusJSON is one host in `omst grid status --json`.
type gridStatusJSON struct {
	Host     string            `json:"host"`
	Role     string            `json:"role"`
	Site     string            `json:"site,omitempty"`
	State    string            `json:"state"`
	Parent   string            `json:"parent"`
	ParentOK bool              `json:"parent_ok"`
	Detail   string            `json:"detail,omitempty"`
	Status   *rpcbridge.Status `json:"status,omitempty"`
}

func printGridStatus(w io.Writer, rows []gridops.StatusRow) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tROLE\tSITE\tSTATE\tPARENT\tCACHE\tIN\tOUT\tTRANSFERS")
	for _, r := range rows {
		site := r.Host.Site
		if site == "" {
			site = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.Host.Host, r.Host.Role, site, r.State, r.Parent, r.Cache, r.In, r.Out, r.Transfers)
	}
	tw.Flush()
	for _, r := range rows {
		if r.Detail != "" {
			fmt.Fprintf(w, "%s: %s: %s\n", r.Host.Host, r.State, r.Detail)
		}
	}
}

func gridDownCmd(g *globals) *cobra.Command {
	var (
		sf      sshFlags
		purge   bool
		timeout time.Duration
	)
	c := &cobra.Command{
		Use:   "down FILE",
		Short: "Stop every daemon of a topology file over ssh, children first; --purge removes what grid up installed",
		Long: "Over ssh, the workers, then the heads, then the root (each group in parallel): stop the daemon\n" +
			"(SIGTERM to the pid in HOME/lock, SIGKILL if it has not exited after --timeout). With --purge,\n" +
			"also remove DIR/bin/omst and DIR/home (cache, identity, configuration, log), then DIR if nothing\n" +
			"else is in it; the root of a closed grid keeps HOME/grid (the grid key) and HOME/identity.key.\n" +
			"--purge refuses a DIR that is /, the ssh user's home directory or above it, has a .. component,\n" +
			"or was not made by grid up (no DIR/" + gridops.GridMarker + "); like grid up, down refuses a DIR another\n" +
			"user owns or may write. Run it again at any time. Exits 1 if a host could not be reached, was\n" +
			"refused, or its daemon not stopped.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			top, s, err := sf.load(args[0])
			if err != nil {
				return err
			}
			if timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %s: want a positive duration", timeout)}
			}
			if purge {
				// Before anything runs anywhere; each host checks again on
				// its resolved path.
				for _, h := range top.Hosts {
					if err := gridops.CheckPurgeDir(h.Dir); err != nil {
						return fmt.Errorf("--purge refused for %s (line %d): %w", h.Host, h.Line, err)
					}
				}
			}
			r := &gridRunner{ssh: s, top: top, cols: gridops.NewColumns(top), out: cmd.OutOrStdout()}
			phases := gridops.Phases(top)
			var mu sync.Mutex
			failed := 0
			for i := len(phases) - 1; i >= 0; i-- {
				phase := phases[i]
				forEach(len(phase), sf.parallel, func(j int) {
					h := phase[j]
					rep, err := r.scriptReport(cmd.Context(), h, gridops.DownScript(h, purge, timeout), timeout+probeTimeout)
					if err != nil {
						mu.Lock()
						failed++
						mu.Unlock()
						r.line(h, "FAILED: "+err.Error())
						return
					}
					r.line(h, downWords(h, rep)...)
				})
				if err := cmd.Context().Err(); err != nil {
					return err
				}
			}
			if failed > 0 {
				return fmt.Errorf("%d of %d hosts failed", failed, len(top.Hosts))
			}
			return nil
		},
	}
	sf.register(c.Flags())
	c.Flags().BoolVar(&purge, "purge", false, "also remove DIR/bin/omst and DIR/home (and DIR, when then empty) on every host")
	c.Flags().DurationVar(&timeout, "timeout", stopWait, "how long a daemon has to exit after SIGTERM before SIGKILL")
	return c
}

// downWords are the fields of a `grid down` progress line.
func downWords(h *topology.Host, rep gridops.Report) []string {
	w := []string{map[string]string{"stopped": "stopped", "killed": "killed (SIGKILL after the timeout)", "none": "not-running"}[rep.Stop]}
	switch rep.Purge {
	case "removed":
		w = append(w, "purged", h.Dir)
	case "left":
		w = append(w, "purged", "(other files keep "+h.Dir+")")
	case "kept-grid":
		w = append(w, "purged", "(kept the grid key and the root's identity: "+h.Home()+"/grid, "+h.Home()+"/identity.key)")
	case "absent":
		w = append(w, "nothing to purge")
	}
	return w
}
