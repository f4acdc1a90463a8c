package tree

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

// TestCheckRecord: a record refused by Config.CheckRecord (in the daemon,
// pkg/member's proof check) is neither stored nor forwarded by a relay
// when a child announces it, and is not taken from a parent's FOUND.
func TestCheckRecord(t *testing.T) {
	var refusedAtRoot, refusedAtWorker atomic.Int32
	refuse := func(n *atomic.Int32) nodeOpt {
		return func(c *nodeCfg) {
			c.CheckRecord = func(r blob.Record) error {
				if strings.HasPrefix(r.Name, "forged/") {
					n.Add(1)
					return errors.New("name record refused: forged")
				}
				return nil
			}
		}
	}
	root := newNode(t, nil, "", nil, refuse(&refusedAtRoot))
	head := newNode(t, root, "s1", nil) // a relay that checks nothing: a malicious member
	worker := newNode(t, head, "s1", nil, refuse(&refusedAtWorker))
	waitConnected(t, head, worker)

	// A forged record announced by the head is refused at the root.
	r := put(t, head, "forged/a", randBlob(1000, 1), 4096)
	if _, err := root.store.Record("forged/a"); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("root stored a refused record: %v", err)
	}
	if refusedAtRoot.Load() == 0 {
		t.Fatal("root's check not called")
	}
	// An honest one goes through.
	put(t, head, "ok/b", randBlob(1000, 2), 4096)
	waitFor(t, "root has ok/b", 5*time.Second, func() bool { _, err := root.store.Record("ok/b"); return err == nil })

	// The worker asks its head (which holds the forged record): refused.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if got, err := worker.tree.Lookup(ctx, "forged/a"); err == nil {
		t.Fatalf("worker accepted %+v from its parent", got)
	}
	if refusedAtWorker.Load() == 0 {
		t.Fatal("worker's check not called on FOUND")
	}
	if _, err := worker.store.Record(r.Name); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("worker stored a refused record: %v", err)
	}
}
