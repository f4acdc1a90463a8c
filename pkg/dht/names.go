package dht

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

// Name records in the DHT are stored under NameKey(name); their value is a
// signed record:
//
//	magic   "OSR1" (a name), or "OSD1" (a removal: the name was removed
//	        by its origin at the record's time)
//	record  u16 length + blob.Record.Encode() (<= maxRecordLen)
//	sig     u16 length + signature (<= maxSigLen)
//
// The signature is made with the key of the node that put the name (the
// record's Origin, a peer ID that embeds its public key) over the domain of
// the magic (signDomain, removeDomain) + the record bytes. Every node's
// validator checks it before storing or returning a record; of several
// valid records, names and removals alike, the newest wins
// (blob.Record.Newer).
const (
	// NameNamespace is the DHT key namespace of name records.
	NameNamespace = "omst-name"
	nameMagic     = "OSR1"
	removeMagic   = "OSD1"
	removeDomain  = "omst name removal v1\x00"
	maxRecordLen  = 4096 + blob.MaxProofLen
	maxSigLen     = 1024
	signDomain    = "omst name record v1\x00"
)

// NameKey is the DHT key of name's record.
func NameKey(name string) string { return "/" + NameNamespace + "/" + name }

// SignRecord returns r signed with key, the key of r.Origin (the node that
// put the name): an error if key is not Origin's.
func SignRecord(key crypto.PrivKey, r blob.Record) ([]byte, error) {
	return sign(key, r, nameMagic, signDomain)
}

// SignRemoval returns the removal of r's name, signed with key (r.Origin's):
// r is the record removed, its Time when it was removed.
func SignRemoval(key crypto.PrivKey, r blob.Record) ([]byte, error) {
	return sign(key, r, removeMagic, removeDomain)
}

func sign(key crypto.PrivKey, r blob.Record, magic, domain string) ([]byte, error) {
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("sign record %q: %w", r.Name, err)
	}
	if id.String() != r.Origin {
		return nil, fmt.Errorf("sign record %q: the key is %s's, the record's origin is %q", r.Name, id, r.Origin)
	}
	rb := r.Encode()
	if len(rb) > maxRecordLen {
		return nil, fmt.Errorf("sign record %q: %d bytes exceeds %d", r.Name, len(rb), maxRecordLen)
	}
	sig, err := key.Sign(append([]byte(domain), rb...))
	if err != nil {
		return nil, fmt.Errorf("sign record %q: %w", r.Name, err)
	}
	if len(sig) > maxSigLen {
		return nil, fmt.Errorf("sign record %q: signature of %d bytes exceeds %d", r.Name, len(sig), maxSigLen)
	}
	b := append([]byte(magic), 0, 0)
	binary.BigEndian.PutUint16(b[4:], uint16(len(rb)))
	b = append(b, rb...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(sig)))
	return append(b, sig...), nil
}

// ErrBadSignature marks a name record whose signature does not verify with
// its origin's key.
var ErrBadSignature = errors.New("name record signature does not match its origin")

// OpenRecord decodes a signed record or removal (removed is true) and
// checks its signature against its origin's key. A malformed value wraps
// wire.ErrMalformed; a record not signed by its origin wraps
// ErrBadSignature.
func OpenRecord(b []byte) (blob.Record, bool, error) {
	if len(b) < len(nameMagic)+2 {
		return blob.Record{}, false, wire.Malformed("name record: %d bytes", len(b))
	}
	domain := signDomain
	removed := false
	switch string(b[:len(nameMagic)]) {
	case nameMagic:
	case removeMagic:
		domain, removed = removeDomain, true
	default:
		return blob.Record{}, false, wire.Malformed("name record: no %q or %q header", nameMagic, removeMagic)
	}
	r, err := openSigned(b[len(nameMagic):], domain)
	return r, removed, err
}

func openSigned(b []byte, domain string) (blob.Record, error) {
	rb, b, err := take16(b, maxRecordLen)
	if err != nil {
		return blob.Record{}, wire.Malformed("name record: record: %v", err)
	}
	sig, b, err := take16(b, maxSigLen)
	if err != nil {
		return blob.Record{}, wire.Malformed("name record: signature: %v", err)
	}
	if len(b) != 0 {
		return blob.Record{}, wire.Malformed("name record: %d bytes after the signature", len(b))
	}
	r, err := blob.DecodeRecord(rb)
	if err != nil {
		return blob.Record{}, wire.Malformed("name record: %v", err)
	}
	origin, err := peer.Decode(r.Origin)
	if err != nil {
		return blob.Record{}, fmt.Errorf("name record %q: origin %q: %w", r.Name, r.Origin, ErrBadSignature)
	}
	pub, err := origin.ExtractPublicKey()
	if err != nil {
		return blob.Record{}, fmt.Errorf("name record %q: origin %s carries no public key: %w", r.Name, origin, ErrBadSignature)
	}
	ok, err := pub.Verify(append([]byte(domain), rb...), sig)
	if err != nil || !ok {
		return blob.Record{}, fmt.Errorf("name record %q from %s: %w", r.Name, origin, ErrBadSignature)
	}
	return r, nil
}

func take16(b []byte, limit int) (field, rest []byte, err error) {
	if len(b) < 2 {
		return nil, nil, errors.New("truncated length")
	}
	n := int(binary.BigEndian.Uint16(b))
	if n > limit {
		return nil, nil, fmt.Errorf("length %d exceeds %d", n, limit)
	}
	if len(b) < 2+n {
		return nil, nil, fmt.Errorf("length %d, %d bytes left", n, len(b)-2)
	}
	return b[2 : 2+n], b[2+n:], nil
}

// nameValidator is the DHT's record validator for NameNamespace: a value
// must be a record of the key's name, signed by its origin; the newest
// valid one (name or removal) is selected. It counts the values it
// rejects.
type nameValidator struct {
	rejected *atomic.Uint64
	check    func(blob.Record) error // Config.CheckRecord; nil: none
}

// Validate implements record.Validator.
func (v nameValidator) Validate(key string, value []byte) error {
	_, err := v.open(key, value)
	return err
}

func (v nameValidator) open(key string, value []byte) (blob.Record, error) {
	name, ok := strings.CutPrefix(key, "/"+NameNamespace+"/")
	if !ok {
		v.rejected.Add(1)
		return blob.Record{}, fmt.Errorf("key %q is not a name record key", key)
	}
	r, removed, err := OpenRecord(value)
	if err == nil && r.Name != name {
		err = fmt.Errorf("a record of %q under the key of %q", r.Name, name)
	}
	// A removal needs only its origin's signature: the origin may always
	// withdraw its own name.
	if err == nil && !removed && v.check != nil {
		err = v.check(r)
	}
	if err != nil {
		v.rejected.Add(1)
		return blob.Record{}, err
	}
	return r, nil
}

// Select implements record.Validator: the index of the newest valid
// record (blob.Record.Newer; of identical ones, the first).
func (v nameValidator) Select(key string, values [][]byte) (int, error) {
	best, bestRec := -1, blob.Record{}
	for i, val := range values {
		r, err := v.open(key, val)
		if err != nil {
			continue
		}
		if best < 0 || r.Newer(bestRec) {
			best, bestRec = i, r
		}
	}
	if best < 0 {
		return 0, fmt.Errorf("no valid name record among %d under %q", len(values), key)
	}
	return best, nil
}
