package piece

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"

	"lukechampine.com/blake3/bao"

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

// A Partial begun with an outboard that lies about the length (same
// groups, a longer last one: it passes VerifyOutboard) publishes the true
// groups sent against it, never the last; the chunk verified whole then
// settles the length and drops the lying outboard, and the prefix read
// before stays true.
func TestPartialLengthLie(t *testing.T) {
	data := randBytes(4*GroupSize+6000, 4)
	h := blob.HashChunk(data)
	lie, _ := Outboard(data, h)
	binary.LittleEndian.PutUint64(lie, uint64(len(data)+3000))
	n, err := VerifyOutboard(lie, h, blob.MaxChunkSize)
	if err != nil || n != len(data)+3000 {
		t.Fatalf("the lie does not pass VerifyOutboard (%d, %v): this test no longer tests anything", n, err)
	}
	if err := VerifyPiece(append(bytes.Clone(data[4*GroupSize:]), make([]byte, 3000)...), lie, 4*GroupSize, h); err == nil {
		t.Fatal("a last group of the lie's length verified")
	}
	p := NewPartial(h)
	p.Begin(lie, n)
	if err := VerifyPiece(data[:4*GroupSize], lie, 0, h); err != nil {
		t.Fatalf("the true groups against the lie: %v", err)
	}
	p.Add(0, data[:4*GroupSize])
	before := p.State()
	if before.Len != n || len(before.Data) != 4*GroupSize || before.Done() {
		t.Fatalf("after the true groups: len %d, %d bytes, done %v", before.Len, len(before.Data), before.Done())
	}
	p.Complete(data)
	st := p.State()
	if !st.Done() || st.Len != len(data) || !bytes.Equal(st.Data, data) || st.Outboard != nil {
		t.Fatalf("after Complete: len %d, done %v, outboard kept %v", st.Len, st.Done(), st.Outboard != nil)
	}
	if !bytes.Equal(before.Data, data[:4*GroupSize]) {
		t.Fatal("a published prefix changed")
	}
	p.Complete(data[:10]) // once whole, nothing changes it
	if st := p.State(); st.Len != len(data) {
		t.Fatalf("a second Complete changed the length to %d", st.Len)
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
		// Of the chunk's own length, only its outboard verifies; another
		// length may (VerifyOutboard's doc: only bytes bind it).
		n, err := VerifyOutboard(b, h, blob.MaxChunkSize)
		if err == nil && n == len(data) && !bytes.Equal(b, ob) {
			t.Fatal("a different outboard of the chunk's length verified")
		}
	})
}

// The outboard is Bao's (lukechampine.com/blake3/bao, the reference) for
// chunks of 1 to 70 groups and ragged ends, and VerifyPiece agrees with
// bao.VerifyChunk on pieces of 1 to 9 groups at every group offset, intact
// and with one byte flipped in any of their groups.
func TestMatchesBao(t *testing.T) {
	sizes := []int{GroupSize + 1, 2 * GroupSize, 2*GroupSize + 1023, 2*GroupSize + 1024, 2*GroupSize + 1025,
		5*GroupSize - 1, 7 * GroupSize, 8 * GroupSize, 9*GroupSize + 5000, 33 * GroupSize, 64*GroupSize - 1, 70 * GroupSize}
	for _, n := range sizes {
		data := randBytes(n, uint64(n)+7)
		h := blob.HashChunk(data)
		ob, err := Outboard(data, h)
		if err != nil {
			t.Fatalf("n=%d: %v", n, err)
		}
		want, root := bao.EncodeBuf(data, Group, true)
		if blob.Hash(root) != h || !bytes.Equal(ob, want) {
			t.Fatalf("n=%d: outboard differs from bao's", n)
		}
		for off := 0; off < n; off += GroupSize {
			for k := 1; k <= 9 && off+(k-1)*GroupSize < n; k++ {
				p := data[off:min(off+k*GroupSize, n)]
				if err := VerifyPiece(p, ob, off, h); err != nil {
					t.Fatalf("n=%d off=%d groups=%d: %v", n, off, k, err)
				}
				for j := 0; j < len(p); j += GroupSize + GroupSize/3 {
					bad := bytes.Clone(p)
					bad[j] ^= 4
					err := VerifyPiece(bad, ob, off, h)
					if ok := bao.VerifyChunk(bad, ob, Group, uint64(off), h); ok || !errors.Is(err, ErrCorrupt) {
						t.Fatalf("n=%d off=%d groups=%d flipped at %d: bao %v, VerifyPiece %v", n, off, k, j, ok, err)
					}
				}
			}
		}
	}
}

// A piece checked against an outboard of the wrong length is refused,
// never a panic: VerifyPiece reads only within ob. A damaged inner node
// is VerifyOutboard's to catch; a damaged value of the piece's own group
// VerifyPiece's.
func TestVerifyPieceBadOutboard(t *testing.T) {
	data := randBytes(5*GroupSize, 9)
	h := blob.HashChunk(data)
	ob, _ := Outboard(data, h)
	for _, bad := range [][]byte{ob[:len(ob)-1], append(bytes.Clone(ob), 0), ob[:8], {}} {
		if err := VerifyPiece(data[:GroupSize], bad, 0, h); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("outboard of %d bytes: %v", len(bad), err)
		}
	}
	flipped := bytes.Clone(ob)
	flipped[leafAt(5, 0)] ^= 1
	if err := VerifyPiece(data[:GroupSize], flipped, 0, h); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("flipped outboard: %v", err)
	}
}

func BenchmarkOutboard(b *testing.B) {
	data := randBytes(1<<20, 1)
	h := blob.HashChunk(data)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := Outboard(data, h); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkVerifyPieces verifies a 1 MiB chunk in the 64 KiB pieces a
// receiver reads (fetchclient's scratchGroups).
func BenchmarkVerifyPieces(b *testing.B) {
	data := randBytes(1<<20, 1)
	h := blob.HashChunk(data)
	ob, _ := Outboard(data, h)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		for off := 0; off < len(data); off += 4 * GroupSize {
			if err := VerifyPiece(data[off:off+4*GroupSize], ob, off, h); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkChunkHash is the whole-chunk hash a chunk was verified with
// before pieces (zeebo/blake3), for comparison.
func BenchmarkChunkHash(b *testing.B) {
	data := randBytes(1<<20, 1)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		blob.HashChunk(data)
	}
}

// VerifyPiece never panics on any outboard, piece and offset, and accepts
// a piece against the chunk's true outboard only if it is the chunk's.
func FuzzVerifyPiece(f *testing.F) {
	data := randBytes(3*GroupSize+100, 6)
	h := blob.HashChunk(data)
	ob, _ := Outboard(data, h)
	f.Add(ob, data[GroupSize:2*GroupSize], GroupSize)
	f.Add(ob, data[3*GroupSize:], 3*GroupSize)
	f.Add(ob[:8], data[:10], 0)
	f.Add([]byte{}, []byte{}, -1)
	f.Fuzz(func(t *testing.T, b, p []byte, off int) {
		err := VerifyPiece(p, b, off, h)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error not wrapping ErrCorrupt: %v", err)
		}
		if err == nil && bytes.Equal(b, ob) && (off < 0 || off+len(p) > len(data) || !bytes.Equal(p, data[off:off+len(p)])) {
			t.Fatalf("a piece of %d bytes at %d that is not the chunk's verified", len(p), off)
		}
	})
}

func BenchmarkVerifyOutboard(b *testing.B) {
	data := randBytes(1<<20, 1)
	h := blob.HashChunk(data)
	ob, _ := Outboard(data, h)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := VerifyOutboard(ob, h, blob.MaxChunkSize); err != nil {
			b.Fatal(err)
		}
	}
}

// HashOutboard's hash is blob.HashChunk's and its outboard Outboard's,
// for chunks of one group, of whole groups and of a partial last group.
func TestHashOutboard(t *testing.T) {
	for i, n := range []int{1, GroupSize, GroupSize + 1, 3*GroupSize + 100, 1 << 20, 1<<20 - 7} {
		data := randBytes(n, uint64(20+i))
		h, ob := HashOutboard(data)
		if want := blob.HashChunk(data); h != want {
			t.Fatalf("%d bytes: hash %s, want %s", n, h, want)
		}
		want, err := Outboard(data, h)
		if err != nil || !bytes.Equal(ob, want) {
			t.Fatalf("%d bytes: outboard differs from Outboard's (%v)", n, err)
		}
		if _, err := VerifyOutboard(ob, h, blob.MaxChunkSize); err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
	}
}

// TestPartialWakeOnDemand: filling a chunk that no one watches allocates
// the Partial and its buffer only (a wake channel per piece before); a
// State taken between two pieces still sees its Changed closed at the
// next one, and a State after it a fresh, open one.
func TestPartialWakeOnDemand(t *testing.T) {
	data := randBytes(1<<20, 4)
	h := blob.HashChunk(data)
	ob, _ := Outboard(data, h)
	const piece = 4 * GroupSize
	allocs := testing.AllocsPerRun(20, func() {
		p := NewPartial(h)
		p.Begin(ob, len(data))
		for off := 0; off < len(data); off += piece {
			p.Add(off, data[off:off+piece])
		}
	})
	if allocs > 2 {
		t.Fatalf("%v allocations to fill a 1 MiB chunk in %d pieces unwatched, want at most 2", allocs, len(data)/piece)
	}
	p := NewPartial(h)
	p.Begin(ob, len(data))
	p.Add(0, data[:piece])
	st := p.State()
	select {
	case <-st.Changed:
		t.Fatal("Changed closed before a change")
	default:
	}
	p.Add(piece, data[piece:2*piece])
	select {
	case <-st.Changed:
	default:
		t.Fatal("Changed still open after a piece")
	}
	st = p.State()
	select {
	case <-st.Changed:
		t.Fatal("a new State's Changed is closed")
	default:
	}
	p.Complete(data)
	<-st.Changed
}

// BenchmarkPartialFill: a 1 MiB chunk published in 64 KiB pieces (Begin,
// then Add per piece), unwatched, as a receiver's stream fills it.
func BenchmarkPartialFill(b *testing.B) {
	data := randBytes(1<<20, 5)
	h := blob.HashChunk(data)
	ob, _ := Outboard(data, h)
	const piece = 4 * GroupSize
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		p := NewPartial(h)
		p.Begin(ob, len(data))
		for off := 0; off < len(data); off += piece {
			p.Add(off, data[off:off+piece])
		}
	}
}
