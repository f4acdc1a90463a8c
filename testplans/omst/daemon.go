package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// maxSocketPath keeps HOME/omst.sock under the sun_path limit (108 bytes on
// Linux) with room to spare.
const maxSocketPath = 100

// daemonSpec says how to start one omst daemon.
type daemonSpec struct {
	bin       string
	ip        string   // data IP to listen on
	transport string   // tcp or quic
	parents   []string // multiaddrs with /p2p/ID: the first preferred, the others fallbacks
	bootstrap []string // --bootstrap peers (multiaddrs with /p2p/ID) to join the private DHT through
	noDHT     bool     // --no-dht
	site      string
	relayMode string // "" = the daemon's default
	// noSiblings runs the daemon with --no-sibling-exchange.
	noSiblings bool
	trustedLAN bool // --trusted-lan
	window     int
	cacheSize  string
	chunkSize  int64
	logLevel   string
	logPath    string // daemon stdout+stderr
	keepHome   bool
	// gridInit runs `omst grid init` in the home before the daemon starts
	// (the root of a grid); join is its --join token (the others).
	gridInit bool
	join     string
}

// daemon is one running `omst daemon` child process.
type daemon struct {
	spec   daemonSpec
	home   string
	sock   string
	cmd    *exec.Cmd
	log    *os.File
	exited chan struct{} // closed when the process has been reaped
	err    error         // its exit status, valid after exited is closed
	client *rpcbridge.Client
	status rpcbridge.Status // as read once it was up
	addr   string           // the multiaddr (with /p2p/ID) others dial
}

// makeHome makes a short home directory: the socket path must stay under
// maxSocketPath. It goes in the first of OMST_WAN_TMP (the namespace
// harness's scratch directory), TEST_TEMP_PATH (testground's) and
// os.TempDir() that is short enough; never under the outputs, which
// testground collects.
func makeHome(tag string) (string, error) {
	var tried []string
	for _, dir := range []string{os.Getenv("OMST_WAN_TMP"), os.Getenv("TEST_TEMP_PATH"), os.TempDir()} {
		// MkdirTemp adds up to 20 characters.
		if dir == "" || len(filepath.Join(dir, "omst-"+tag+"-12345678901234567890", "omst.sock")) >= maxSocketPath {
			tried = append(tried, dir)
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		return os.MkdirTemp(dir, "omst-"+tag+"-")
	}
	return "", fmt.Errorf("no directory short enough for a unix socket among %q (set TMPDIR to a short one)", tried)
}

// startDaemon starts the daemon and waits (bounded by ctx) until its local
// API answers STATUS and it reports a listen address on spec.ip.
func startDaemon(ctx context.Context, tag string, spec daemonSpec) (*daemon, error) {
	home, err := makeHome(tag)
	if err != nil {
		return nil, err
	}
	if spec.gridInit {
		if err := gridInit(ctx, spec.bin, home); err != nil {
			os.RemoveAll(home)
			return nil, err
		}
	}
	listen := "/ip4/" + spec.ip + "/tcp/0"
	if spec.transport == "quic" {
		listen = "/ip4/" + spec.ip + "/udp/0/quic-v1"
	}
	args := []string{"daemon", "--home", home, "--listen", listen, "--log-level", spec.logLevel}
	for _, p := range spec.parents {
		args = append(args, "--parent", p)
	}
	for _, b := range spec.bootstrap {
		args = append(args, "--bootstrap", b)
	}
	if spec.noDHT {
		args = append(args, "--no-dht")
	}
	if spec.site != "" {
		args = append(args, "--site", spec.site)
	}
	if spec.relayMode != "" {
		args = append(args, "--relay-mode", spec.relayMode)
	}
	if spec.noSiblings {
		args = append(args, "--no-sibling-exchange")
	}
	if spec.trustedLAN {
		args = append(args, "--trusted-lan")
	}
	if spec.window > 0 {
		args = append(args, "--window", fmt.Sprint(spec.window))
	}
	if spec.cacheSize != "" {
		args = append(args, "--cache-size", spec.cacheSize)
	}
	if spec.chunkSize > 0 {
		args = append(args, "--chunk-size", fmt.Sprint(spec.chunkSize))
	}
	if spec.join != "" {
		args = append(args, "--join", spec.join)
	}
	d := &daemon{spec: spec, home: home, sock: filepath.Join(home, "omst.sock"), exited: make(chan struct{})}
	if spec.logPath != "" {
		if d.log, err = os.OpenFile(spec.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			os.RemoveAll(home)
			return nil, err
		}
		fmt.Fprintf(d.log, "# %s %s\n", spec.bin, strings.Join(args, " "))
	}
	d.cmd = exec.Command(spec.bin, args...)
	if d.log != nil {
		d.cmd.Stdout, d.cmd.Stderr = d.log, d.log
	}
	d.cmd.Env = append(os.Environ(), "OMST_HOME="+home)
	// The daemon dies with this instance even if the instance is killed
	// (testground's local:exec runner SIGKILLs instances on cancel).
	d.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := d.cmd.Start(); err != nil {
		d.cleanup()
		return nil, fmt.Errorf("start %s: %w", spec.bin, err)
	}
	go func() {
		d.err = d.cmd.Wait()
		close(d.exited)
	}()
	if err := d.waitUp(ctx); err != nil {
		d.stop(5 * time.Second)
		return nil, fmt.Errorf("daemon %s (log %s): %w", tag, spec.logPath, err)
	}
	return d, nil
}

func (d *daemon) waitUp(ctx context.Context) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last error
	for {
		select {
		case <-d.exited:
			return fmt.Errorf("exited during start-up: %v", d.err)
		case <-ctx.Done():
			return fmt.Errorf("not up: %w (last error: %v)", ctx.Err(), last)
		case <-tick.C:
		}
		if d.client == nil {
			if _, err := os.Stat(d.sock); err != nil {
				last = err
				continue
			}
			c, err := rpcbridge.Dial(d.sock)
			if err != nil {
				last = err
				continue
			}
			d.client = c
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := d.client.Status(sctx)
		cancel()
		if err != nil {
			last = err
			continue
		}
		addr := pickAddr(st.Addrs, d.spec.ip, d.spec.transport)
		if addr == "" {
			last = fmt.Errorf("no listen address on %s yet: %v", d.spec.ip, st.Addrs)
			continue
		}
		d.status, d.addr = st, addr
		return nil
	}
}

// pickAddr returns the address on ip with the transport, with /p2p/ID.
func pickAddr(addrs []string, ip, transport string) string {
	want := "/ip4/" + ip + "/tcp/"
	if transport == "quic" {
		want = "/ip4/" + ip + "/udp/"
	}
	for _, a := range addrs {
		if strings.HasPrefix(a, want) && strings.Contains(a, "/p2p/") {
			return a
		}
	}
	return ""
}

// running reports whether the process has not exited.
func (d *daemon) running() bool {
	select {
	case <-d.exited:
		return false
	default:
		return true
	}
}

// dial opens another connection to the local API (a Client serializes its
// calls, so concurrent fetches need one each).
func (d *daemon) dial() (*rpcbridge.Client, error) { return rpcbridge.Dial(d.sock) }

// kill SIGKILLs the daemon (a crash, for failover) and waits for it.
func (d *daemon) kill() {
	if d.running() {
		_ = d.cmd.Process.Signal(syscall.SIGKILL)
	}
	<-d.exited
}

// stop ends the daemon: SIGTERM, then SIGKILL after grace; it always
// returns after at most grace plus a moment, and removes the home directory
// unless keepHome is set.
func (d *daemon) stop(grace time.Duration) error {
	if d == nil {
		return nil
	}
	if d.client != nil {
		_ = d.client.Close()
	}
	var err error
	if d.running() {
		_ = d.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.exited:
		case <-time.After(grace):
			err = errors.New("daemon did not stop on SIGTERM; killed")
			_ = d.cmd.Process.Signal(syscall.SIGKILL)
			<-d.exited
		}
	}
	d.cleanup()
	return err
}

func (d *daemon) cleanup() {
	if d.log != nil {
		_ = d.log.Close()
	}
	if !d.spec.keepHome {
		_ = os.RemoveAll(d.home)
	}
}
