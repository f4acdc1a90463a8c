package grid

import (
	"crypto/ed25519"
	"fmt"
	"slices"
)

// Revocations lists the certificate serials no longer valid. Seq grows with
// every new list; a node keeps the highest it has seen.
type Revocations struct {
	Grid    ID
	Seq     uint64
	Issued  int64    // Unix seconds
	Serials []uint64 // sorted, no repeats
}

const revokeDomain = "omst grid revocations v1\x00"

// SignRevocations signs l with k (l.Grid is set; Serials sorted, repeats
// dropped).
func (k Key) SignRevocations(l Revocations) ([]byte, error) {
	l.Grid = k.ID()
	l.Serials = slices.Compact(slices.Sorted(slices.Values(l.Serials)))
	b, err := l.encodeBody()
	if err != nil {
		return nil, err
	}
	return appendSig(b, ed25519.Sign(k.Private, append([]byte(revokeDomain), b...))), nil
}

func (l Revocations) encodeBody() ([]byte, error) {
	if len(l.Serials) > MaxRevoked {
		return nil, fmt.Errorf("revocations: %d serials, more than %d", len(l.Serials), MaxRevoked)
	}
	var w writer
	w.u8(1)
	w.raw(l.Grid[:])
	w.u64(l.Seq)
	w.i64(l.Issued)
	w.u32(uint32(len(l.Serials)))
	for _, s := range l.Serials {
		w.u64(s)
	}
	return w.b, nil
}

// DecodeRevocations parses a revocation list of grid pub and checks its
// signature; serials must be sorted without repeats.
func DecodeRevocations(b []byte, pub ed25519.PublicKey) (Revocations, error) {
	body, sig, err := splitSig(b, "revocations")
	if err != nil {
		return Revocations{}, err
	}
	r := reader{b: body}
	var l Revocations
	if v := r.u8(); r.err == nil && v != 1 {
		return Revocations{}, fmt.Errorf("revocations: version %d, want 1", v)
	}
	copy(l.Grid[:], r.raw(IDLen))
	l.Seq = r.u64()
	l.Issued = r.i64()
	n := r.u32()
	if r.err == nil && n > MaxRevoked {
		return Revocations{}, fmt.Errorf("revocations: %d serials, more than %d", n, MaxRevoked)
	}
	if r.err == nil && int(n)*8 > len(r.b) {
		return Revocations{}, fmt.Errorf("revocations: %d serials in %d bytes", n, len(r.b))
	}
	for i := 0; i < int(n) && r.err == nil; i++ {
		s := r.u64()
		if i > 0 && s <= l.Serials[i-1] {
			return Revocations{}, fmt.Errorf("revocations: serials not sorted or repeated at %d", i)
		}
		l.Serials = append(l.Serials, s)
	}
	if err := r.done("revocations"); err != nil {
		return Revocations{}, err
	}
	if l.Grid != IDOf(pub) {
		return Revocations{}, fmt.Errorf("revocations: %w (%s)", ErrOtherGrid, l.Grid)
	}
	if !ed25519.Verify(pub, append([]byte(revokeDomain), body...), sig) {
		return Revocations{}, fmt.Errorf("revocations: %w", ErrBadSignature)
	}
	return l, nil
}

// Has reports whether serial is revoked.
func (l *Revocations) Has(serial uint64) bool {
	_, ok := slices.BinarySearch(l.Serials, serial)
	return ok
}
