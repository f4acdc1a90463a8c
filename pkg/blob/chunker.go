package blob

import (
	"errors"
	"fmt"
	"io"
)

// Split reads r to EOF in chunks of chunkSize bytes, hashes each, and calls
// emit(i, hash, bytes) in order; bytes is reused after emit returns. It
// returns the manifest of everything read. An error from r or emit stops the
// split and is returned wrapped.
func Split(r io.Reader, chunkSize int, emit func(i int, h Hash, chunk []byte) error) (*Manifest, error) {
	if err := ValidateChunkSize(chunkSize); err != nil {
		return nil, err
	}
	m := &Manifest{ChunkSize: uint32(chunkSize)}
	buf := make([]byte, chunkSize)
	for i := 0; ; i++ {
		n, err := io.ReadFull(r, buf)
		if n > 0 {
			if len(m.Chunks) >= MaxChunks {
				return nil, fmt.Errorf("split: blob exceeds %d chunks", MaxChunks)
			}
			h := HashChunk(buf[:n])
			if eerr := emit(i, h, buf[:n]); eerr != nil {
				return nil, fmt.Errorf("split chunk %d: %w", i, eerr)
			}
			m.Chunks = append(m.Chunks, h)
			m.Size += uint64(n)
		}
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return m, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split: read chunk %d: %w", i, err)
		}
	}
}
