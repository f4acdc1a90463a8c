package bulk

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/omst-project/omst/internal/wire"
)

// KeyLen is the length of a connection key (AES-256).
const KeyLen = 32

// maxFrame is the most plaintext one sealed frame carries.
const maxFrame = 64 << 10

// frameHeaderLen is a sealed frame's header: the ciphertext's length
// (u32, the GCM tag included), also its additional data.
const frameHeaderLen = 4

// ErrAuth marks a sealed frame that did not authenticate: the bytes were
// changed on the way, or were not sealed with this connection's key.
var ErrAuth = errors.New("bulk: frame failed authentication")

// sealedConn is a connection whose bytes, both ways, are AES-256-GCM
// frames under a key used for this connection only (it came with the
// ticket, over the libp2p session, and never crosses the LAN). A frame is
// u32 ciphertext length, then the ciphertext and its 16-byte tag; the
// nonce is the direction (4 bytes: 0 from the dialer, 1 from the
// listener) and the frame's number in that direction (u64), so that no
// nonce repeats under a key, and a frame dropped, repeated, reordered or
// sent back the other way fails to open. Reads and writes may run
// concurrently with each other (one reader, one writer at a time).
type sealedConn struct {
	net.Conn
	aead cipher.AEAD

	wmu    sync.Mutex
	wdir   uint32
	wseq   uint64
	wbuf   []byte
	werr   error
	wnonce [12]byte // under wmu
	rdir   uint32
	rseq   uint64
	rbuf   []byte // ciphertext of the frame being read
	plain  []byte // the opened frame's bytes not yet returned
	rerr   error
	rnonce [12]byte
	hdrBuf [frameHeaderLen]byte
}

// newSealedConn wraps c with key; dialer says which end this is.
func newSealedConn(c net.Conn, key []byte, dialer bool) (*sealedConn, error) {
	if len(key) != KeyLen {
		return nil, fmt.Errorf("bulk: key of %d bytes, want %d", len(key), KeyLen)
	}
	blk, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		return nil, err
	}
	sc := &sealedConn{Conn: c, aead: aead, wdir: 1, rdir: 0}
	if dialer {
		sc.wdir, sc.rdir = 0, 1
	}
	return sc, nil
}

// nonce fills n with a frame's nonce and returns it: the connection's
// own buffers (wnonce, rnonce), so that no frame allocates one.
func nonce(n *[12]byte, dir uint32, seq uint64) []byte {
	binary.BigEndian.PutUint32(n[:], dir)
	binary.BigEndian.PutUint64(n[4:], seq)
	return n[:]
}

// Write seals p in frames of at most maxFrame bytes and writes them.
func (sc *sealedConn) Write(p []byte) (int, error) {
	sc.wmu.Lock()
	defer sc.wmu.Unlock()
	if sc.werr != nil {
		return 0, sc.werr
	}
	done := 0
	for len(p) > 0 {
		n := min(len(p), maxFrame)
		ct := n + sc.aead.Overhead()
		if cap(sc.wbuf) < frameHeaderLen+ct {
			sc.wbuf = make([]byte, frameHeaderLen, frameHeaderLen+maxFrame+sc.aead.Overhead())
		}
		b := sc.wbuf[:frameHeaderLen]
		binary.BigEndian.PutUint32(b, uint32(ct))
		b = sc.aead.Seal(b, nonce(&sc.wnonce, sc.wdir, sc.wseq), p[:n], b[:frameHeaderLen])
		sc.wseq++
		if _, err := sc.Conn.Write(b); err != nil {
			// A frame half written cannot be resumed: the connection is done.
			sc.werr = err
			return done, err
		}
		done += n
		p = p[n:]
	}
	return done, nil
}

// Read returns bytes of the next frames, each authenticated before any of
// its bytes is returned; a frame that fails is an error wrapping ErrAuth,
// and so is every read after it.
func (sc *sealedConn) Read(p []byte) (int, error) {
	if len(sc.plain) == 0 {
		if sc.rerr != nil {
			return 0, sc.rerr
		}
		if err := sc.readFrame(); err != nil {
			sc.rerr = err
			return 0, err
		}
	}
	n := copy(p, sc.plain)
	sc.plain = sc.plain[n:]
	return n, nil
}

func (sc *sealedConn) readFrame() error {
	for {
		if _, err := io.ReadFull(sc.Conn, sc.hdrBuf[:]); err != nil {
			return err // io.EOF between frames: the peer closed
		}
		ct := int(binary.BigEndian.Uint32(sc.hdrBuf[:]))
		if ct < sc.aead.Overhead() || ct > maxFrame+sc.aead.Overhead() {
			return fmt.Errorf("%w: %w", ErrAuth, wire.Malformed("sealed frame of %d bytes", ct))
		}
		if cap(sc.rbuf) < ct {
			sc.rbuf = make([]byte, maxFrame+sc.aead.Overhead())
		}
		b := sc.rbuf[:ct]
		if _, err := io.ReadFull(sc.Conn, b); err != nil {
			return wire.Unexpected(err)
		}
		pt, err := sc.aead.Open(b[:0], nonce(&sc.rnonce, sc.rdir, sc.rseq), b, sc.hdrBuf[:])
		if err != nil {
			return fmt.Errorf("%w (frame %d)", ErrAuth, sc.rseq)
		}
		sc.rseq++
		if len(pt) > 0 {
			sc.plain = pt
			return nil
		}
	}
}
