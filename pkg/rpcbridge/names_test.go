package rpcbridge

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/omst-project/omst/pkg/blob"
)

// TestGetFileBadNameRefusedByDaemon: the Go client sends a get into a file
// (GET_TO_FD) without checking the name; the daemon, the trust boundary,
// refuses a bad one with INVALID_NAME naming it and what is wrong, before
// the backend is called; the destination is not created and the
// connection stays usable. (Before, the client refused it itself, with a
// plain blob.ErrInvalidName, as did three layers behind the server.)
func TestGetFileBadNameRefusedByDaemon(t *testing.T) {
	m := newMem()
	m.store("ok", []byte("fine"), PutOptions{})
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	dir := t.TempDir()
	for _, bad := range []string{"", "/abs", "a/../b", "a//b", "x\x01y", strings.Repeat("n", 1025)} {
		before := m.callCount()
		out := filepath.Join(dir, "out")
		_, err := c.GetFile(context.Background(), bad, out)
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeInvalidName || !errors.Is(err, blob.ErrInvalidName) {
			t.Fatalf("get %q: %v, want the daemon's INVALID_NAME", bad, err)
		}
		if !strings.Contains(err.Error(), "invalid name") {
			t.Fatalf("get %q: %q says nothing of the name", bad, err)
		}
		if m.callCount() != before {
			t.Fatalf("get %q: the backend was called", bad)
		}
		if _, err := os.Stat(out); err == nil {
			t.Fatalf("get %q created the destination", bad)
		}
	}
	if _, err := c.GetFile(context.Background(), "ok", filepath.Join(dir, "ok")); err != nil {
		t.Fatalf("the connection after the refusals: %v", err)
	}
}
