package rpcbridge

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/blob"
)

// nsBackend is memBackend with job namespaces: it records what reached it.
type nsBackend struct {
	*memBackend
	got []string
}

func (b *nsBackend) RemovePrefix(_ context.Context, scope string, everywhere bool) (RuleResult, error) {
	b.got = append(b.got, "rm "+scope)
	n := 0
	b.mu.Lock()
	for name := range b.blobs {
		if strings.HasPrefix(name, scope) {
			delete(b.blobs, name)
			n++
		}
	}
	b.mu.Unlock()
	return RuleResult{Scope: scope, Kind: "remove", Everywhere: everywhere, Removed: n, Reached: 3, Unreached: 1, Failed: []string{"child x: not connected"}}, nil
}

func (b *nsBackend) SetTTL(_ context.Context, scope string, ttl time.Duration) (RuleResult, error) {
	b.got = append(b.got, "ttl "+scope+" "+ttl.String())
	if scope == "forbidden/" {
		return RuleResult{}, blob.ErrForbidden
	}
	return RuleResult{Scope: scope, Kind: "ttl", TTLSeconds: ttl.Seconds(), Reached: 1}, nil
}

func (b *nsBackend) DiskUsage(_ context.Context, prefix string) (DiskUsage, error) {
	b.got = append(b.got, "du "+prefix)
	return DiskUsage{Prefix: prefix, Names: 2, Blobs: 1, Bytes: 10, Held: 10, Unpinned: 10}, nil
}

// TestNamespaceOps: REMOVE_PREFIX, SET_TTL and DU over a real socket; bad
// prefixes get INVALID_NAME naming what is wrong, before the backend sees
// them; a backend without namespaces says so; an old client's version is
// refused the frames.
func TestNamespaceOps(t *testing.T) {
	b := &nsBackend{memBackend: newMem()}
	ts := startServer(t, b, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	for _, n := range []string{"job1/a", "job1/b/c", "job10/a"} {
		if _, err := c.Put(ctx, n, strings.NewReader("x"), PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.RemovePrefix(ctx, "job1", true)
	if err != nil || res.Scope != "job1/" || res.Removed != 2 || !res.Everywhere || res.Reached != 3 || len(res.Failed) != 1 {
		t.Fatalf("RemovePrefix: %+v, %v", res, err)
	}
	if _, err := c.Stat(ctx, "job10/a"); err != nil {
		t.Fatalf("job10/a removed with job1: %v", err)
	}
	if res, err := c.SetTTL(ctx, "job2/", 2*time.Hour); err != nil || res.TTLSeconds != 7200 {
		t.Fatalf("SetTTL: %+v, %v", res, err)
	}
	if _, err := c.SetTTL(ctx, "forbidden/", time.Hour); CodeOf(err) != CodeForbidden {
		t.Fatalf("a refused TTL: %v", err)
	}
	if du, err := c.DiskUsage(ctx, ""); err != nil || du.Names != 2 || du.Rules == nil {
		t.Fatalf("DiskUsage: %+v, %v", du, err)
	}
	for _, bad := range []string{"", "/", "..", "a/../b", "a//b"} {
		_, err := c.RemovePrefix(ctx, bad, true)
		if !errors.Is(err, blob.ErrInvalidName) {
			t.Errorf("client RemovePrefix(%q): %v", bad, err)
		}
		// The server checks too: a client that sends it anyway.
		r := rawDial(t, ts.path, true)
		r.send(FrameRemovePrefix, appendRemovePrefixReq(nil, bad, RemoveEverywhere))
		e := r.expectError(CodeInvalidName)
		if !strings.Contains(e.Message, "invalid prefix") {
			t.Errorf("server on %q: %q", bad, e.Message)
		}
	}
	if _, err := c.SetTTL(ctx, "job1/", -time.Second); err == nil {
		t.Fatal("a negative TTL sent")
	}
	r := rawDial(t, ts.path, true)
	r.send(FrameRemovePrefix, appendRemovePrefixReq(nil, "job1/", 0x80))
	r.expectError(CodeBadRequest)
	r = rawDial(t, ts.path, true)
	r.send(FrameSetTTL, appendSetTTLReq(nil, "job1/", 400*24*time.Hour))
	r.expectError(CodeBadRequest)
	for _, s := range b.got {
		if strings.Contains(s, "..") || s == "rm /" {
			t.Fatalf("the backend saw %q", s)
		}
	}

	// A backend without namespaces.
	plain := startServer(t, newMem(), ServerOptions{})
	if _, err := dial(t, plain.path).DiskUsage(ctx, "x/"); err == nil || !strings.Contains(err.Error(), "does not serve job namespaces") {
		t.Fatalf("a backend without namespaces: %v", err)
	}
	// A connection of version 5 is refused the frames.
	old := rawDial(t, ts.path, false)
	old.send(FrameHello, appendHello(nil, 5))
	old.recv()
	old.send(FrameDu, appendNameReq(nil, ""))
	if e := old.expectError(CodeBadRequest); !strings.Contains(e.Message, "version 6") {
		t.Fatalf("version 5: %q", e.Message)
	}
}

func FuzzDecodeNamespaceReqs(f *testing.F) {
	f.Add(appendRemovePrefixReq(nil, "job1/", RemoveEverywhere))
	f.Add(appendSetTTLReq(nil, "job1/x", time.Hour))
	f.Add([]byte{0, 0, 0, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		if p, fl, err := decodeRemovePrefixReq(b); err == nil && string(appendRemovePrefixReq(nil, p, fl)) != string(b) {
			t.Fatal("REMOVE_PREFIX not canonical")
		}
		if s, ttl, err := decodeSetTTLReq(b); err == nil && string(appendSetTTLReq(nil, s, ttl)) != string(b) {
			t.Fatal("SET_TTL not canonical")
		}
	})
}
