package gridops

import (
	"strconv"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/topology"
)

// SSH is how the commands run the system's ssh client.
type SSH struct {
	// Path is the ssh program ("ssh" when empty); jump hops run it too.
	Path string
	// ConfigFile is given to every ssh, hops included, as -F ("" for
	// ssh's own ~/.ssh/config).
	ConfigFile string
	// Options are -o values ("Key=Value"), given to every ssh, hops
	// included, before omst's own so that they win (ssh keeps the first
	// value of an option).
	Options []string
	// ConnectTimeout bounds each TCP connection and handshake (0: 10 s).
	ConnectTimeout time.Duration
}

// common returns the options every ssh invocation gets: the config file,
// the user's options, then BatchMode (never a password or passphrase
// prompt: hosts run in parallel), the connect timeout and keepalives.
func (s SSH) common() []string {
	var a []string
	if s.ConfigFile != "" {
		a = append(a, "-F", s.ConfigFile)
	}
	for _, o := range s.Options {
		a = append(a, "-o", o)
	}
	ct := s.ConnectTimeout
	if ct <= 0 {
		ct = 10 * time.Second
	}
	secs := max(1, int((ct+time.Second-1)/time.Second))
	return append(a, "-o", "BatchMode=yes", "-o", "ConnectTimeout="+strconv.Itoa(secs),
		"-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4")
}

func (s SSH) path() string {
	if s.Path == "" {
		return "ssh"
	}
	return s.Path
}

// Command returns the argv (the ssh program first) that runs the shell
// command remote on the host h describes. Jump hosts are reached through a
// ProxyCommand chain rather than -J: ssh passes neither -o options nor -i
// to the ssh it runs for -J, so hops would lose BatchMode, the user's
// options (known hosts files...) and a head's key; each hop of the chain
// is an ssh with the same options and the hop's own user, port and key.
func (s SSH) Command(h topology.SSH, remote string) []string {
	argv := append([]string{s.path()}, s.common()...)
	argv = append(argv, endpoint(h.User, h.Port, h.Key)...)
	if len(h.Jump) > 0 {
		argv = append(argv, "-o", "ProxyCommand="+s.ProxyCommand(h.Jump))
	}
	return append(argv, h.Host, remote)
}

// endpoint is the -l, -p and -i options of one destination.
func endpoint(user string, port int, key string) []string {
	var a []string
	if user != "" {
		a = append(a, "-l", user)
	}
	if port != 0 {
		a = append(a, "-p", strconv.Itoa(port))
	}
	if key != "" {
		a = append(a, "-i", key)
	}
	return a
}

// ProxyCommand returns the ProxyCommand value that reaches the
// destination of the ssh given it through hops (the first hop first): an
// ssh to the last hop forwarding to %h:%p (ssh's -W), itself reaching the
// last hop through a ProxyCommand for the hops before it, and so on. ssh
// expands %-tokens in a ProxyCommand and runs it with the user's shell:
// the words are quoted for the shell and every literal '%' doubled, once
// per level of nesting.
func (s SSH) ProxyCommand(hops []topology.Hop) string {
	last := hops[len(hops)-1]
	words := []string{Quote(escapePercent(s.path()))}
	for _, w := range append(s.common(), endpoint(last.User, last.Port, last.Key)...) {
		words = append(words, Quote(escapePercent(w)))
	}
	if len(hops) > 1 {
		inner := "ProxyCommand=" + s.ProxyCommand(hops[:len(hops)-1])
		words = append(words, "-o", Quote(escapePercent(inner)))
	}
	// %h and %p: the host and port of the ssh that runs this command.
	words = append(words, "-W", "'[%h]:%p'", Quote(escapePercent(last.Host)))
	return strings.Join(words, " ")
}

func escapePercent(s string) string { return strings.ReplaceAll(s, "%", "%%") }

// Quote quotes s for a POSIX shell (single quotes), leaving words made
// only of safe characters as they are.
func Quote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789@%+=:,./_-") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// TrimStderr shortens what ssh and a remote script printed on standard
// error to one line for a progress line: its last non-empty lines (ssh's
// notes on known hosts left out), joined with " / ", at most about 400
// bytes.
func TrimStderr(b []byte) string {
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(strings.TrimRight(l, "\r"))
		if l == "" || strings.HasPrefix(l, "Warning: Permanently added") {
			continue
		}
		lines = append(lines, l)
	}
	if len(lines) > 6 {
		lines = lines[len(lines)-6:]
	}
	s := strings.Join(lines, " / ")
	if len(s) > 400 {
		s = "..." + s[len(s)-400:]
	}
	return s
}
