//go:build linux

package main

import (
	"bytes"
	"io"
	"os"
	"strings"
	"sync"
)

// lineTee copies several streams to one writer, whole lines at a time, each
// prefixed with its stream's name.
type lineTee struct {
	mu  sync.Mutex
	dst io.Writer
}

func newLineTee(dst io.Writer) *lineTee { return &lineTee{dst: dst} }

func (t *lineTee) writer(name string) io.Writer { return &teeStream{t: t, prefix: "[" + name + "] "} }

type teeStream struct {
	t      *lineTee
	prefix string
	buf    []byte
}

func (s *teeStream) Write(p []byte) (int, error) {
	s.buf = append(s.buf, p...)
	for {
		i := bytes.IndexByte(s.buf, '\n')
		if i < 0 {
			break
		}
		s.t.mu.Lock()
		_, _ = io.WriteString(s.t.dst, s.prefix+string(s.buf[:i+1]))
		s.t.mu.Unlock()
		s.buf = s.buf[i+1:]
	}
	if len(s.buf) > 64<<10 { // a very long line: flush it as it is
		s.t.mu.Lock()
		_, _ = io.WriteString(s.t.dst, s.prefix+string(s.buf)+"\n")
		s.t.mu.Unlock()
		s.buf = nil
	}
	return len(p), nil
}

// tailFile is the last n lines of the file at path ("" if unreadable).
func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil || len(b) == 0 {
		return ""
	}
	lines := strings.SplitAfter(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "") + "\n"
}
