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
)

// Bounds on a blob's chunk count, and so on its manifest (32 bytes a
// chunk), which every node that fetches the blob holds in memory and a
// head fetches for every blob its workers put. They are sized from real
// use, blobs of up to a few TiB cut in the default 1 MiB chunks:
//
//   - a blob has at most MaxChunks chunks (4,194,304: a manifest of at
//     most 128 MiB): 4 TiB in 1 MiB chunks, 256 TiB in 64 MiB ones;
//   - a blob cut in chunks smaller than BigChunkSize (1 MiB) has at most
//     MaxSmallChunks (65,536: a manifest of at most 2 MiB): 256 MiB in
//     4 KiB chunks, 4 GiB in 64 KiB ones, 32 GiB in 512 KiB ones.
//
// So a manifest of more than 2 MiB always stands for at least 32768 times
// its size in blob bytes: no one can make a node hold millions of chunk
// hashes for a blob of a few GiB (a 64 GiB stream of zeros in 4 KiB
// chunks, one distinct chunk, was a manifest of 512 MiB). A bigger blob
// needs bigger chunks: CheckSize says which.
const (
	MaxChunks      = 1 << 22
	MaxSmallChunks = 1 << 16
	BigChunkSize   = 1 << 20
	// MaxManifestLen is the longest encoded manifest (MaxChunks chunks).
	MaxManifestLen = manifestHeaderLen + HashSize*MaxChunks
)

// MaxChunksFor returns the most chunks a blob cut in chunks of cs bytes
// may have: MaxChunks for chunks of at least BigChunkSize, else
// MaxSmallChunks.
func MaxChunksFor(cs int) int {
	if cs >= BigChunkSize {
		return MaxChunks
	}
	return MaxSmallChunks
}

// MaxSizeFor returns the largest blob that chunks of cs bytes may cut
// (MaxChunksFor(cs) chunks of cs bytes).
func MaxSizeFor(cs int) uint64 { return uint64(MaxChunksFor(cs)) * uint64(cs) }

// CheckSize returns an error wrapping ErrTooBig, naming the bound and the
// chunk size that would do, if a blob of size bytes cut in chunks of cs
// bytes (a valid chunk size) would exceed MaxChunksFor(cs) chunks.
func CheckSize(size uint64, cs int) error {
	if size <= MaxSizeFor(cs) {
		return nil
	}
	return TooBig(size, cs)
}

// TooBig returns CheckSize's error for a blob of size bytes in chunks of cs;
// size 0 stands for a stream known only to exceed the bound.
func TooBig(size uint64, cs int) error {
	what := "a blob of " + sizeText(size)
	if size == 0 {
		what = "a blob"
	}
	var hint string
	switch need := minChunkSizeFor(size); {
	case cs < BigChunkSize && (size == 0 || size <= MaxSizeFor(BigChunkSize)):
		hint = fmt.Sprintf("chunks smaller than %s are for blobs of at most %d chunks: use a chunk size of %s or more",
			sizeText(BigChunkSize), MaxSmallChunks, sizeText(BigChunkSize))
	case size == 0:
		hint = "use a bigger chunk size"
	case need > 0:
		hint = fmt.Sprintf("use a chunk size of %s or more", sizeText(uint64(need)))
	default:
		hint = fmt.Sprintf("no blob may exceed %s (%d chunks of %s)", sizeText(MaxSizeFor(MaxChunkSize)), MaxChunks, sizeText(MaxChunkSize))
	}
	return fmt.Errorf("%w: %s in chunks of %s exceeds %s (%d chunks): %s", ErrTooBig,
		what, sizeText(uint64(cs)), sizeText(MaxSizeFor(cs)), MaxChunksFor(cs), hint)
}

// minChunkSizeFor returns the smallest power-of-two chunk size of at least
// BigChunkSize whose bound admits size bytes, or 0 if none does.
func minChunkSizeFor(size uint64) int {
	for cs := BigChunkSize; cs <= MaxChunkSize; cs *= 2 {
		if size <= MaxSizeFor(cs) {
			return cs
		}
	}
	return 0
}

// sizeText writes n bytes in binary units when it is a whole number of
// them, else in bytes.
func sizeText(n uint64) string {
	for _, u := range []struct {
		v    uint64
		name string
	}{{1 << 40, "TiB"}, {1 << 30, "GiB"}, {1 << 20, "MiB"}, {1 << 10, "KiB"}} {
		if n >= u.v && n%u.v == 0 {
			return fmt.Sprintf("%d %s", n/u.v, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

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
	if n > MaxChunksFor(int(m.ChunkSize)) {
		return fmt.Errorf("%w: %d chunks of %d bytes exceed the limit %d", ErrBadManifest, n, m.ChunkSize, MaxChunksFor(int(m.ChunkSize)))
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
	if err := ValidateChunkSize(int(m.ChunkSize)); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrBadManifest, err)
	}
	if max := MaxChunksFor(int(m.ChunkSize)); n > uint32(max) {
		return nil, fmt.Errorf("%w: %d chunks of %d bytes exceed the limit %d", ErrBadManifest, n, m.ChunkSize, max)
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
