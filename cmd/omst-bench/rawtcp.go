package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"time"
)

// The raw TCP reference: this binary re-executed as a sender process
// (`omst-bench -role sender -addr 127.0.0.1:PORT -size N`) connects to the
// receiver, waits for one "go" byte, writes N bytes from a reused 1 MiB
// buffer and closes. The receiver times from sending "go" to EOF, reading
// into a reused 1 MiB buffer and discarding.

const rawBufSize = 1 << 20

// senderMain is the entry point of the sender role; it returns the exit code.
func senderMain(args []string) int {
	fs := flag.NewFlagSet("omst-bench sender", flag.ContinueOnError)
	role := fs.String("role", "", "sender")
	addr := fs.String("addr", "", "receiver's 127.0.0.1:PORT")
	size := fs.Int64("size", 0, "bytes to send")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *role != "sender" || *addr == "" || *size <= 0 {
		fmt.Fprintln(os.Stderr, "omst-bench sender: want -role sender -addr HOST:PORT -size N")
		return 2
	}
	if err := send(*addr, *size); err != nil {
		fmt.Fprintf(os.Stderr, "omst-bench sender: %v\n", err)
		return 1
	}
	return 0
}

func send(addr string, size int64) error {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	// No run may outlive a stuck receiver.
	c.SetDeadline(time.Now().Add(opTimeout(size)))
	var goByte [1]byte
	if _, err := io.ReadFull(c, goByte[:]); err != nil {
		return fmt.Errorf("wait for go: %w", err)
	}
	buf := make([]byte, rawBufSize)
	fillRandom(buf, 7)
	for left := size; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := c.Write(buf[:n]); err != nil {
			return err
		}
		left -= n
	}
	return c.(*net.TCPConn).CloseWrite()
}

// rawTCPRun copies size bytes from a freshly started sender process and
// returns the transfer time.
func rawTCPRun(ctx context.Context, size int64, buf []byte) (time.Duration, error) {
	self, err := os.Executable()
	if err != nil {
		return 0, err
	}
	ln, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	cmd := exec.Command(self, "-role", "sender", "-addr", ln.Addr().String(), "-size", strconv.FormatInt(size, 10))
	cmd.Stderr = os.Stderr
	p, err := procs.start("raw-tcp sender", cmd)
	if err != nil {
		return 0, err
	}
	defer p.stop()
	stopOnCancel := context.AfterFunc(ctx, func() { ln.Close() })
	defer stopOnCancel()
	ln.SetDeadline(time.Now().Add(30 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, fmt.Errorf("accept sender: %w", err)
	}
	defer c.Close()
	stopConn := context.AfterFunc(ctx, func() { c.Close() })
	defer stopConn()
	c.SetDeadline(time.Now().Add(opTimeout(size)))
	start := time.Now()
	if _, err := c.Write([]byte{'g'}); err != nil {
		return 0, err
	}
	var got int64
	for {
		n, err := c.Read(buf)
		got += int64(n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("receive: %w", err)
		}
	}
	took := time.Since(start)
	if got != size {
		return 0, fmt.Errorf("received %d bytes, want %d", got, size)
	}
	select {
	case <-p.done:
		if !p.cmd.ProcessState.Success() {
			return 0, fmt.Errorf("sender: %v", p.cmd.ProcessState)
		}
	case <-time.After(10 * time.Second):
		return 0, errors.New("sender did not exit after sending")
	}
	return took, nil
}

// opTimeout bounds one transfer of size bytes: a minute plus the time at a
// pessimistic 20 MB/s.
func opTimeout(size int64) time.Duration {
	return time.Minute + time.Duration(float64(size)/20e6*float64(time.Second))
}
