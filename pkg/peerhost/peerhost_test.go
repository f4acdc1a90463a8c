package peerhost

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestKeyPersists(t *testing.T) {
	p := filepath.Join(t.TempDir(), "identity.key")
	k1, err := LoadOrCreateKey(p)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equals(k2) {
		t.Fatal("second load returned a different key")
	}
	st, _ := os.Stat(p)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, want 0600", st.Mode().Perm())
	}
	os.WriteFile(p, []byte("garbage"), 0o600)
	if _, err := LoadOrCreateKey(p); err == nil || !strings.Contains(err.Error(), p) {
		t.Fatalf("corrupt key: %v", err)
	}
}

func TestHostsConnectOverTCPAndQUIC(t *testing.T) {
	dir := t.TempDir()
	ka, _ := LoadOrCreateKey(filepath.Join(dir, "a"))
	kb, _ := LoadOrCreateKey(filepath.Join(dir, "b"))
	a, err := New(Options{Key: ka, Listen: []string{"/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	addrs := FullAddrs(a)
	if len(addrs) != 2 {
		t.Fatalf("addrs %v: want one TCP and one QUIC", addrs)
	}
	for _, s := range addrs {
		b, err := New(Options{Key: kb, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
		if err != nil {
			t.Fatal(err)
		}
		info, err := ParsePeerAddr(s)
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := b.Connect(ctx, *info); err != nil {
			t.Fatalf("connect over %s: %v", s, err)
		}
		cancel()
		b.Close()
	}
	if _, err := ParsePeerAddr("/ip4/127.0.0.1/tcp/1"); err == nil {
		t.Fatal("address without /p2p accepted")
	}
	if _, err := New(Options{Key: ka, Listen: []string{"not-an-addr"}}); err == nil || !strings.Contains(err.Error(), "not-an-addr") {
		t.Fatalf("bad listen address: %v", err)
	}
}
