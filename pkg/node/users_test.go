package node

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/omst-project/omst/internal/asuser"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// TestLocalUsers: on a daemon shared through --socket-group, a user that is
// not the daemon's reads every blob, puts names of its own, and neither
// replaces nor removes another's (the daemon's user does); its puts stop at
// its quota.
func TestLocalUsers(t *testing.T) {
	if !asuser.Available() {
		t.Skip("needs root to act as another user")
	}
	// Other users must reach the socket: a directory they may search.
	dir, err := os.MkdirTemp("", "omstusers")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	home := filepath.Join(dir, "home")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	n, err := Start(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"},
		SocketGroup: strconv.Itoa(asuser.Nobody), UserQuota: 3 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	sock := SocketPath(home)
	rc, err := rpcbridge.Dial(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := rc.Put(ctx, "shared/init", bytes.NewReader([]byte("the master's")), rpcbridge.PutOptions{}); err != nil {
		t.Fatal(err)
	}

	var got bytes.Buffer
	var own, replace, remove, tooBig error
	err = asuser.Run(asuser.Nobody, asuser.Nobody, func() error {
		c, err := rpcbridge.Dial(sock)
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Get(ctx, "shared/init", &got); err != nil {
			return err
		}
		if _, own = c.Put(ctx, "jobs/n/r1", bytes.NewReader([]byte("mine")), rpcbridge.PutOptions{}); own == nil {
			// Its own name it may replace and remove.
			if _, own = c.Put(ctx, "jobs/n/r1", bytes.NewReader([]byte("mine, again")), rpcbridge.PutOptions{}); own == nil {
				own = c.Remove(ctx, "jobs/n/r1")
			}
		}
		_, replace = c.Put(ctx, "shared/init", bytes.NewReader([]byte("hijacked")), rpcbridge.PutOptions{})
		remove = c.Remove(ctx, "shared/init")
		_, tooBig = c.Put(ctx, "jobs/n/big", bytes.NewReader(make([]byte, 4<<20)), rpcbridge.PutOptions{})
		_, err = c.Put(ctx, "jobs/n/kept", bytes.NewReader([]byte("kept")), rpcbridge.PutOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if got.String() != "the master's" {
		t.Errorf("read %q", got.String())
	}
	if own != nil {
		t.Errorf("own name: %v", own)
	}
	if !errors.Is(replace, blob.ErrForbidden) || !errors.Is(remove, blob.ErrForbidden) {
		t.Errorf("another's name: replace %v, remove %v (want FORBIDDEN)", replace, remove)
	}
	if !errors.Is(tooBig, blob.ErrNoSpace) {
		t.Errorf("put past the quota: %v", tooBig)
	}
	var check bytes.Buffer
	if _, err := rc.Get(ctx, "shared/init", &check); err != nil || check.String() != "the master's" {
		t.Fatalf("shared/init after the attempts: %q %v", check.String(), err)
	}
	// The daemon's user may remove anyone's.
	if err := rc.Remove(ctx, "jobs/n/kept"); err != nil {
		t.Errorf("daemon user removing a user's name: %v", err)
	}
}
