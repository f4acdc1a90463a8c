package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// frameSeen is a frame the recording proxy saw.
type frameSeen struct {
	typ  rpcbridge.FrameType
	at   time.Time
	done uint64 // a PROGRESS frame's bytes
}

// frameProxy sits between the CLI and a daemon's socket and records the
// types of the frames each way (passing the descriptors GET_TO_FD carries
// on with their bytes): a test edge that sees what the CLI asked and what
// the daemon answered.
type frameProxy struct {
	path     string
	mu       sync.Mutex
	requests []frameSeen // client to daemon
	replies  []frameSeen // daemon to client
	wg       sync.WaitGroup
}

func startFrameProxy(t *testing.T, daemonSock string) *frameProxy {
	t.Helper()
	p := &frameProxy{path: filepath.Join(t.TempDir(), "proxy.sock")}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: p.path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.AcceptUnix()
			if err != nil {
				return
			}
			d, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: daemonSock, Net: "unix"})
			if err != nil {
				c.Close()
				continue
			}
			p.wg.Add(2)
			go p.pipe(c, d, &p.requests)
			go p.pipe(d, c, &p.replies)
		}
	}()
	return p
}

// pipe copies from src to dst, descriptors included, recording frames.
func (p *frameProxy) pipe(src, dst *net.UnixConn, seen *[]frameSeen) {
	defer p.wg.Done()
	defer dst.CloseWrite()
	buf, oob := make([]byte, 1<<20), make([]byte, 1024)
	var pending []byte
	for {
		n, oobn, _, _, err := src.ReadMsgUnix(buf, oob)
		if n > 0 || oobn > 0 {
			if _, _, werr := dst.WriteMsgUnix(buf[:n], oob[:oobn], nil); werr != nil {
				return
			}
			closeRights(oob[:oobn]) // the daemon has its own copies now
			pending = append(pending, buf[:n]...)
			now := time.Now()
			for len(pending) >= rpcbridge.HeaderSize {
				l := int(binary.BigEndian.Uint32(pending))
				if len(pending) < rpcbridge.HeaderSize+l {
					break
				}
				f := frameSeen{typ: rpcbridge.FrameType(pending[4]), at: now}
				if f.typ == rpcbridge.FrameProgress && l == 8 {
					f.done = binary.BigEndian.Uint64(pending[rpcbridge.HeaderSize:])
				}
				p.mu.Lock()
				*seen = append(*seen, f)
				p.mu.Unlock()
				pending = pending[rpcbridge.HeaderSize+l:]
			}
		}
		if err != nil {
			return
		}
	}
}

func closeRights(oob []byte) {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		if fds, err := syscall.ParseUnixRights(&m); err == nil {
			for _, fd := range fds {
				syscall.Close(fd)
			}
		}
	}
}

func (p *frameProxy) seen() (req, rep []frameSeen) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]frameSeen(nil), p.requests...), append([]frameSeen(nil), p.replies...)
}

// TestGetProgressFrames: `omst get NAME -o FILE` on a terminal draws its
// progress bar and summary from the daemon's PROGRESS frames (protocol
// version 8). A worker daemon fetches 256 MiB from its parent; a proxy
// between the CLI and the worker's socket sees the CLI ask GET_TO_FD and
// nothing else (no STATUS, no STAT), and the daemon answer INFO, PROGRESS
// frames counting up to every byte, at most one per ProgressEvery before
// the last, then END; the terminal shows the summary with the blob's size.
// Before version 8 the daemon sent no PROGRESS, and the CLI followed the
// file's size with Stat.
func TestGetProgressFrames(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process 256 MiB test skipped in -short mode")
	}
	dir := t.TempDir()
	root := startDaemon(t, filepath.Join(dir, "root"))
	w := startDaemon(t, filepath.Join(dir, "w"), "--parent", tcpAddr(t, root))
	const size = 256 << 20
	src := filepath.Join(dir, "data.bin")
	want := writeRandomFile(t, src, size, 7)
	mustOmst(t, time.Minute, "--home", root.home, "put", "big/one", src)
	os.Remove(src)

	px := startFrameProxy(t, filepath.Join(w.home, "omst.sock"))
	pty := newPTY(t)
	out := filepath.Join(dir, "got.bin")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, omstBin, "get", "big/one", "-o", out)
	cmd.Env = append(os.Environ(), "OMST_SOCKET="+px.path, "OMST_HOME=")
	var stdout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, pty.Slave
	if err := cmd.Run(); err != nil {
		t.Fatalf("get: %v: %s", err, pty.Output())
	}
	if fileHash(t, out) != want {
		t.Fatal("bytes differ")
	}

	req, rep := px.seen()
	var reqTypes []string
	for _, f := range req {
		reqTypes = append(reqTypes, f.typ.String())
	}
	if strings.Join(reqTypes, " ") != "HELLO GET_TO_FD" {
		t.Fatalf("the CLI sent %v, want HELLO GET_TO_FD (no STATUS, no STAT)", reqTypes)
	}
	if len(rep) < 4 || rep[0].typ != rpcbridge.FrameHello || rep[1].typ != rpcbridge.FrameInfo || rep[len(rep)-1].typ != rpcbridge.FrameEnd {
		t.Fatalf("reply frames %v", rep)
	}
	prog := rep[2 : len(rep)-1]
	took := rep[len(rep)-1].at.Sub(rep[1].at)
	var dones []uint64
	for i, f := range prog {
		if f.typ != rpcbridge.FrameProgress {
			t.Fatalf("frame %d of the reply is %v, want PROGRESS", i+2, f.typ)
		}
		if i > 0 && f.done <= prog[i-1].done {
			t.Fatalf("PROGRESS did not count up: %v", dones)
		}
		dones = append(dones, f.done)
	}
	t.Logf("get took %v (INFO to END at the proxy): %d PROGRESS frames %v", took, len(prog), dones)
	if dones[len(dones)-1] != size {
		t.Fatalf("last PROGRESS %d, want %d", dones[len(dones)-1], size)
	}
	// Paced: at most one frame per ProgressEvery before the last (with
	// slack for the scheduler), and some while the bytes went when the
	// get lasted a few periods.
	if limit := int(took/rpcbridge.ProgressEvery) + 2; len(prog) > limit {
		t.Fatalf("%d PROGRESS frames in %v: more than %d", len(prog), took, limit)
	}
	if took >= 3*rpcbridge.ProgressEvery && len(prog) < 2 {
		t.Fatalf("a get of %v had no PROGRESS before the last", took)
	}
	if o := pty.Output(); !strings.Contains(o, "get big/one  256.0 MiB in ") {
		t.Fatalf("terminal shows no summary of 256.0 MiB: %q", o)
	}
}
