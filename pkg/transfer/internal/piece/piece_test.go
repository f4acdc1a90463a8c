package piece

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// Every group of chunks of many sizes verifies against the outboard, and
// a flipped bit anywhere in the outboard or a piece is refused.
func TestOutboardAndPieces(t *testing.T) {
	for _, n := range []int{1, 1000, GroupSize - 1, GroupSize, GroupSize + 1, 3*GroupSize + 17, 1 << 20} {
		data := randBytes(n, uint64(n))
		h := blob.HashChunk(data)
		ob, err := Outboard(data, h)
		if err != nil {
			t.Fatal(err)
		}
		if len(ob) != OutboardLen(n) {
			t.Fatalf("n=%d: outboard %d bytes, want %d", n, len(ob), OutboardLen(n))
		}
		if got, err := VerifyOutboard(ob, h, blob.MaxChunkSize); err != nil || got != n {
			t.Fatalf("n=%d: VerifyOutboard = %d, %v", n, got, err)
		}
		for off := 0; off < n; off += GroupSize {
			p := data[off:min(off+GroupSize, n)]
			if err := VerifyPiece(p, ob, off, h); err != nil {
				t.Fatalf("n=%d off=%d: %v", n, off, err)
			}
			bad := bytes.Clone(p)
			bad[len(bad)/2] ^= 1
			if err := VerifyPiece(bad, ob, off, h); !errors.Is(err, blob.ErrCorrupt) {
				t.Fatalf("n=%d off=%d: flipped piece: %v", n, off, err)
			}
		}
		if err := VerifyPiece(data, ob, 0, h); err != nil {
			t.Fatalf("n=%d: whole chunk as one piece: %v", n, err)
		}
		for i := 8; i < len(ob); i += 29 {
			bad := bytes.Clone(ob)
			bad[i] ^= 0x80
			if _, err := VerifyOutboard(bad, h, blob.MaxChunkSize); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("n=%d: outboard flipped at %d accepted", n, i)
			}
		}
		if _, err := Outboard(data, blob.HashChunk(data[:n/2])); n > 1 && !errors.Is(err, blob.ErrCorrupt) {
			t.Fatalf("n=%d: outboard against the wrong hash: %v", n, err)
		}
	}
}

func TestPieceBounds(t *testing.T) {
	data := randBytes(3*GroupSize+5, 9)
	h := blob.HashChunk(data)
	ob, _ := Outboard(data, h)
	for _, c := range []struct{ off, n int }{{1, GroupSize}, {0, GroupSize + 1}, {GroupSize, 0}, {3 * GroupSize, 6}, {4 * GroupSize, 1}} {
		end := min(c.off+c.n, len(data))
		p := data[min(c.off, len(data)):end]
		if c.off+c.n > len(data) {
			p = append(bytes.Clone(p), make([]byte, c.off+c.n-end)...)
		}
		if err := VerifyPiece(p, ob, c.off, h); err == nil {
			t.Fatalf("piece of %d at %d accepted", c.n, c.off)
		}
	}
	if _, err := VerifyOutboard(ob, h, len(data)-1); err == nil {
		t.Fatal("outboard of a chunk over the limit accepted")
	}
	if _, err := VerifyOutboard(ob[:len(ob)-1], h, blob.MaxChunkSize); err == nil {
		t.Fatal("short outboard accepted")
	}
}

func TestPartial(t *testing.T) {
	data := randBytes(5*GroupSize, 3)
	h := blob.HashChunk(data)
	ob, _ := Outboard(data, h)
	p := NewPartial(h)
	st := p.State()
	if st.Len != 0 || len(st.Data) != 0 || st.Done() {
		t.Fatalf("empty partial: %+v", st)
	}
	p.Add(0, data[:GroupSize]) // before Begin: ignored
	p.Begin(ob, len(data))
	<-st.Changed
	p.Add(2*GroupSize, data[2*GroupSize:3*GroupSize]) // a gap: ignored
	if got := len(p.State().Data); got != 0 {
		t.Fatalf("verified %d bytes after a gap", got)
	}
	p.Add(0, data[:2*GroupSize])
	p.Add(GroupSize, data[GroupSize:3*GroupSize]) // overlaps: extends
	st = p.State()
	if !bytes.Equal(st.Data, data[:3*GroupSize]) {
		t.Fatalf("verified prefix %d bytes, want %d", len(st.Data), 3*GroupSize)
	}
	p.Fail(errors.New("sender gone"))
	if st2 := p.State(); st2.Err == nil || len(st2.Data) != 3*GroupSize {
		t.Fatalf("after Fail: %+v", st2)
	}
	p.Complete(data)
	if st3 := p.State(); !st3.Done() || !bytes.Equal(st3.Data, data) {
		t.Fatal("Complete after a failure did not publish the chunk")
	}
	if !bytes.Equal(st.Data, data[:3*GroupSize]) {
		t.Fatal("a published prefix changed")
	}
}

func FuzzVerifyOutboard(f *testing.F) {
	data := randBytes(70<<10, 5)
	h := blob.HashChunk(data)
	ob, _ := Outboard(data, h)
	f.Add(ob)
	f.Add(ob[:8])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		n, err := VerifyOutboard(b, h, blob.MaxChunkSize)
		if err == nil && (n != len(data) || !bytes.Equal(b, ob)) {
			t.Fatalf("a different outboard verified (%d bytes)", n)
		}
	})
}
