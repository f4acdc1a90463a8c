package main

import (
	"bytes"
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// ptyOut is a pseudo-terminal for a child's standard error: Slave goes to
// the child (omst then draws its progress bar), Output returns what it
// wrote.
type ptyOut struct {
	Slave  *os.File
	master *os.File
	mu     sync.Mutex
	buf    bytes.Buffer
	done   chan struct{}
}

// newPTY opens a pseudo-terminal, or skips the test where there is none.
func newPTY(t *testing.T) *ptyOut {
	t.Helper()
	m, err := os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	if err := unix.IoctlSetPointerInt(int(m.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		m.Close()
		t.Skipf("unlock pseudo-terminal: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(m.Fd()), unix.TIOCGPTN)
	if err != nil {
		m.Close()
		t.Skipf("pseudo-terminal number: %v", err)
	}
	s, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		m.Close()
		t.Skipf("open pseudo-terminal: %v", err)
	}
	p := &ptyOut{Slave: s, master: m, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		b := make([]byte, 4096)
		for {
			k, err := m.Read(b)
			p.mu.Lock()
			p.buf.Write(b[:k])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { s.Close(); m.Close(); <-p.done })
	return p
}

// Output returns what was written to the terminal so far.
func (p *ptyOut) Output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.buf.String()
}
