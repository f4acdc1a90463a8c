package faults

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

func tempFile(t *testing.T, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestDamageFlip(t *testing.T) {
	data := bytes.Repeat([]byte{0x55}, 4096)
	p := tempFile(t, data)
	desc, err := Damage(p, Flip, rand.New(rand.NewPCG(1, 2)))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if len(got) != len(data) {
		t.Fatalf("flip changed the size: %d", len(got))
	}
	diff := 0
	for i := range got {
		if got[i] != data[i] {
			diff++
			if x := got[i] ^ data[i]; x&(x-1) != 0 {
				t.Fatalf("byte %d: more than one bit flipped (%08b)", i, x)
			}
		}
	}
	if diff < 1 || diff > 4 {
		t.Fatalf("%d bytes changed, want 1..4 (%s)", diff, desc)
	}
	if blob.HashChunk(got) == blob.HashChunk(data) {
		t.Fatal("hash unchanged")
	}
}

func TestDamageTruncateDelete(t *testing.T) {
	data := []byte(strings.Repeat("x", 1000))
	p := tempFile(t, data)
	if _, err := Damage(p, Truncate, rand.New(rand.NewPCG(3, 4))); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if len(got) >= len(data) || !bytes.HasPrefix(data, got) {
		t.Fatalf("truncate left %d bytes", len(got))
	}
	if _, err := Damage(p, Delete, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("delete: %v", err)
	}
	empty := tempFile(t, nil)
	for _, k := range []DamageKind{Flip, Truncate} {
		if _, err := Damage(empty, k, rand.New(rand.NewPCG(5, 6))); err == nil {
			t.Fatalf("%s of an empty file succeeded", k)
		}
	}
}

func TestDamageReplays(t *testing.T) {
	data := bytes.Repeat([]byte{0}, 1<<16)
	a, b := tempFile(t, data), tempFile(t, data)
	Damage(a, Flip, rand.New(rand.NewPCG(7, 8)))
	Damage(b, Flip, rand.New(rand.NewPCG(7, 8)))
	ga, _ := os.ReadFile(a)
	gb, _ := os.ReadFile(b)
	if !bytes.Equal(ga, gb) {
		t.Fatal("the same seed damaged differently")
	}
}

func TestChunkLayout(t *testing.T) {
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	data = append(data, 'z')
	hs := ChunkHashes(data, 1<<20)
	if len(hs) != 2 || hs[1] != blob.HashChunk([]byte("z")) {
		t.Fatalf("chunk hashes %v", hs)
	}
	p := ChunkPath("/h", hs[1])
	x := hs[1].String()
	if p != "/h/cache/chunks/"+x[:2]+"/"+x {
		t.Fatalf("chunk path %s", p)
	}
	if IndexDir("/h") != "/h/cache/index" {
		t.Fatal(IndexDir("/h"))
	}
}

func TestDamageIndex(t *testing.T) {
	home := t.TempDir()
	idx := IndexDir(home)
	os.MkdirAll(idx, 0o755)
	for _, n := range []string{"MANIFEST", "000001.vlog", "000001.sst", "EMPTY"} {
		data := bytes.Repeat([]byte{0xaa}, 512)
		if n == "EMPTY" {
			data = nil
		}
		os.WriteFile(filepath.Join(idx, n), data, 0o644)
	}
	desc, err := DamageIndex(home, false, rand.New(rand.NewPCG(9, 10)))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(desc, "EMPTY") {
		t.Fatalf("damaged an empty file: %s", desc)
	}
	if _, err := DamageIndex(home, true, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(idx); !os.IsNotExist(err) {
		t.Fatalf("index still there: %v", err)
	}
}
