package server

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
	"github.com/omst-project/omst/pkg/transfer/internal/stats"
)

// A relay passing a chunk on while it arrives sends the outboard it got
// first. When that outboard lied about the chunk's length (it passes
// VerifyOutboard; only the last group's bytes could prove it) and the
// chunk then arrives whole from elsewhere, the relay sends nothing more
// against the lie, ends the reply NOT_FOUND (the asker asks again and
// does not blame it), and does not keep the lie for the chunk's next
// askers; a true outboard passed on is kept.
func TestPassOnLengthLie(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	data := make([]byte, 4*piece.GroupSize+6000)
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	h := blob.HashChunk(data)
	ob, _ := piece.Outboard(data, h)
	lie := append([]byte(nil), ob...)
	binary.LittleEndian.PutUint64(lie, uint64(len(data)+3000))
	if _, err := piece.VerifyOutboard(lie, h, blob.MaxChunkSize); err != nil {
		t.Fatalf("the lie does not pass VerifyOutboard (%v): this test no longer tests anything", err)
	}

	for _, tc := range []struct {
		name string
		ob   []byte
	}{{"lie", lie}, {"truth", ob}} {
		t.Run(tc.name, func(t *testing.T) {
			srv := &Server{outboards: newOutboardCache(8), cfg: Config{Stats: &stats.Counters{}}}
			ready := make(chan *fetchSlot, 16)
			sl := &fetchSlot{chunk: true}
			pc := &pieceSender{srv: srv, ctx: context.Background(), sl: sl, ready: ready}
			p := piece.NewPartial(h)
			n, _ := piece.ChunkLen(tc.ob, blob.MaxChunkSize)
			p.Begin(tc.ob, n)
			p.Add(0, data[:4*piece.GroupSize]) // true groups: they verify against either
			if !pc.sendFrom(h, p.State()) {
				t.Fatal("sendFrom failed")
			}
			p.Complete(data) // the chunk, verified whole, from elsewhere
			if !pc.sendFrom(h, p.State()) {
				t.Fatal("sendFrom failed")
			}
			pc.finish(h, data, nil)
			close(ready)
			var frames []byte
			for f := range ready {
				frames = append(frames, f.status)
			}
			if len(frames) != 2 || frames[0] != fetchwire.StatusOutboard || frames[1] != fetchwire.StatusPiece {
				t.Fatalf("frames before the last: %v, want an OUTBOARD and a PIECE", frames)
			}
			kept := srv.outboards.get(h, len(data))
			if tc.name == "lie" {
				if sl.status != fetchwire.StatusNotFound {
					t.Fatalf("last frame status %d after a lie, want NOT_FOUND", sl.status)
				}
				if kept != nil {
					t.Fatal("the lying outboard was kept for the chunk's next askers")
				}
				return
			}
			if sl.status != fetchwire.StatusPiece || sl.off != 4*piece.GroupSize || len(sl.body) != 6000 {
				t.Fatalf("last frame: status %d at %d, %d bytes; want the last PIECE", sl.status, sl.off, len(sl.body))
			}
			if kept == nil {
				t.Fatal("the true outboard passed on was not kept")
			}
		})
	}
}
