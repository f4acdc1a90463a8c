package dht

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/multiformats/go-multihash"

	"github.com/omst-project/omst/internal/wire"
	"github.com/omst-project/omst/pkg/blob"
)

// fuzzValues returns signed values for the seeds: records and removals of
// name "n" by two origins, one with a proof, one of another name.
func fuzzValues(t testing.TB) [][]byte {
	kA, a := newKey(t)
	kB, b := newKey(t)
	id := func(s string) blob.Record {
		h, err := multihash.Sum([]byte(s), multihash.SHA2_256, -1)
		if err != nil {
			t.Fatal(err)
		}
		return blob.Record{Name: "n", ID: cid.NewCidV1(cid.Raw, h), Size: 3, Origin: a}
	}
	var out [][]byte
	add := func(b []byte, err error) {
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, b)
	}
	r := id("a1")
	r.Time = 100
	add(SignRecord(kA, r))
	r.Time = 300
	add(SignRemoval(kA, r))
	rb := id("b1")
	rb.Origin, rb.Time, rb.Proof = b, 200, []byte{1, 0, 0, 0, 0}
	add(SignRecord(kB, rb))
	rb.Time = 400
	add(SignRemoval(kB, rb))
	other := id("m")
	other.Name, other.Time = "m", 500
	add(SignRecord(kA, other))
	return out
}

// FuzzOpenRecord: OpenRecord never panics, and every refusal is either
// malformed or a bad signature; what it accepts says which magic it had.
func FuzzOpenRecord(f *testing.F) {
	for _, v := range fuzzValues(f) {
		f.Add(v)
	}
	f.Add([]byte(nameMagic))
	f.Add([]byte(removeMagic + "\x00\x01\x02\x00\x00"))
	f.Add([]byte(removeMagic + "\xff\xff"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, removed, err := OpenRecord(b)
		if err != nil {
			if !errors.Is(err, wire.ErrMalformed) && !errors.Is(err, ErrBadSignature) {
				t.Fatalf("OpenRecord: %v, neither malformed nor a bad signature", err)
			}
			return
		}
		if removed != (string(b[:4]) == removeMagic) {
			t.Fatalf("removed %v with magic %q", removed, b[:4])
		}
		if r.Origin == "" {
			t.Fatal("an accepted record without an origin")
		}
	})
}

// FuzzSelect: values framed as u16 length + bytes (at most 8). Select
// never panics; when it chooses, the choice is in range and valid, and
// which record and kind it chooses (its time, origin and magic) does not
// depend on the values' order.
func FuzzSelect(f *testing.F) {
	vals := fuzzValues(f)
	frame := func(vs ...[]byte) []byte {
		var b []byte
		for _, v := range vs {
			b = binary.BigEndian.AppendUint16(b, uint16(len(v)))
			b = append(b, v...)
		}
		return b
	}
	f.Add(frame(vals...))
	f.Add(frame(vals[0], vals[1]))
	f.Add(frame(vals[1], vals[2]))
	f.Add(frame(vals[3], vals[0], vals[2]))
	f.Add(frame(vals[4], []byte("junk")))
	f.Add([]byte{0, 3, 'a'})
	now := time.Unix(0, 1000)
	f.Fuzz(func(t *testing.T, b []byte) {
		var vs [][]byte
		for len(vs) < 8 {
			v, rest, err := take16(b, 1<<16)
			if err != nil {
				break
			}
			vs, b = append(vs, v), rest
		}
		v := nameValidator{rejected: new(atomic.Uint64), now: func() time.Time { return now },
			checkRemoval: func(r blob.Record) (bool, error) { return r.Proof != nil, nil }} // a proof stands for a client here
		key := NameKey("n")
		i, err := v.Select(key, vs)
		if err != nil {
			for _, val := range vs {
				if v.Validate(key, val) == nil {
					t.Fatalf("Select failed (%v) with a valid value among them", err)
				}
			}
			return
		}
		if i < 0 || i >= len(vs) {
			t.Fatalf("Select = %d of %d values", i, len(vs))
		}
		if err := v.Validate(key, vs[i]); err != nil {
			t.Fatalf("Select chose an invalid value: %v", err)
		}
		rev := slices.Clone(vs)
		slices.Reverse(rev)
		j, err := v.Select(key, rev)
		if err != nil {
			t.Fatalf("Select of the reversed values: %v", err)
		}
		if a, b := choiceKey(vs[i]), choiceKey(rev[j]); a != b {
			t.Fatalf("Select depends on the order: %+v, reversed %+v", a, b)
		}
	})
}

type choice struct {
	time    int64
	origin  string
	removal bool
}

func choiceKey(b []byte) choice {
	r, removed, _ := OpenRecord(b)
	return choice{r.Time, r.Origin, removed}
}
