package dht

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/grid"
)

// Name records in the DHT are stored under NameKey(name); their value is a
// signed record:
//
//	magic   "OSR1" (a name), or "OSD1" (a removal: the record's Origin
//	        removed the name at the record's time)
//	record  u16 length + blob.Record.Encode() (<= maxRecordLen)
//	sig     u16 length + signature (<= maxSigLen)
//
// The signature is made with the key of the record's Origin (the node
// that put the name, or that removed it; a peer ID that embeds its public
// key) over the domain of the magic (signDomain, removeDomain) + the
// record bytes. A removal's record is the name, the blob ID and size of
// the record it removes, the removal's time and the remover as Origin;
// in a closed grid its Proof is the remover's removal proof (pkg/member,
// ProveRemoval), as a name record's is its origin's proof. Every node's
// validator checks values before storing or returning them; which valid
// value wins is selectName's rule.
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

// SignRemoval returns the removal of r's name, signed with key (r.Origin's,
// the remover's): r is the record removed, its Time when it was removed,
// its Origin the remover, its Proof the remover's removal proof in a
// closed grid (pkg/member, ProveRemoval).
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

// ErrFutureRemoval marks a removal dated more than ClockSkew after the
// checking node's clock: it would hide its name until that date.
var ErrFutureRemoval = errors.New("name removal dated in the future")

// ErrWithdrawn marks a name record that a namespace rule this node holds
// withdraws (Config.Withdrawn: its prefix removed, its TTL passed).
var ErrWithdrawn = errors.New("name record withdrawn by a namespace rule")

// ClockSkew is how far past the checking node's clock a removal may be
// dated (grid.ClockSkew, as for a closed grid's records).
const ClockSkew = grid.ClockSkew

// nameValidator is the DHT's record validator for NameNamespace: a value
// must be a record or removal of the key's name, signed by its Origin and
// accepted by the checks (a removal also not dated in the future); of
// valid ones selectName picks. It counts the values it rejects.
type nameValidator struct {
	rejected     *atomic.Uint64
	check        func(blob.Record) error         // Config.CheckRecord; nil: none
	checkRemoval func(blob.Record) (bool, error) // Config.CheckRemoval; nil: none
	now          func() time.Time                // Config.Now; nil: time.Now
	withdrawn    func(blob.Record) bool          // Config.Withdrawn; nil: none
}

// nameValue is a valid value: a name record, or a removal (and whether
// its remover has the client role).
type nameValue struct {
	rec      blob.Record
	removal  bool
	byClient bool
}

// withdraws reports whether removal d hides name record r: d is newer
// than r (blob.Record.Newer), and its remover is r's origin or a client.
// A removal by anyone else leaves r in place: a member withdraws only its
// own records; a client (the master) any.
func (d nameValue) withdraws(r blob.Record) bool {
	return d.removal && d.rec.Newer(r) && (d.rec.Origin == r.Origin || d.byClient)
}

// Validate implements record.Validator.
func (v nameValidator) Validate(key string, value []byte) error {
	_, err := v.open(key, value)
	return err
}

func (v nameValidator) open(key string, value []byte) (nameValue, error) {
	name, ok := strings.CutPrefix(key, "/"+NameNamespace+"/")
	if !ok {
		v.rejected.Add(1)
		return nameValue{}, fmt.Errorf("key %q is not a name record key", key)
	}
	r, removed, err := OpenRecord(value)
	if err == nil && r.Name != name {
		err = fmt.Errorf("a record of %q under the key of %q", r.Name, name)
	}
	now, byClient := time.Now, false
	if v.now != nil {
		now = v.now
	}
	switch {
	case err != nil:
	case !removed:
		if v.check != nil {
			err = v.check(r)
		}
		if err == nil && v.withdrawn != nil && v.withdrawn(r) {
			err = fmt.Errorf("record of %q by %s: %w", r.Name, r.Origin, ErrWithdrawn)
		}
	case r.When().After(now().Add(ClockSkew)):
		err = fmt.Errorf("removal of %q by %s dated %s: %w", r.Name, r.Origin, r.When().UTC().Format(time.RFC3339), ErrFutureRemoval)
	case v.checkRemoval != nil:
		byClient, err = v.checkRemoval(r)
	}
	if err != nil {
		v.rejected.Add(1)
		return nameValue{}, err
	}
	return nameValue{rec: r, removal: removed, byClient: byClient}, nil
}

// Select implements record.Validator: the index of selectName's choice
// among the valid values.
func (v nameValidator) Select(key string, values [][]byte) (int, error) {
	vals := make([]*nameValue, len(values))
	for i, val := range values {
		if nv, err := v.open(key, val); err == nil {
			vals[i] = &nv
		}
	}
	best := selectName(vals)
	if best < 0 {
		return 0, fmt.Errorf("no valid name record among %d under %q", len(values), key)
	}
	return best, nil
}

// selectName is Select's decision, plain code, over the valid values (nil:
// invalid, never chosen); -1 if none is valid. The newest name record
// (blob.Record.Newer) is the name's binding, unless a removal withdraws
// it (nameValue.withdraws: a newer removal by its origin or by a client):
// then the newest removal that does. With no name record at all, the
// newest removal. Of identical candidates, the first.
//
// So a removal never hides a record of another origin unless a client
// made it: an origin's removal loses to a later rebind by anyone, and to
// another origin's record whatever their times. The rule is a function of
// the whole set, not a total order (B's record beats A's removal, which
// beats A's newer record, which beats B's): kad compares two values at a
// time (a stored one against a new one, and values as they arrive during
// a lookup), so a node that stored A's removal takes B's older record
// when it comes (B still publishes its binding: the name is B's again,
// as if A had never put it), and a lookup that meets all three at once
// may answer any of them, by the order they arrive in.
func selectName(vals []*nameValue) int {
	name := -1
	for i, v := range vals {
		if v != nil && !v.removal && (name < 0 || v.rec.Newer(vals[name].rec)) {
			name = i
		}
	}
	best := -1
	for i, v := range vals {
		if v == nil || !v.removal || (name >= 0 && !v.withdraws(vals[name].rec)) {
			continue
		}
		if best < 0 || v.rec.Newer(vals[best].rec) {
			best = i
		}
	}
	if best >= 0 {
		return best
	}
	return name
}
