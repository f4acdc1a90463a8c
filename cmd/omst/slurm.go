package main

// omst slurm up | down | bcast: omst inside a Slurm allocation. up starts
// one daemon per node of the job through one srun step (the tasks of
// `omst slurm task`, which run the daemon in the foreground, so that Slurm
// ends them with the job); down stops them and removes their homes;
// bcast puts a file (or takes a blob) and has every node get it into a
// path. The decisions are in slurmplan.go, the rendezvous in slurmrdv.go,
// the clients' socket rule in slurmsock.go.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/node"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// Step names of the srun steps, as squeue shows them.
const (
	stepDaemons = "omst-daemons"
	stepDown    = "omst-down"
	stepBcast   = "omst-bcast"
)

func slurmCmd(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "slurm",
		Short: "Run omst inside a Slurm allocation: daemons on its nodes (up, down), a file to every node (bcast)",
		Long: "Bring omst up on the nodes of a Slurm job from its batch script (or an salloc shell): one daemon\n" +
			"per node, started by srun, with its home on the node's local disk ($TMPDIR or /tmp, in\n" +
			"omst-slurm-JOBID/NODE), ended by `omst slurm down` or by the end of the job. Inside the job's\n" +
			"steps the CLI, the C library and the Python package use their node's daemon of the job\n" +
			"without any variable to set (docs/operations.md, \"Under Slurm\").",
	}
	c.AddCommand(slurmUpCmd(g), slurmDownCmd(g), slurmBcastCmd(g), slurmTaskCmd(g))
	return c
}

// slurmJob returns the job ID and its nodes, in order (scontrol show
// hostnames of $SLURM_JOB_NODELIST).
func slurmJob(ctx context.Context) (string, []string, error) {
	job := os.Getenv("SLURM_JOB_ID")
	if job == "" {
		return "", nil, ErrNoAllocation
	}
	if !validComponent(job) {
		return "", nil, fmt.Errorf("SLURM_JOB_ID %q: not a job ID", job)
	}
	list := os.Getenv("SLURM_JOB_NODELIST")
	if list == "" {
		list = os.Getenv("SLURM_NODELIST")
	}
	if list == "" {
		return "", nil, fmt.Errorf("job %s: no SLURM_JOB_NODELIST in the environment", job)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "scontrol", "show", "hostnames", list)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", nil, fmt.Errorf("scontrol show hostnames %s: %w %s", list, err, strings.TrimSpace(stderr.String()))
	}
	nodes, err := parseHostnames(string(out))
	if err != nil {
		return "", nil, err
	}
	return job, nodes, nil
}

// selfExe is the omst binary the tasks run: this one (it must be at the
// same path on every node: a shared file system, or copied there first).
func selfExe() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find the omst executable: %w", err)
	}
	return exe, nil
}

func slurmUpCmd(g *globals) *cobra.Command {
	var (
		head    string
		parents []string
		joins   []string
		site    string
		timeout time.Duration
	)
	c := &cobra.Command{
		Use:   "up [-- DAEMON-FLAGS...]",
		Short: "Start one omst daemon per node of this Slurm job; print the head's address",
		Long: "Start one daemon on every node of the job ($SLURM_JOB_ID) through one srun step (--overlap,\n" +
			"one task per node), each with its home in $TMPDIR or /tmp, omst-slurm-JOBID/NODE, on that node.\n" +
			"The first node of the allocation (or --head-node) is the head of the job's site, the others\n" +
			"its workers. With --parent, the head joins an existing grid's root (a closed grid: --join, a\n" +
			"token per node, the head's first); without, it is a root. Returns once every daemon is up and\n" +
			"connected to its parent, and prints the head's address; if a node's daemon did not start,\n" +
			"names it, leaves the others up and exits 1. The daemons end with `omst slurm down` or with\n" +
			"the job. Flags after -- go to every `omst daemon` (e.g. -- --cache-size 20G).",
		RunE: func(cmd *cobra.Command, args []string) error {
			if timeout <= 0 {
				return usageError{fmt.Errorf("--timeout %s: want a positive duration", timeout)}
			}
			job, nodes, err := slurmJob(cmd.Context())
			if err != nil {
				return err
			}
			hd, err := chooseHead(nodes, head)
			if err != nil {
				return err
			}
			tokens, err := assignTokens(nodes, hd, joins)
			if err != nil {
				return err
			}
			if site == "" {
				site = slurmSite(os.Getenv("SLURM_CLUSTER_NAME"), job)
			}
			plan := daemonPlan{Nodes: nodes, Head: hd, Site: site, Parents: parents, Tokens: tokens, Extra: args}
			return slurmUp(cmd, job, plan, timeout)
		},
	}
	f := c.Flags()
	f.StringVar(&head, "head-node", "", "the `NODE` whose daemon is the head (default: the allocation's first)")
	f.StringArrayVar(&parents, "parent", nil, "a grid's root `ADDR` (multiaddr ending in /p2p/<ID>) the head joins; repeatable (fallbacks, also the workers')")
	f.StringArrayVar(&joins, "join", nil, "a join `TOKEN` of a closed grid (omst grid token): one per node, the head's first; repeatable")
	f.StringVar(&site, "site", "", "the site `NAME` of the job's daemons (default CLUSTER-JOBID)")
	f.DurationVar(&timeout, "timeout", 60*time.Second, "how long the daemons have to start and connect")
	return c
}

// slurmUp runs the daemons' srun step and waits for every node's report.
func slurmUp(cmd *cobra.Command, job string, plan daemonPlan, timeout time.Duration) error {
	ctx := cmd.Context()
	exe, err := selfExe()
	if err != nil {
		return err
	}
	srun, err := exec.LookPath("srun")
	if err != nil {
		return fmt.Errorf("no srun: %w", err)
	}
	ln, err := net.Listen("tcp", ":0")
	if err != nil {
		return fmt.Errorf("rendezvous: %w", err)
	}
	defer ln.Close()
	tok := make([]byte, 32)
	rand.Read(tok)
	token := hex.EncodeToString(tok)
	srv := newRdvServer(ln, token, plan, timeout)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go srv.serve(sctx)

	// srun's output goes to a file removed at once: up reads it for its
	// errors; nothing stays behind once srun ends.
	out, err := os.CreateTemp("", "omst-slurm-srun-*.log")
	if err != nil {
		return err
	}
	os.Remove(out.Name())
	defer out.Close()
	host, _ := os.Hostname()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	run := exec.Command(srun, srunArgs(job, plan.Nodes, stepDaemons, []string{exe, "slurm", "task"})...)
	run.Env = append(os.Environ(), rdvPortEnv+"="+port, rdvHostEnv+"="+host, rdvTokenEnv+"="+token)
	run.Stdout, run.Stderr = out, out
	run.SysProcAttr = &syscall.SysProcAttr{Setsid: true} // outlives up; ends with its step
	if err := run.Start(); err != nil {
		return fmt.Errorf("srun: %w", err)
	}
	exited := make(chan struct{})
	go func() { run.Wait(); close(exited) }()
	fmt.Fprintf(cmd.ErrOrStderr(), "omst slurm: starting %d daemon(s) on %s (head %s, site %s)\n", len(plan.Nodes), strings.Join(plan.Nodes, ","), plan.Head, plan.Site)

	deadline := time.NewTimer(timeout + 15*time.Second) // the tasks bound their own waits by timeout
	defer deadline.Stop()
	var why string
wait:
	for len(srv.snapshot()) < len(plan.Nodes) {
		select {
		case <-srv.changed:
		case <-exited:
			// Reports in flight when srun ended still count.
			time.Sleep(500 * time.Millisecond)
			if len(srv.snapshot()) < len(plan.Nodes) {
				why = fmt.Sprintf("srun ended (%s)", run.ProcessState)
			}
			break wait
		case <-deadline.C:
			why = fmt.Sprintf("no report within %v", timeout+15*time.Second)
			break wait
		case <-ctx.Done():
			run.Process.Signal(syscall.SIGTERM)
			return fmt.Errorf("interrupted while the daemons started: stopped srun (pid %d)", run.Process.Pid)
		}
	}
	srv.close() // from here on the results are final
	res := srv.snapshot()
	var failed []string
	for _, n := range plan.Nodes {
		r, ok := res[n]
		switch {
		case !ok:
			failed = append(failed, n)
			fmt.Fprintf(cmd.ErrOrStderr(), "omst slurm: %s: no daemon: %s\n", n, why)
		case !r.OK:
			failed = append(failed, n)
			fmt.Fprintf(cmd.ErrOrStderr(), "omst slurm: %s: no daemon: %s\n", n, r.Err)
		}
	}
	if len(failed) > 0 && why != "" {
		if tail := fileTail(out, 15); tail != "" {
			fmt.Fprintf(cmd.ErrOrStderr(), "omst slurm: srun's output ends:\n%s\n", tail)
		}
	}
	hr := res[plan.Head]
	if hr.OK {
		addrs := orderAddrs(hr.Addrs)
		if len(addrs) > 0 {
			fmt.Fprintln(cmd.OutOrStdout(), addrs[0])
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w on %s (%d of %d nodes); the others are up: `omst slurm down` stops them", errSlurmFailed, strings.Join(failed, ","), len(failed), len(plan.Nodes))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "omst slurm: %d daemon(s) up, head %s\n", len(plan.Nodes), plan.Head)
	return nil
}

// errSlurmFailed is returned when some nodes' daemons did not start.
var errSlurmFailed = errors.New("no omst daemon")

// fileTail returns the last n lines written to f, indented.
func fileTail(f *os.File, n int) string {
	st, err := f.Stat()
	if err != nil {
		return ""
	}
	from := max(st.Size()-64<<10, 0)
	b, err := io.ReadAll(io.NewSectionReader(f, from, st.Size()-from))
	if err != nil || len(bytes.TrimSpace(b)) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  " + strings.Join(lines, "\n  ")
}

func slurmDownCmd(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "down",
		Short: "Stop this Slurm job's omst daemons and remove their homes",
		Long: "On every node of the job, through one srun step: stop the job's daemon (SIGTERM, SIGKILL\n" +
			"after 10 s) and remove its home (omst-slurm-JOBID/NODE). Prints a line per node; exits 1 if\n" +
			"a node could not be cleaned up. Nothing to stop is not an error.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			job, nodes, err := slurmJob(cmd.Context())
			if err != nil {
				return err
			}
			return slurmStep(cmd, job, nodes, stepDown, []string{"--stop"})
		},
	}
}

// slurmStep runs `omst slurm task ARGS` once on every node and waits,
// passing its output through; it fails if any task did.
func slurmStep(cmd *cobra.Command, job string, nodes []string, name string, taskArgs []string) error {
	exe, err := selfExe()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(cmd.Context(), 15*time.Minute)
	defer cancel()
	run := exec.CommandContext(ctx, "srun", srunArgs(job, nodes, name, append([]string{exe, "slurm", "task"}, taskArgs...))...)
	run.Stdout, run.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
	run.WaitDelay = 5 * time.Second
	if err := run.Run(); err != nil {
		return fmt.Errorf("srun (step %s) on %s: %w", name, strings.Join(nodes, ","), err)
	}
	return nil
}

func slurmBcastCmd(g *globals) *cobra.Command {
	var force, preserve bool
	c := &cobra.Command{
		Use:   "bcast NAME|FILE DEST",
		Short: "Get a blob (or a file, put first) into DEST on every node of this Slurm job",
		Long: "Every node of the job gets the blob NAME, or the file FILE, into the path DEST on its own disk,\n" +
			"each from its own daemon of the job: through the tree and the site's exchange (sbcast's job).\n" +
			"An existing file at SOURCE is put first, under slurm/JOBID/bcast/BASENAME, with this host's\n" +
			"daemon of the job; anything else is a blob's name. %N in DEST is the node's name (for nodes\n" +
			"that share a file system). DEST that exists is an error unless\n" +
			"--force. --preserve (FILE only) gives DEST the file's mode and modification time. Prints\n" +
			"a line per node; exits 1 if any node failed.",
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			src, dest := args[0], args[1]
			if !filepath.IsAbs(dest) {
				return usageError{fmt.Errorf("DEST %q: want an absolute path (it is made on every node)", dest)}
			}
			job, nodes, err := slurmJob(cmd.Context())
			if err != nil {
				return err
			}
			taskArgs := []string{"--dest", dest}
			if force {
				taskArgs = append(taskArgs, "--force")
			}
			name := src
			st, statErr := os.Stat(src)
			switch {
			case statErr == nil && st.Mode().IsRegular():
				name = "slurm/" + job + "/bcast/" + filepath.Base(src)
				if err := blob.ValidateName(name); err != nil {
					return usageError{fmt.Errorf("FILE %s: its base name makes the blob name %q: %w", src, name, err)}
				}
				cl, err := g.dial()
				if err != nil {
					return fmt.Errorf("put %s: %w (run bcast on a node of the job, after omst slurm up)", src, err)
				}
				info, err := cl.PutFile(cmd.Context(), name, src, rpcbridge.PutOptions{})
				cl.Close()
				if err != nil {
					return fmt.Errorf("put %s: %w", src, err)
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "omst slurm: put %s as %s (%s, %d bytes)\n", src, name, info.ID, info.Size)
				if preserve {
					taskArgs = append(taskArgs, "--mode", fmt.Sprintf("%#o", st.Mode().Perm()), "--mtime", strconv.FormatInt(st.ModTime().UnixNano(), 10))
				}
			case statErr == nil:
				return usageError{fmt.Errorf("SOURCE %s: not a regular file", src)}
			default:
				if err := blob.ValidateName(src); err != nil {
					return usageError{fmt.Errorf("SOURCE %q: no such file, and not a blob name: %w", src, err)}
				}
				if preserve {
					return usageError{fmt.Errorf("--preserve: SOURCE %s is a blob name, not a file: nothing to preserve", src)}
				}
			}
			return slurmStep(cmd, job, nodes, stepBcast, append([]string{"--get", name}, taskArgs...))
		},
	}
	c.Flags().BoolVarP(&force, "force", "f", false, "replace DEST where it exists")
	c.Flags().BoolVarP(&preserve, "preserve", "p", false, "give DEST the source file's mode and modification time")
	return c
}

// slurmTaskCmd is what srun runs on each node: the daemon of up (default),
// the stop of down (--stop) or the get of bcast (--get).
func slurmTaskCmd(g *globals) *cobra.Command {
	var (
		stop       bool
		get, dest  string
		force      bool
		mode       string
		mtime      int64
		stopWaitAt = 10 * time.Second
	)
	c := &cobra.Command{
		Use:    "task",
		Short:  "One node's part of omst slurm up, down or bcast (run by srun)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			env := os.Getenv
			job := env("SLURM_JOB_ID")
			if job == "" {
				return ErrNoAllocation
			}
			nodeName := slurmNodeName(env, os.Hostname)
			home, err := slurmNodeHome(tmpBase(env), job, nodeName)
			if err != nil {
				return err
			}
			switch {
			case stop:
				msg, err := stopNodeDaemon(home, stopWaitAt)
				if err != nil {
					return fmt.Errorf("%s: %w", nodeName, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", nodeName, msg)
				return nil
			case get != "":
				dest := expandDest(dest, nodeName)
				n, err := getToDest(cmd.Context(), job, node.SocketPath(home), get, dest, force, mode, mtime)
				if err != nil {
					return fmt.Errorf("%s: %w", nodeName, err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (%d bytes)\n", nodeName, dest, n)
				return nil
			}
			return runNodeDaemon(cmd, job, nodeName, home)
		},
	}
	f := c.Flags()
	f.BoolVar(&stop, "stop", false, "stop this node's daemon of the job and remove its home")
	f.StringVar(&get, "get", "", "get this blob into --dest")
	f.StringVar(&dest, "dest", "", "where --get writes")
	f.BoolVar(&force, "force", false, "replace --dest")
	f.StringVar(&mode, "mode", "", "--dest's mode, octal")
	f.Int64Var(&mtime, "mtime", 0, "--dest's modification time, Unix nanoseconds")
	return c
}

// runNodeDaemon is one node's daemon task of up: rendezvous, then the
// daemon in this process until the step ends, then its home removed.
func runNodeDaemon(cmd *cobra.Command, job, nodeName, home string) error {
	ctx := cmd.Context()
	port, token := os.Getenv(rdvPortEnv), os.Getenv(rdvTokenEnv)
	if port == "" || token == "" {
		return fmt.Errorf("%s: no %s/%s: this task is started by omst slurm up", nodeName, rdvPortEnv, rdvTokenEnv)
	}
	// up's host: the address srun launched from, else its host name.
	var (
		a    rdvAssign
		conn net.Conn
		rd   *bufio.Reader
		err  error
	)
	hello := rdvHello{Token: token, Node: nodeName, Step: os.Getenv("SLURM_STEP_ID"), Pid: os.Getpid()}
	for _, host := range []string{os.Getenv("SLURM_LAUNCH_NODE_IPADDR"), os.Getenv(rdvHostEnv)} {
		if host == "" {
			continue
		}
		if a, conn, rd, err = rdvClient(ctx, net.JoinHostPort(host, port), hello); err == nil {
			break
		}
	}
	if conn == nil {
		if err == nil {
			err = fmt.Errorf("no SLURM_LAUNCH_NODE_IPADDR or %s: where is omst slurm up?", rdvHostEnv)
		}
		return fmt.Errorf("%s: %w", nodeName, err)
	}
	defer conn.Close()
	if a.Error != "" {
		return fmt.Errorf("%s: %s", nodeName, a.Error)
	}
	// report sends the task's report and waits for up's acknowledgement:
	// a daemon up did not hear of (it gave up waiting) must not stay.
	report := func(r rdvReport) error {
		r.Node, r.Home = nodeName, home
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		if err := writeRdv(conn, r); err != nil {
			return fmt.Errorf("report to omst slurm up: %w", err)
		}
		var ack rdvAck
		if err := readRdv(rd, &ack); err != nil {
			return fmt.Errorf("no acknowledgement from omst slurm up (did it give up?): %w", err)
		}
		return nil
	}
	args := a.Args
	if len(a.HeadAddrs) > 0 {
		addr, err := pickHeadAddr(a.HeadAddrs, func(hp string) error {
			c, err := net.DialTimeout("tcp", hp, 3*time.Second)
			if err == nil {
				c.Close()
			}
			return err
		})
		if err != nil {
			report(rdvReport{Error: err.Error()})
			return fmt.Errorf("%s: %w", nodeName, err)
		}
		args = withParent(args, addr)
	}
	if err := makeNodeHome(home); err != nil {
		report(rdvReport{Error: err.Error()})
		return fmt.Errorf("%s: %w", nodeName, err)
	}
	defer removeNodeHome(home)

	// The daemon's log goes to HOME/daemon.log (removed with the home).
	logf, err := os.OpenFile(filepath.Join(home, DaemonLog), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		report(rdvReport{Error: err.Error()})
		return err
	}
	defer logf.Close()
	stderr := os.Stderr
	os.Stderr = logf
	defer func() { os.Stderr = stderr }()

	dctx, stopDaemon := context.WithCancel(ctx)
	defer stopDaemon()
	root := newRoot()
	root.SetArgs(append([]string{"--home", home}, args...))
	root.SetOut(io.Discard)
	root.SetErr(logf)
	done := make(chan error, 1)
	exited := make(chan struct{})
	go func() { done <- root.ExecuteContext(dctx); close(exited) }()

	sock := node.SocketPath(home)
	st, err := waitDaemon(ctx, sock, defaultWait, exited)
	if errors.Is(err, errDaemonExited) {
		err = <-done
		if err == nil {
			err = errors.New("the daemon exited")
		}
		report(rdvReport{Error: fmt.Sprintf("the daemon did not start: %v", err)})
		return fmt.Errorf("%s: the daemon did not start: %w", nodeName, err)
	}
	if err == nil && st.Parent != "" && !st.ParentConnected {
		var ok bool
		if st, ok = waitParent(ctx, sock, defaultWait); !ok {
			err = fmt.Errorf("not connected to its parent %s within %v", st.Parent, defaultWait)
		}
	}
	if err != nil {
		report(rdvReport{Error: err.Error()})
		stopDaemon()
		<-exited
		return fmt.Errorf("%s: %w", nodeName, err)
	}
	if err := report(rdvReport{OK: true, Addrs: st.Addrs}); err != nil {
		stopDaemon()
		<-exited
		return fmt.Errorf("%s: %w: stopped the daemon", nodeName, err)
	}
	// Until the step ends (down's SIGTERM, scancel, the job's end).
	<-exited
	if err := <-done; err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s: the daemon stopped: %w", nodeName, err)
	}
	return nil
}

// makeNodeHome makes the job's directory (mode 0700, this user's) and the
// node's home in it, which must not exist yet.
func makeNodeHome(home string) error {
	dir := filepath.Dir(home)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make the job's directory: %w", err)
	}
	st, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("the job's directory: %w", err)
	}
	if s, ok := st.Sys().(*syscall.Stat_t); !st.IsDir() || !ok || int(s.Uid) != os.Geteuid() {
		return fmt.Errorf("%s exists and is not a directory of this user: remove it", dir)
	}
	if err := os.Mkdir(home, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists already (a daemon of this job runs here, or was not cleaned up: omst slurm down)", home)
		}
		return fmt.Errorf("make the node's home: %w", err)
	}
	return nil
}

// removeNodeHome removes a node's home and, if nothing else is left in
// it, the job's directory.
func removeNodeHome(home string) error {
	err := os.RemoveAll(home)
	os.Remove(filepath.Dir(home)) // only if empty
	return err
}

// stopNodeDaemon stops the daemon holding home (by the pid in its lock
// file, if that process is an omst slurm task) and removes home. A home
// whose lock another kind of process holds is left alone (an error).
func stopNodeDaemon(home string, wait time.Duration) (string, error) {
	if _, err := os.Lstat(home); errors.Is(err, os.ErrNotExist) {
		os.Remove(filepath.Dir(home))
		return "no daemon of this job here", nil
	}
	msg := "removed " + home
	pid, err := strconv.Atoi(lockPid(home))
	if err == nil && pid > 0 && alive(pid) && !isSlurmTask(pid) && holdsLock(home) {
		return "", fmt.Errorf("%s is held by pid %d, which is not an omst slurm task: left alone", home, pid)
	}
	if err == nil && pid > 0 && isSlurmTask(pid) {
		syscall.Kill(pid, syscall.SIGTERM)
		end := time.Now().Add(wait)
		for alive(pid) && time.Now().Before(end) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(pid) {
			syscall.Kill(pid, syscall.SIGKILL)
			msg = fmt.Sprintf("killed the daemon (pid %d, no exit within %v), %s", pid, wait, msg)
		} else {
			msg = fmt.Sprintf("stopped the daemon (pid %d), %s", pid, msg)
		}
	}
	if err := removeNodeHome(home); err != nil {
		return "", fmt.Errorf("remove %s: %w", home, err)
	}
	return msg, nil
}

// holdsLock reports whether some process holds HOME/lock (a daemon runs
// there), by trying to take it.
func holdsLock(home string) bool {
	f, err := os.Open(filepath.Join(home, "lock"))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		return errors.Is(err, syscall.EWOULDBLOCK)
	}
	syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	return false
}

// alive reports whether process pid exists (and is not a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

// isSlurmTask reports whether pid runs `omst slurm task` (a pid in a lock
// file may have been reused).
func isSlurmTask(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	return err == nil && bytes.Contains(b, []byte("\x00slurm\x00task"))
}

// getToDest is bcast's part on one node: the blob into dest through this
// node's daemon of the job (at sock).
func getToDest(ctx context.Context, job, sock, name, dest string, force bool, mode string, mtime int64) (uint64, error) {
	if _, err := os.Stat(sock); err != nil {
		return 0, fmt.Errorf("%w: no omst daemon of job %s on this node (no %s): omst slurm up first", rpcbridge.ErrNoDaemon, job, sock)
	}
	if !force {
		if _, err := os.Lstat(dest); err == nil {
			return 0, fmt.Errorf("%s exists (--force replaces it)", dest)
		}
	}
	var perm os.FileMode
	if mode != "" {
		m, err := strconv.ParseUint(mode, 0, 32)
		if err != nil || m > 0o7777 {
			return 0, usageError{fmt.Errorf("--mode %q: want an octal mode", mode)}
		}
		perm = os.FileMode(m)
	}
	cl, err := rpcbridge.Dial(sock)
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	info, err := cl.GetFile(ctx, name, dest)
	if err != nil {
		return 0, err
	}
	if mode != "" {
		if err := os.Chmod(dest, perm); err != nil {
			return 0, err
		}
	}
	if mtime != 0 {
		t := time.Unix(0, mtime)
		if err := os.Chtimes(dest, t, t); err != nil {
			return 0, err
		}
	}
	return info.Size, nil
}
