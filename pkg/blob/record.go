package blob

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/ipfs/go-cid"
)

// Record binds a name to a blob ID at one moment. Records of the same name
// are ordered by (Time, Origin): the later one wins everywhere, so every
// node converges on the same answer whatever order records arrive in.
type Record struct {
	Name   string  // a name valid under ValidateName
	ID     cid.Cid // the blob ID (CID of the manifest)
	Size   uint64  // blob size in bytes
	Time   int64   // when the name was put, Unix nanoseconds at the origin
	Origin string  // peer ID (string form) of the node where it was put
	// Proof, in a closed grid, is the origin's signature of the record
	// and its membership certificate (pkg/member): every node that stores
	// or forwards the record checks it. Nil in an open one.
	Proof []byte
}

// MaxProofLen bounds a record's Proof.
const MaxProofLen = 16 << 10

// Newer reports whether r should replace old.
func (r Record) Newer(old Record) bool {
	if r.Time != old.Time {
		return r.Time > old.Time
	}
	return r.Origin > old.Origin
}

// When returns Time as a time.Time.
func (r Record) When() time.Time { return time.Unix(0, r.Time) }

// record encoding, version 2 (big-endian):
//
//	version u8 = 2
//	name    u16 length + bytes
//	id      u16 length + CID bytes
//	size    u64
//	time    i64
//	origin  u16 length + bytes
//
// Version 3 is version 2 followed by proof (u16 length + bytes); a record
// without a proof is encoded as version 2.
//
// Version 1 had a seventh field, via (u16 length + bytes): a node's local
// routing state, which now lives with the tree (pkg/tree), not in the
// record. DecodeRecord still reads version 1 and ignores via.
const (
	recordVersion   = 2
	recordVersionV1 = 1
	recordVersionV3 = 3
)

// maxRecordField bounds the CID, origin and (version 1) via fields.
const maxRecordField = 256

// Encode returns the binary form of r.
func (r Record) Encode() []byte {
	idb := r.ID.Bytes()
	b := make([]byte, 0, 1+2+len(r.Name)+2+len(idb)+16+2+len(r.Origin)+2+len(r.Proof))
	v := byte(recordVersion)
	if r.Proof != nil {
		v = recordVersionV3
	}
	b = append(b, v)
	b = appendField(b, []byte(r.Name))
	b = appendField(b, idb)
	b = binary.BigEndian.AppendUint64(b, r.Size)
	b = binary.BigEndian.AppendUint64(b, uint64(r.Time))
	b = appendField(b, []byte(r.Origin))
	if r.Proof != nil {
		b = appendField(b, r.Proof)
	}
	return b
}

// Equal reports whether r and o are the same record, proof included.
func (r Record) Equal(o Record) bool {
	return r.Name == o.Name && r.ID == o.ID && r.Size == o.Size && r.Time == o.Time && r.Origin == o.Origin && bytes.Equal(r.Proof, o.Proof)
}

// Unproved returns r without its Proof: the bytes a proof signs are
// r.Unproved().Encode().
func (r Record) Unproved() Record {
	r.Proof = nil
	return r
}

func appendField(b, f []byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(f)))
	return append(b, f...)
}

// DecodeRecord parses the bytes produced by Encode (or by a version 1
// encoder), checking the name and CID.
func DecodeRecord(b []byte) (Record, error) {
	r, _, err := DecodeRecordV1(b)
	return r, err
}

// DecodeRecordV1 is DecodeRecord that also returns the via field of a
// version 1 encoding ("" for version 2), for reading stores written before
// via left the record.
func DecodeRecordV1(b []byte) (r Record, via string, err error) {
	d := fieldReader{b: b}
	v := d.u8()
	if d.err != nil {
		return r, "", fmt.Errorf("decode record: %w", d.err)
	}
	if v != recordVersion && v != recordVersionV1 && v != recordVersionV3 {
		return r, "", fmt.Errorf("decode record: unknown version %d", v)
	}
	name := d.field(MaxNameLen)
	idb := d.field(maxRecordField)
	r.Size = d.u64()
	r.Time = int64(d.u64())
	r.Origin = string(d.field(maxRecordField))
	if v == recordVersionV1 {
		via = string(d.field(maxRecordField))
	}
	if v == recordVersionV3 {
		if r.Proof = bytes.Clone(d.field(MaxProofLen)); d.err == nil && len(r.Proof) == 0 {
			d.err = errors.New("version 3 with an empty proof")
		}
	}
	if d.err != nil {
		return Record{}, "", fmt.Errorf("decode record: %w", d.err)
	}
	if len(d.b) != 0 {
		return Record{}, "", fmt.Errorf("decode record: %d trailing bytes", len(d.b))
	}
	r.Name = string(name)
	if err := ValidateName(r.Name); err != nil {
		return Record{}, "", fmt.Errorf("decode record: %w", err)
	}
	id, err := cid.Cast(idb)
	if err != nil {
		return Record{}, "", fmt.Errorf("decode record %q: bad CID: %w", r.Name, err)
	}
	r.ID = id
	return r, via, nil
}

// fieldReader decodes big-endian fields, remembering the first error.
type fieldReader struct {
	b   []byte
	err error
}

func (d *fieldReader) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if len(d.b) < n {
		d.err = fmt.Errorf("truncated: need %d bytes, have %d", n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *fieldReader) u8() byte {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *fieldReader) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *fieldReader) field(max int) []byte {
	v := d.take(2)
	if v == nil {
		return nil
	}
	n := int(binary.BigEndian.Uint16(v))
	if n > max {
		d.err = fmt.Errorf("field of %d bytes exceeds %d", n, max)
		return nil
	}
	return d.take(n)
}
