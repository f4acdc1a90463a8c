package rpcbridge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand"
	"os"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(es)
}

// readExtents reassembles a blob from extents and closes their files.
func readExtents(t *testing.T, size uint64, xs []Extent) []byte {
	t.Helper()
	out := make([]byte, size)
	for _, x := range xs {
		if _, err := x.File.ReadAt(out[x.BlobOffset:x.BlobOffset+x.Length], int64(x.FileOffset)); err != nil && err != io.EOF {
			t.Fatalf("read extent at %d: %v", x.BlobOffset, err)
		}
		x.File.Close()
	}
	return out
}

func TestGetFD(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	before := openFDs(t)
	for _, tc := range []struct {
		name string
		size int
		cs   int
	}{
		{"empty", 0, 4096},
		{"one byte", 1, 4096},
		{"one chunk", 4096, 4096},
		// 75 extents: two FDS frames (64 + 11).
		{"two frames", 75*4096 - 7, 4096},
		{"1 MiB chunks", 3<<20 + 5, 1 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := make([]byte, tc.size)
			rand.New(rand.NewSource(int64(tc.size))).Read(data)
			m.store("fd/"+tc.name, data, PutOptions{ChunkSize: tc.cs})
			info, xs, err := c.GetFD(ctx, "fd/"+tc.name)
			if err != nil {
				t.Fatal(err)
			}
			if info.Size != uint64(tc.size) {
				t.Fatalf("info size %d, want %d", info.Size, tc.size)
			}
			if want := (tc.size + tc.cs - 1) / tc.cs; len(xs) != want {
				t.Fatalf("%d extents, want %d", len(xs), want)
			}
			if got := readExtents(t, info.Size, xs); !bytes.Equal(got, data) {
				t.Fatal("bytes differ")
			}
		})
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after the gets, %d before", after, before)
	}
}

func TestGetFDErrors(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	before := openFDs(t)
	if _, _, err := c.GetFD(ctx, "missing"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("missing name: %v, want ErrNotFound", err)
	}
	if _, _, err := c.GetFD(ctx, "../x"); !errors.Is(err, blob.ErrInvalidName) {
		t.Fatalf("invalid name: %v, want ErrInvalidName", err)
	}
	// The backend fails after 70 extents: one FDS frame went out, then ERROR.
	data := make([]byte, 100*4096)
	m.store("fails", data, PutOptions{ChunkSize: 4096})
	m.mu.Lock()
	m.openFailAfter = 70
	m.mu.Unlock()
	if _, xs, err := c.GetFD(ctx, "fails"); !errors.Is(err, blob.ErrUnreachable) || xs != nil {
		t.Fatalf("failing get: %v (%d extents), want ErrUnreachable and none", err, len(xs))
	}
	m.mu.Lock()
	m.openFailAfter = 0
	m.mu.Unlock()
	// The connection stays usable, and nothing leaked.
	if _, err := c.Stat(ctx, "fails"); err != nil {
		t.Fatalf("stat after failed get: %v", err)
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open after the failed gets, %d before", after, before)
	}
}

func TestDecodeFDS(t *testing.T) {
	xs := []ExtentRange{{0, 10, 0}, {10, 5, 4096}}
	got, err := decodeFDS(appendFDS(nil, xs))
	if err != nil || len(got) != 2 || got[1] != xs[1] {
		t.Fatalf("round trip: %v %v", got, err)
	}
	for name, b := range map[string][]byte{
		"count 0":   appendU32(nil, 0),
		"count 65":  appendFDS(nil, make([]ExtentRange, 65)),
		"short":     appendFDS(nil, xs)[:20],
		"trailing":  append(appendFDS(nil, xs), 0),
		"empty ext": appendFDS(nil, []ExtentRange{{0, 0, 0}}),
	} {
		if _, err := decodeFDS(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzDecodeFDS(f *testing.F) {
	f.Add(appendFDS(nil, []ExtentRange{{0, 10, 0}, {10, 5, 4096}}))
	f.Add(appendU32(nil, 0))
	f.Add(appendU32(nil, 1<<31))
	f.Fuzz(func(t *testing.T, b []byte) {
		xs, err := decodeFDS(b)
		if err != nil {
			return
		}
		if got := appendFDS(nil, xs); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}
