package blob

import (
	"encoding/binary"
	"fmt"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
	"github.com/zeebo/blake3"
)

// Chunk size limits and default.
const (
	DefaultChunkSize = 1 << 20 // 1 MiB
	MinChunkSize     = 4 << 10 // 4 KiB
	MaxChunkSize     = 64 << 20
	// MaxChunks bounds a manifest (with 1 MiB chunks: 16 TiB).
	MaxChunks = 1 << 24
)

// manifest wire format, version 1 (all integers big-endian):
//
//	magic     4 bytes  "OMF1"
//	hashAlg   1 byte   1 = BLAKE3-256
//	reserved  3 bytes  zero
//	chunkSize 4 bytes
//	size      8 bytes
//	nChunks   4 bytes  must equal ceil(size/chunkSize)
//	hashes    nChunks * 32 bytes
var manifestMagic = [4]byte{'O', 'M', 'F', '1'}

const (
	manifestHeaderLen = 24
	hashAlgBLAKE3     = 1
)

// Manifest lists the chunks of a blob. It is immutable once built.
type Manifest struct {
	Size      uint64 // blob size in bytes
	ChunkSize uint32 // size of every chunk but the last
	Chunks    []Hash // chunk hashes in blob order
}

// NumChunks returns how many chunks a blob of size bytes has with chunk size cs.
func NumChunks(size uint64, cs uint32) int {
	if cs == 0 {
		return 0
	}
	return int((size + uint64(cs) - 1) / uint64(cs))
}

// ValidateChunkSize returns an error unless cs is within [MinChunkSize, MaxChunkSize].
func ValidateChunkSize(cs int) error {
	if cs < MinChunkSize || cs > MaxChunkSize {
		return fmt.Errorf("chunk size %d outside [%d, %d]", cs, MinChunkSize, MaxChunkSize)
	}
	return nil
}

// ChunkLen returns the length of chunk i.
func (m *Manifest) ChunkLen(i int) int {
	if i < 0 || i >= len(m.Chunks) {
		return 0
	}
	if i == len(m.Chunks)-1 {
		return int(m.Size - uint64(i)*uint64(m.ChunkSize))
	}
	return int(m.ChunkSize)
}

// ChunkOffset returns the byte offset of chunk i within the blob.
func (m *Manifest) ChunkOffset(i int) uint64 { return uint64(i) * uint64(m.ChunkSize) }

// Check returns an error wrapping ErrBadManifest if m is inconsistent.
func (m *Manifest) Check() error {
	if err := ValidateChunkSize(int(m.ChunkSize)); err != nil {
		return fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	n := NumChunks(m.Size, m.ChunkSize)
	if n > MaxChunks {
		return fmt.Errorf("%w: %d chunks exceed the limit %d", ErrBadManifest, n, MaxChunks)
	}
	if n != len(m.Chunks) {
		return fmt.Errorf("%w: size %d with chunk size %d needs %d chunks, manifest lists %d",
			ErrBadManifest, m.Size, m.ChunkSize, n, len(m.Chunks))
	}
	return nil
}

// Encode returns the canonical bytes of m. m must pass Check.
func (m *Manifest) Encode() []byte {
	b := make([]byte, EncodedManifestLen(len(m.Chunks)))
	copy(b, manifestMagic[:])
	b[4] = hashAlgBLAKE3
	binary.BigEndian.PutUint32(b[8:], m.ChunkSize)
	binary.BigEndian.PutUint64(b[12:], m.Size)
	binary.BigEndian.PutUint32(b[20:], uint32(len(m.Chunks)))
	for i, h := range m.Chunks {
		copy(b[manifestHeaderLen+i*HashSize:], h[:])
	}
	return b
}

// EncodedManifestLen is the length of the encoding of a manifest of n
// chunks.
func EncodedManifestLen(n int) int { return manifestHeaderLen + HashSize*n }

// DecodeManifest parses and checks the bytes produced by Encode. Any other
// input yields an error wrapping ErrBadManifest.
func DecodeManifest(b []byte) (*Manifest, error) {
	if len(b) < manifestHeaderLen {
		return nil, fmt.Errorf("%w: %d bytes, shorter than the %d-byte header", ErrBadManifest, len(b), manifestHeaderLen)
	}
	if [4]byte(b[:4]) != manifestMagic {
		return nil, fmt.Errorf("%w: bad magic %q", ErrBadManifest, b[:4])
	}
	if b[4] != hashAlgBLAKE3 {
		return nil, fmt.Errorf("%w: unknown hash algorithm %d", ErrBadManifest, b[4])
	}
	if b[5]|b[6]|b[7] != 0 {
		return nil, fmt.Errorf("%w: reserved bytes not zero", ErrBadManifest)
	}
	m := &Manifest{
		ChunkSize: binary.BigEndian.Uint32(b[8:]),
		Size:      binary.BigEndian.Uint64(b[12:]),
	}
	n := binary.BigEndian.Uint32(b[20:])
	if uint64(len(b)-manifestHeaderLen) != uint64(n)*HashSize {
		return nil, fmt.Errorf("%w: header says %d chunks, body holds %d bytes", ErrBadManifest, n, len(b)-manifestHeaderLen)
	}
	if n > MaxChunks {
		return nil, fmt.Errorf("%w: %d chunks exceed the limit %d", ErrBadManifest, n, MaxChunks)
	}
	m.Chunks = make([]Hash, n)
	for i := range m.Chunks {
		copy(m.Chunks[i][:], b[manifestHeaderLen+i*HashSize:])
	}
	if err := m.Check(); err != nil {
		return nil, err
	}
	return m, nil
}

// CID returns the blob ID: CIDv1 with codec raw over the BLAKE3-256
// multihash of the encoded manifest.
func (m *Manifest) CID() cid.Cid { return ManifestCID(m.Encode()) }

// ManifestCID returns the blob ID of encoded manifest bytes.
func ManifestCID(encoded []byte) cid.Cid {
	sum := blake3.Sum256(encoded)
	digest, err := mh.Encode(sum[:], mh.BLAKE3)
	if err != nil { // only for an unknown code, which BLAKE3 is not
		panic(fmt.Sprintf("encode multihash: %v", err))
	}
	return cid.NewCidV1(cid.Raw, digest)
}

// VerifyManifest decodes encoded and checks that it hashes to id.
func VerifyManifest(id cid.Cid, encoded []byte) (*Manifest, error) {
	if got := ManifestCID(encoded); !got.Equals(id) {
		return nil, fmt.Errorf("manifest for %s hashes to %s: %w", id, got, ErrCorrupt)
	}
	return DecodeManifest(encoded)
}

// ParseID reads s as a blob ID (a CIDv1, codec raw, over a BLAKE3-256
// multihash, as ManifestCID makes): ok is false for anything else, e.g. a
// name.
func ParseID(s string) (id cid.Cid, ok bool) {
	c, err := cid.Decode(s)
	if err != nil || c.Version() != 1 || c.Type() != cid.Raw {
		return cid.Undef, false
	}
	d, err := mh.Decode(c.Hash())
	if err != nil || d.Code != mh.BLAKE3 || d.Length != 32 {
		return cid.Undef, false
	}
	return c, true
}
