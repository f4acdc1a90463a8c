package main

// The decisions of `omst slurm up|down|bcast`, as plain code: where a node's
// daemon lives, which node is the head, what each daemon is started with,
// which of the head's addresses a worker dials. slurm.go runs srun and
// prints; slurmrdv.go is the rendezvous between `up` and the tasks.

import (
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strings"

	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
)

// ErrNoAllocation is returned by the slurm commands run outside a Slurm
// allocation (no SLURM_JOB_ID).
var ErrNoAllocation = errors.New("not inside a Slurm allocation (no SLURM_JOB_ID): run it in a batch script (sbatch) or an salloc shell")

// slurmDirPrefix names a job's directory under $TMPDIR or /tmp:
// omst-slurm-JOBID, holding one home per node (omst-slurm-JOBID/NODE).
const slurmDirPrefix = "omst-slurm-"

// slurmEnv is what the slurm commands and the socket rule read of the
// environment (a function so that tests pass their own).
type slurmEnv func(string) string

// tmpBase is the directory job directories live in: $TMPDIR if set, else
// /tmp (on each node: its own local disk).
func tmpBase(env slurmEnv) string {
	if t := env("TMPDIR"); t != "" {
		return t
	}
	return "/tmp"
}

// validComponent reports whether s can be one element of a path: not
// empty, not . or .., no slash, no NUL.
func validComponent(s string) bool {
	return s != "" && s != "." && s != ".." && !strings.ContainsAny(s, "/\x00")
}

// slurmJobDir is BASE/omst-slurm-JOB, the directory of a job's daemons on
// one node's local disk.
func slurmJobDir(base, job string) (string, error) {
	if !validComponent(job) {
		return "", fmt.Errorf("job ID %q: not usable in a path", job)
	}
	return filepath.Join(base, slurmDirPrefix+job), nil
}

// slurmNodeHome is BASE/omst-slurm-JOB/NODE, the home of the job's daemon
// on node NODE.
func slurmNodeHome(base, job, node string) (string, error) {
	d, err := slurmJobDir(base, job)
	if err != nil {
		return "", err
	}
	if !validComponent(node) {
		return "", fmt.Errorf("node name %q: not usable in a path", node)
	}
	return filepath.Join(d, node), nil
}

// slurmNodeName is this node's Slurm name: $SLURMD_NODENAME (set in job
// steps and batch scripts), else the host name up to its first dot.
func slurmNodeName(env slurmEnv, hostname func() (string, error)) string {
	if n := env("SLURMD_NODENAME"); n != "" {
		return n
	}
	h, err := hostname()
	if err != nil {
		return ""
	}
	h, _, _ = strings.Cut(h, ".")
	return h
}

// parseHostnames parses `scontrol show hostnames`' output: one node name
// a line, in the allocation's order. Empty lines are skipped; a name that
// cannot be a path element or a repeated one is an error.
func parseHostnames(out string) ([]string, error) {
	var nodes []string
	for _, l := range strings.Split(out, "\n") {
		l = strings.TrimSpace(l)
		if l == "" {
			continue
		}
		if !validComponent(l) || strings.ContainsAny(l, " \t,") {
			return nil, fmt.Errorf("node name %q in scontrol's output: not a host name", l)
		}
		if slices.Contains(nodes, l) {
			return nil, fmt.Errorf("node %s listed twice in scontrol's output", l)
		}
		nodes = append(nodes, l)
	}
	if len(nodes) == 0 {
		return nil, errors.New("scontrol show hostnames listed no node")
	}
	return nodes, nil
}

// chooseHead returns the head node: want if given (it must be one of
// nodes), else the allocation's first node.
func chooseHead(nodes []string, want string) (string, error) {
	if len(nodes) == 0 {
		return "", errors.New("no nodes")
	}
	if want == "" {
		return nodes[0], nil
	}
	if !slices.Contains(nodes, want) {
		return "", usageError{fmt.Errorf("--head-node %s: not a node of this allocation (%s)", want, strings.Join(nodes, ","))}
	}
	return want, nil
}

// assignTokens gives each node its join token: none without tokens, else
// exactly one per node, the first to the head and the others to the other
// nodes in the allocation's order.
func assignTokens(nodes []string, head string, tokens []string) (map[string]string, error) {
	out := map[string]string{}
	if len(tokens) == 0 {
		return out, nil
	}
	if len(tokens) != len(nodes) {
		return nil, usageError{fmt.Errorf("--join: %d token(s) for %d nodes: give one per node (a token is redeemed once), the head's first", len(tokens), len(nodes))}
	}
	out[head] = tokens[0]
	i := 1
	for _, n := range nodes {
		if n != head {
			out[n] = tokens[i]
			i++
		}
	}
	return out, nil
}

// slurmSite is the default site name of a job's daemons: CLUSTER-JOB
// (slurm-JOB without $SLURM_CLUSTER_NAME).
func slurmSite(cluster, job string) string {
	if cluster == "" {
		cluster = "slurm"
	}
	return cluster + "-" + job
}

// daemonPlan is what `up` decided for the daemons of one allocation.
type daemonPlan struct {
	Nodes   []string          // the allocation's nodes, in order
	Head    string            // the head node
	Site    string            // every daemon's --site
	Parents []string          // the head's --parent (a grid's root); the workers' fallbacks
	Tokens  map[string]string // node -> --join token (none: open grid)
	Extra   []string          // more `omst daemon` flags, for every daemon
}

// defaultListen is the daemons' listen address unless Extra has one: any
// free TCP port, so that two jobs' (or, on one host, two nodes') daemons
// never clash.
const defaultListen = "/ip4/0.0.0.0/tcp/0"

// daemonArgs returns the `omst daemon` arguments (after --home) of node's
// daemon. A worker's first --parent, its head, is added by the task with
// withParent once it has picked one of the head's addresses.
func (p daemonPlan) daemonArgs(node string) []string {
	args := []string{"daemon", "--site", p.Site}
	if !slices.ContainsFunc(p.Extra, func(a string) bool { return a == "--listen" || strings.HasPrefix(a, "--listen=") }) {
		args = append(args, "--listen", defaultListen)
	}
	for _, par := range p.Parents {
		args = append(args, "--parent", par)
	}
	if t := p.Tokens[node]; t != "" {
		args = append(args, "--join", t)
	}
	return append(args, p.Extra...)
}

// withParent returns daemon arguments with addr as the first --parent
// (the others become its fallbacks).
func withParent(args []string, addr string) []string {
	if len(args) == 0 {
		return []string{"--parent", addr}
	}
	out := append([]string{args[0], "--parent", addr}, args[1:]...)
	return out
}

// orderAddrs sorts a daemon's addresses into the order a worker tries
// them as its parent: TCP before others, then addresses that are not
// loopback (another node's loopback is its own), IPv4 before IPv6, the
// daemon's own order otherwise. Addresses that do not parse come last.
func orderAddrs(addrs []string) []string {
	rank := func(s string) int {
		m, err := ma.NewMultiaddr(s)
		if err != nil {
			return 100
		}
		r := 0
		if _, err := m.ValueForProtocol(ma.P_TCP); err != nil {
			r += 10
		}
		if manet.IsIPLoopback(m) {
			r += 4
		}
		if _, err := m.ValueForProtocol(ma.P_IP4); err != nil {
			r++
		}
		return r
	}
	out := slices.Clone(addrs)
	slices.SortStableFunc(out, func(a, b string) int { return rank(a) - rank(b) })
	return out
}

// dialAddr is the host:port of a /ip4|ip6/.../tcp/... multiaddr.
func dialAddr(s string) (string, bool) {
	m, err := ma.NewMultiaddr(s)
	if err != nil {
		return "", false
	}
	if _, err := m.ValueForProtocol(ma.P_TCP); err != nil {
		return "", false
	}
	_, a, err := manet.DialArgs(m)
	if err != nil {
		return "", false
	}
	if _, _, err := net.SplitHostPort(a); err != nil {
		return "", false
	}
	return a, true
}

// pickHeadAddr returns the first of the head's addresses (in orderAddrs'
// order) that dial, a TCP connection test, reaches.
func pickHeadAddr(addrs []string, dial func(hostport string) error) (string, error) {
	var errs []string
	for _, a := range orderAddrs(addrs) {
		hp, ok := dialAddr(a)
		if !ok {
			continue
		}
		if err := dial(hp); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", hp, err))
			continue
		}
		return a, nil
	}
	if len(errs) == 0 {
		return "", fmt.Errorf("the head gave no TCP address (%s)", strings.Join(addrs, " "))
	}
	return "", fmt.Errorf("none of the head's addresses is reachable from here: %s", strings.Join(errs, "; "))
}

// srunArgs returns the arguments of the srun that runs cmd once on every
// one of nodes within job: one step sharing the job's resources
// (--overlap), one task per node, not ended when one task fails.
func srunArgs(job string, nodes []string, stepName string, cmd []string) []string {
	n := fmt.Sprint(len(nodes))
	args := []string{
		"--jobid=" + job, "--overlap", "--nodes=" + n, "--ntasks=" + n, "--ntasks-per-node=1",
		"--nodelist=" + strings.Join(nodes, ","), "--cpus-per-task=1", "--kill-on-bad-exit=0", "--wait=0",
		"--job-name=" + stepName, "--export=ALL", "--mpi=none",
	}
	return append(args, cmd...)
}

// expandDest is bcast's DEST on node: each %N replaced by the node's name
// (as in srun's file name patterns), for nodes that share a file system.
func expandDest(dest, node string) string { return strings.ReplaceAll(dest, "%N", node) }
