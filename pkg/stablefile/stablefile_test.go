package stablefile

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func writeFile(t *testing.T, n int) (string, []byte) {
	t.Helper()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	path := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return path, data
}

// readAfter reads r to its end, calling hook once after the first read.
func readAfter(r io.Reader, hook func()) ([]byte, error) {
	var out bytes.Buffer
	buf := make([]byte, 4096)
	for first := true; ; first = false {
		n, err := r.Read(buf)
		out.Write(buf[:n])
		if first && hook != nil {
			hook()
		}
		if err != nil {
			return out.Bytes(), err
		}
	}
}

func TestUnchangedFile(t *testing.T) {
	for _, size := range []int{0, 1, 4096, 100_000} {
		path, data := writeFile(t, size)
		r, err := Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		if n, ok := r.Size(); !ok || n != int64(size) {
			t.Fatalf("Size() = %d, %v", n, ok)
		}
		got, err := readAfter(r, nil)
		if err != io.EOF || !bytes.Equal(got, data) {
			t.Fatalf("size %d: %d bytes, %v", size, len(got), err)
		}
		if n, err := r.Read(make([]byte, 10)); n != 0 || err != io.EOF {
			t.Fatalf("read after EOF: %d %v", n, err)
		}
		r.Close()
	}
}

func TestChangedFile(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(t *testing.T, path string)
		want   string
	}{
		{"shrank", func(t *testing.T, path string) {
			if err := os.Truncate(path, 10_000); err != nil {
				t.Fatal(err)
			}
		}, "it shrank from 100000 to 10000 bytes"},
		{"grew", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.Write([]byte("more"))
			f.Close()
		}, "it grew beyond its 100000 bytes"},
		{"rewritten", func(t *testing.T, path string) {
			f, err := os.OpenFile(path, os.O_WRONLY, 0)
			if err != nil {
				t.Fatal(err)
			}
			f.WriteAt([]byte("changed"), 50_000)
			f.Close()
			// A modification time the write cannot have had.
			old := time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC)
			if err := os.Chtimes(path, old, old); err != nil {
				t.Fatal(err)
			}
		}, "size 100000 -> 100000 bytes, modified"},
	} {
		path, _ := writeFile(t, 100_000)
		r, err := Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = readAfter(r, func() { tc.change(t, path) })
		if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want ErrChanged naming %s and %q", tc.name, err, path, tc.want)
		}
		if _, err2 := r.Read(make([]byte, 10)); err2 != err {
			t.Errorf("%s: error not sticky: %v", tc.name, err2)
		}
		r.Close()
	}
}

func TestDirectoryRefused(t *testing.T) {
	if _, err := Open(context.Background(), t.TempDir()); !errors.Is(err, syscall.EISDIR) {
		t.Fatalf("Open(directory): %v", err)
	}
}

func mkfifo(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(p, 0o600); err != nil {
		t.Skipf("mkfifo: %v", err)
	}
	return p
}

// TestFIFOStream: a FIFO is read to its end of file (all writers closed).
func TestFIFOStream(t *testing.T) {
	p := mkfifo(t)
	data := bytes.Repeat([]byte("fifo"), 50_000)
	go func() {
		w, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		w.Write(data)
		w.Close()
	}()
	r, err := Open(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if _, ok := r.Size(); ok || r.Mode()&os.ModeNamedPipe == 0 {
		t.Fatalf("FIFO: mode %v, regular %v", r.Mode(), ok)
	}
	got, err := readAfter(r, nil)
	if err != io.EOF || !bytes.Equal(got, data) {
		t.Fatalf("FIFO: %d bytes, %v", len(got), err)
	}
}

// TestFIFOBoundedByContext: opening a FIFO nobody writes to, and reading
// one whose writer is silent, end when the context does.
func TestFIFOBoundedByContext(t *testing.T) {
	p := mkfifo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Open(ctx, p); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Open of a FIFO without writer: %v", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Open returned after %v", d)
	}

	w := make(chan *os.File, 1)
	go func() {
		f, _ := os.OpenFile(p, os.O_WRONLY, 0)
		w <- f
	}()
	ctx2, cancel2 := context.WithCancel(context.Background())
	r, err := Open(ctx2, p)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	wf := <-w
	defer wf.Close()
	wf.Write([]byte("abc"))
	time.AfterFunc(200*time.Millisecond, cancel2)
	got, err := readAfter(r, nil)
	if !errors.Is(err, context.Canceled) || string(got) != "abc" {
		t.Fatalf("read of a silent FIFO: %q, %v; want context.Canceled", got, err)
	}
}

// TestNewFromOffset: New reads an open file from its offset to the size
// it had, and checks it the same way.
func TestNewFromOffset(t *testing.T) {
	path, data := writeFile(t, 50_000)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Seek(1000, io.SeekStart); err != nil {
		t.Fatal(err)
	}
	r, err := New(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	got, err := readAfter(r, nil)
	if err != io.EOF || !bytes.Equal(got, data[1000:]) {
		t.Fatalf("from offset 1000: %d bytes, %v", len(got), err)
	}
	r.Close()

	f, _ = os.Open(path)
	f.Seek(1000, io.SeekStart)
	r, err = New(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	_, err = readAfter(r, func() { os.Truncate(path, 20_000) })
	if !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "it shrank from 50000 to 20000 bytes") {
		t.Fatalf("shrunk after New: %v", err)
	}
}

// TestRegularSkip: a regular file's Reader gives its file, offset and
// remaining bytes to a caller that copies them itself; after Skip of them
// all, Read makes the end's checks (io.EOF unchanged, ErrChanged for a
// file that shrank after a copy cut short); a stream has no Regular, and
// Skip refuses more than is left.
func TestRegularSkip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("0123456789"), 1000)
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	head := make([]byte, 10)
	if _, err := io.ReadFull(r, head); err != nil {
		t.Fatal(err)
	}
	f, off, n, ok := r.Regular()
	if !ok || f == nil || off != 10 || n != int64(len(data))-10 {
		t.Fatalf("Regular: %v %d %d %v", f, off, n, ok)
	}
	if err := r.Skip(n + 1); err == nil {
		t.Fatal("Skip past the size accepted")
	}
	if err := r.Skip(n); err != nil {
		t.Fatal(err)
	}
	if k, err := r.Read(make([]byte, 1)); k != 0 || err != io.EOF {
		t.Fatalf("Read after Skip of all: %d %v, want io.EOF", k, err)
	}

	// Cut short: the file shrank after 100 bytes were copied.
	r2, err := Open(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer r2.Close()
	if err := os.Truncate(path, 100); err != nil {
		t.Fatal(err)
	}
	if err := r2.Skip(100); err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Read(make([]byte, 1)); !errors.Is(err, ErrChanged) || !strings.Contains(err.Error(), "shrank") {
		t.Fatalf("Read after the file shrank: %v, want ErrChanged", err)
	}
	if _, _, _, ok := r2.Regular(); ok {
		t.Fatal("Regular of a failed Reader")
	}
}
