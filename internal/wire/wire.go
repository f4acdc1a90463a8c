// Package wire holds the primitives that omst's libp2p protocols share
// (pkg/tree's tree and names protocols, pkg/transfer's fetch protocol): the
// malformed-message error, bounded reads, CIDs and error messages on the
// wire. Decoders built on it check every length against an explicit limit
// before they allocate, and never panic.
package wire

import (
	"errors"
	"fmt"
	"io"
	"unicode/utf8"

	"github.com/ipfs/go-cid"
)

// MaxCIDLen bounds a CID on the wire.
const MaxCIDLen = 256

// ErrMalformed marks a message that breaks its protocol's wire format; the
// peer that sent it is to blame.
var ErrMalformed = errors.New("malformed message")

// Malformed returns an error wrapping ErrMalformed.
func Malformed(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrMalformed, fmt.Sprintf(format, args...))
}

// Unexpected turns io.EOF, met in the middle of a message, into
// io.ErrUnexpectedEOF.
func Unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// ReadN reads exactly n bytes, allocating in steps of at most 1 MiB, so
// that a length a peer lied about costs the peer, not us.
func ReadN(r io.Reader, n int) ([]byte, error) {
	const step = 1 << 20
	if n <= step {
		b := make([]byte, n)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, Unexpected(err)
		}
		return b, nil
	}
	b := make([]byte, 0, step)
	for len(b) < n {
		k := min(step, n-len(b))
		b = append(b, make([]byte, k)...)
		if _, err := io.ReadFull(r, b[len(b)-k:]); err != nil {
			return nil, Unexpected(err)
		}
	}
	return b, nil
}

// DecodeCID parses b, which must be exactly one CID of at most MaxCIDLen
// bytes.
func DecodeCID(b []byte) (cid.Cid, error) {
	if len(b) > MaxCIDLen {
		return cid.Undef, Malformed("CID of %d bytes", len(b))
	}
	n, id, err := cid.CidFromBytes(b)
	if err != nil {
		return cid.Undef, fmt.Errorf("%w: bad CID: %v", ErrMalformed, err)
	}
	if n != len(b) {
		return cid.Undef, Malformed("%d bytes after the CID", len(b)-n)
	}
	return id, nil
}

// TruncUTF8 cuts s to at most n bytes, at a rune boundary.
func TruncUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// SliceReader reads from a byte slice (io.Reader without bytes.Reader's
// other methods, for decoders that take a reader).
type SliceReader struct{ b []byte }

// NewSliceReader returns a reader of b.
func NewSliceReader(b []byte) *SliceReader { return &SliceReader{b} }

func (s *SliceReader) Read(p []byte) (int, error) {
	if len(s.b) == 0 {
		return 0, io.EOF
	}
	n := copy(p, s.b)
	s.b = s.b[n:]
	return n, nil
}
