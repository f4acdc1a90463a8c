package gridstore

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/grid"
)

// fuzzGrid is the grid the ledger seeds belong to.
var fuzzGrid, _ = grid.KeyFromSeed(make([]byte, 32))

// FuzzDecodeLedger: the ledger decoder never panics; what it accepts is
// this grid's, within the bounds, every certificate one the key can
// sign, and it survives being written and read back unchanged.
func FuzzDecodeLedger(f *testing.F) {
	id := fuzzGrid.ID().String()
	// A real ledger: the root's, a token's, an admission, a renewal, a
	// revocation.
	dir := Open(filepath.Join(f.TempDir(), "home"))
	if err := dir.ensureDir(); err != nil {
		f.Fatal(err)
	}
	if err := dir.write(keyFile, fuzzGrid.Private.Seed(), 0o600); err != nil {
		f.Fatal(err)
	}
	self, p, q := newPeer(f), newPeer(f), newPeer(f)
	if _, _, err := dir.Init(self, t0, week); err != nil {
		f.Fatal(err)
	}
	tok := mustToken(f, dir, grid.RoleWorker, []string{"w/"}, time.Hour)
	b, err := dir.Redeem(tok, p, t0)
	if err != nil {
		f.Fatal(err)
	}
	if _, err := dir.Renew(b, p, t0.Add(12*time.Hour)); err != nil {
		f.Fatal(err)
	}
	if _, err := dir.Admit(q, grid.RoleHead, []string{"a/", "b/"}, week, t0); err != nil {
		f.Fatal(err)
	}
	if _, _, err := dir.Revoke(q, t0); err != nil {
		f.Fatal(err)
	}
	real, err := os.ReadFile(dir.file(ledgerFile))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(real)
	f.Add([]byte(`{"version":1,"grid":"` + id + `","members":[{"peer":"` + p.String() + `","role":"worker","serial":3,"not_before":1,"not_after":2,"how":"renew","from":3}]}`))
	f.Add([]byte(`{"version":1,"grid":"` + id + `","members":[{"peer":"` + p.String() + `","role":"head","prefixes":[""],"serial":1,"not_before":1,"not_after":2,"how":"admit"}]}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`{"version":1,"grid":"` + id + `","redeemed":{"00":1},"members":null}`))
	f.Add([]byte(`[]`))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := decodeLedger(b, id)
		if err != nil {
			if l != nil {
				t.Fatal("a ledger returned with an error")
			}
			return
		}
		if l.Grid != id || l.Version != ledgerVersion || len(l.Members) > maxEntries || len(l.Redeemed) > maxRedeemed || l.Redeemed == nil {
			t.Fatalf("accepted %+v", l)
		}
		serials := map[uint64]bool{}
		for _, e := range l.Members {
			if serials[e.Serial] {
				t.Fatalf("serial %d twice", e.Serial)
			}
			serials[e.Serial] = true
			c := e.cert()
			if _, err := fuzzGrid.Issue(c); err != nil {
				t.Fatalf("an accepted entry %+v cannot be issued: %v", e, err)
			}
		}
		out, err := json.Marshal(l)
		if err != nil {
			t.Fatal(err)
		}
		back, err := decodeLedger(out, id)
		if err != nil {
			t.Fatalf("an accepted ledger, written, is refused: %v", err)
		}
		if !reflect.DeepEqual(normalize(back), normalize(l)) {
			t.Fatalf("written and read back: %+v, was %+v", back, l)
		}
	})
}

// normalize makes empty and nil slices alike, for comparing.
func normalize(l *ledger) *ledger {
	c := *l
	c.Members = append([]entry{}, l.Members...)
	for i := range c.Members {
		if len(c.Members[i].Prefixes) == 0 {
			c.Members[i].Prefixes = nil
		}
	}
	if len(c.Members) == 0 {
		c.Members = nil
	}
	return &c
}
