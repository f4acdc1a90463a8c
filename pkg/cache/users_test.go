package cache

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

var errNotYours = errors.New("not yours")

// onlyUser is the node's rule for a user that is not the daemon's: replace
// and remove only what the same user put.
func onlyUser(uid uint32) func(uint32, bool) error {
	return func(user uint32, has bool) error {
		if has && user == uid {
			return nil
		}
		return errNotYours
	}
}

// TestLocalUser: a put records its local user; a put or removal that the
// check refuses changes nothing; a record from elsewhere, or a removal,
// ends the name's local user.
func TestLocalUser(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	ctx := context.Background()
	put := func(name, data string, uid uint32) (blob.Record, error) {
		return s.IngestWith(ctx, name, bytes.NewReader([]byte(data)), 4096, "me",
			IngestOptions{User: uid, HasUser: true, MayReplace: onlyUser(uid)})
	}
	first, err := put("r/a", "alice's", 1000)
	if err != nil {
		t.Fatal(err)
	}
	if uid, ok, err := s.LocalUser("r/a"); err != nil || !ok || uid != 1000 {
		t.Fatalf("LocalUser = %d %v %v", uid, ok, err)
	}
	// Another user may not replace it; its bytes are not kept pinned.
	if _, err := put("r/a", "bob's", 2000); !errors.Is(err, errNotYours) {
		t.Fatalf("bob's put over alice's: %v", err)
	}
	if cur, _ := s.Record("r/a"); cur.ID != first.ID {
		t.Fatal("bob's put replaced alice's record")
	}
	// The same user may.
	if _, err := put("r/a", "alice's again", 1000); err != nil {
		t.Fatal(err)
	}
	// Removal: bob may not, alice may.
	if err := s.RemoveNameIf("r/a", onlyUser(2000)); !errors.Is(err, errNotYours) {
		t.Fatalf("bob's removal: %v", err)
	}
	if _, err := s.Record("r/a"); err != nil {
		t.Fatal("refused removal removed the name")
	}
	if err := s.RemoveNameIf("r/a", onlyUser(1000)); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.LocalUser("r/a"); ok {
		t.Error("removed name keeps its local user")
	}
	// A name nobody here put (no record) may be put by anyone; one that
	// came from elsewhere has no local user, so a user may not replace it.
	if _, err := put("r/b", "bob's", 2000); err != nil {
		t.Fatal(err)
	}
	rec, _ := s.Record("r/b")
	rec.Time++
	rec.Origin = "elsewhere"
	if _, err := s.PutRecordFrom(rec, "peer"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.LocalUser("r/b"); ok {
		t.Error("a record from elsewhere kept the local user")
	}
	if _, err := put("r/b", "bob's", 2000); !errors.Is(err, errNotYours) {
		t.Errorf("bob replaced a record from elsewhere: %v", err)
	}
	// Without options nothing is checked or recorded (the daemon's own
	// puts).
	if _, err := s.Ingest(ctx, "r/b", bytes.NewReader([]byte("daemon")), 4096, "me"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.LocalUser("r/b"); ok {
		t.Error("a put without a user recorded one")
	}
}

// TestUserQuota: a user's puts stop at its quota (early, while reading, not
// after writing everything), a replaced name does not count twice, and
// other users are not affected.
func TestUserQuota(t *testing.T) {
	s := openStore(t, t.TempDir(), 0)
	ctx := context.Background()
	put := func(name string, size int, uid uint32) error {
		_, err := s.IngestWith(ctx, name, bytes.NewReader(randBytes(size, uint64(size))), 4096, "me",
			IngestOptions{User: uid, HasUser: true, MayReplace: onlyUser(uid), Quota: 100 << 10})
		return err
	}
	if err := put("q/1", 60<<10, 1000); err != nil {
		t.Fatal(err)
	}
	if err := put("q/2", 60<<10, 1000); !errors.Is(err, blob.ErrNoSpace) {
		t.Fatalf("past the quota: %v", err)
	}
	if _, err := s.Record("q/2"); err == nil {
		t.Fatal("a put past the quota left its name")
	}
	if n, _ := s.UserBytes(1000); n != 60<<10 {
		t.Fatalf("UserBytes = %d", n)
	}
	// Replacing q/1 with 90 KiB fits (the old 60 KiB go).
	if err := put("q/1", 90<<10, 1000); err != nil {
		t.Fatalf("replace within the quota: %v", err)
	}
	// Another user has its own.
	if err := put("q/3", 90<<10, 2000); err != nil {
		t.Fatal(err)
	}
	// An endless input fails once the quota is passed, not at its end.
	_, err := s.IngestWith(ctx, "q/4", infinite{}, 4096, "me",
		IngestOptions{User: 2000, HasUser: true, Quota: 100 << 10})
	if !errors.Is(err, blob.ErrNoSpace) {
		t.Fatalf("endless input: %v", err)
	}
}

// infinite reads zeros for ever.
type infinite struct{}

func (infinite) Read(p []byte) (int, error) { clear(p); return len(p), nil }
