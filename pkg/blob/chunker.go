package blob

import (
	"fmt"
	"io"
)

// maxEmptyReads is how many consecutive (0, nil) reads FillChunk accepts
// before it fails with io.ErrNoProgress (as bufio does).
const maxEmptyReads = 100

// FillChunk reads from r into buf until buf is full or r reports the end of
// its input, and returns the number of bytes read:
//
//   - (len(buf), nil): buf is full (r may have more);
//   - (n, io.EOF), n < len(buf): r returned io.EOF itself (not wrapped):
//     the input ended after n more bytes, n may be 0;
//   - (n, err) for any other error r returned, unchanged: the input did not
//     end, it failed. This includes io.ErrUnexpectedEOF and errors that
//     wrap io.EOF or io.ErrUnexpectedEOF: a reader uses them to say that
//     its input was cut short, which must never pass for a complete input.
//
// Unlike io.ReadFull, FillChunk never turns an end of input into
// io.ErrUnexpectedEOF, so that a caller can tell the two apart.
func FillChunk(r io.Reader, buf []byte) (int, error) {
	n, empty := 0, 0
	for n < len(buf) {
		k, err := r.Read(buf[n:])
		n += k
		if err != nil {
			return n, err // io.EOF only if r returned io.EOF itself
		}
		if k > 0 {
			empty = 0
		} else if empty++; empty >= maxEmptyReads {
			return n, io.ErrNoProgress
		}
	}
	return n, nil
}

// Split reads r to its end in chunks of chunkSize bytes, hashes each, and
// calls emit(i, hash, bytes) in order; bytes is reused after emit returns.
// It returns the manifest of everything read. An input longer than
// MaxSizeFor(chunkSize) fails with an error wrapping ErrTooBig as soon as
// its read passes the bound.
//
// Only io.EOF itself, returned by r, ends the input (see FillChunk). Any
// other error from r (io.ErrUnexpectedEOF and wrapped io.EOF included)
// means the input was cut or failed: Split then returns no manifest and
// the error wrapped, as it does when emit fails.
func Split(r io.Reader, chunkSize int, emit func(i int, h Hash, chunk []byte) error) (*Manifest, error) {
	if err := ValidateChunkSize(chunkSize); err != nil {
		return nil, err
	}
	m := &Manifest{ChunkSize: uint32(chunkSize)}
	maxChunks := MaxChunksFor(chunkSize)
	buf := make([]byte, chunkSize)
	for i := 0; ; i++ {
		n, err := FillChunk(r, buf)
		if err != nil && err != io.EOF {
			return nil, fmt.Errorf("split: read chunk %d: %w", i, err)
		}
		if n > 0 {
			if len(m.Chunks) >= maxChunks {
				return nil, fmt.Errorf("split: %w", TooBig(0, chunkSize))
			}
			h := HashChunk(buf[:n])
			if eerr := emit(i, h, buf[:n]); eerr != nil {
				return nil, fmt.Errorf("split chunk %d: %w", i, eerr)
			}
			m.Chunks = append(m.Chunks, h)
			m.Size += uint64(n)
		}
		if err == io.EOF {
			return m, nil
		}
	}
}
