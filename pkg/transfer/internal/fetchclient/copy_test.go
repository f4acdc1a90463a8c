package fetchclient

import (
	"bytes"
	"io"
	"testing"
	"unsafe"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer/internal/fetchwire"
	"github.com/omst-project/omst/pkg/transfer/internal/piece"
	"github.com/omst-project/omst/pkg/transfer/internal/stats"
)

// readLog is a reply stream that notes the buffers it is read into.
type readLog struct {
	r    io.Reader
	bufs [][]byte
}

func (l *readLog) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.bufs = append(l.bufs, p[:n])
	return n, err
}

// A reply in pieces is read from the stream straight into the chunk's own
// buffer, not through another buffer: of a 1 MiB chunk sent as one
// PIECE, at least 99 % of the bytes were read by the stream into the
// memory that the chunk's Data is (before: every byte went into a 64 KiB
// read buffer and a scratch buffer first, and was copied twice).
func TestPiecesReadInPlace(t *testing.T) {
	data, h, ob := chunkOf(1 << 20)
	var wire bytes.Buffer
	wire.Write(outboard(1, ob)[fetchwire.ReplyHeaderLen:])
	wire.Write(pieceAt(1, 0, data)[fetchwire.ReplyHeaderLen:])
	log := &readLog{r: &wire}
	br := newReplyReader(log)
	fs := &fetchStream{fp: &fetchPeer{c: &Client{cfg: Config{Stats: &stats.Counters{}, Describe: func(p peer.ID) string { return p.String() }}}}, v130: true}
	sink := piece.NewPartial(h)
	pr := &pendingReq{limit: 1 << 20, hash: h, sink: sink}
	if _, err := fs.readPieces(br, pr, fetchwire.StatusOutboard, len(ob)); err != nil {
		t.Fatal(err)
	}
	end, err := fs.readPieces(br, pr, fetchwire.StatusPiece, fetchwire.PieceHeaderLen+len(data))
	if err != nil || !end {
		t.Fatalf("piece: end %v, %v", end, err)
	}
	st := sink.State()
	if !st.Done() || !bytes.Equal(st.Data, data) {
		t.Fatal("wrong chunk")
	}
	lo := uintptr(unsafe.Pointer(&st.Data[0]))
	hi := lo + uintptr(len(st.Data))
	inPlace := 0
	for _, b := range log.bufs {
		if len(b) > 0 {
			if p := uintptr(unsafe.Pointer(&b[0])); p >= lo && p < hi {
				inPlace += len(b)
			}
		}
	}
	if inPlace < len(data)*99/100 {
		t.Fatalf("%d of the chunk's %d bytes read straight into it, want at least 99 %%", inPlace, len(data))
	}
}
