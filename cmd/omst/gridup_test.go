package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/omst-project/omst/pkg/topology"
)

// TestDaemonConfig checks that the configuration grid up writes for a host
// gives `omst daemon` (reading it as HOME/config.toml) exactly the
// topology's settings and parents, daemon_args included.
func TestDaemonConfig(t *testing.T) {
	top, err := topology.Parse([]byte(`
[defaults]
cache_size = "2G"
chunk_size = "4M"
[root]
host = "m"
[[site]]
name = "a"
workers = ["w1"]
[site.head]
host = "h"
daemon_args = ["--window", "32", "--no-dht", "--parent-retry=90s", "--max-upload-rate", "50M", "--bootstrap", "/ip4/10.0.0.9/tcp/1/p2p/12D3KooWBoot"]
listen = ["/ip4/10.1.0.1/tcp/4040"]
relay_mode = "store-forward"
`))
	if err != nil {
		t.Fatal(err)
	}
	parents := []string{"/ip4/10.0.0.1/tcp/4040/p2p/12D3KooWRoot", "/dns/backup/tcp/4040/p2p/12D3KooWBackup"}
	cfg, err := daemonConfig(top.Host("h"), parents)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg, gridUpHeader) {
		t.Errorf("no header:\n%s", cfg)
	}
	again, _ := daemonConfig(top.Host("h"), parents)
	if again != cfg {
		t.Errorf("not deterministic:\n%s\n%s", cfg, again)
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	fs := daemonCmd(&globals{}).Flags()
	fs.String("config", "", "")
	set, err := applyConfig(fs, path)
	if err != nil {
		t.Fatalf("%v\n%s", err, cfg)
	}
	want := map[string]string{
		"site": "a", "relay-mode": "store-forward", "cache-size": "2147483648", "chunk-size": "4194304",
		"window": "32", "no-dht": "true", "parent-retry": "1m30s", "max-upload-rate": "50M",
		"listen":    "[/ip4/10.1.0.1/tcp/4040]",
		"parent":    "[" + strings.Join(parents, ",") + "]",
		"bootstrap": "[/ip4/10.0.0.9/tcp/1/p2p/12D3KooWBoot]",
	}
	for k, v := range want {
		if got := fs.Lookup(k).Value.String(); got != v {
			t.Errorf("%s = %s, want %s", k, got, v)
		}
	}
	if len(set) != len(want) {
		t.Errorf("set %v, want the keys of %v\n%s", set, want, cfg)
	}

	// The root: no site, no parent.
	cfg, err = daemonConfig(top.Root(), nil)
	if err != nil || strings.Contains(cfg, "site") || strings.Contains(cfg, "parent") || !strings.Contains(cfg, "listen = ['/ip4/0.0.0.0/tcp/4040', '/ip4/0.0.0.0/udp/4040/quic-v1']") {
		t.Errorf("root: %v\n%s", err, cfg)
	}

	for _, bad := range [][]string{{"--bogus"}, {"stray"}, {"--window", "x"}} {
		h := *top.Host("h")
		h.Daemon.ExtraArgs = bad
		if _, err := daemonConfig(&h, nil); err == nil || !strings.Contains(err.Error(), "daemon_args") {
			t.Errorf("daemon_args %q: %v", bad, err)
		}
	}
}

func TestInspectBinary(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	lb, err := inspectBinary(exe)
	if err != nil {
		t.Fatal(err)
	}
	if len(lb.sha256) != 64 || lb.platform == "" || !slices.Contains([]string{"linux", "darwin"}, strings.Split(lb.platform, "/")[0]) {
		t.Errorf("this test binary: %+v", lb)
	}
	script := filepath.Join(t.TempDir(), "script")
	os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755)
	if lb, err := inspectBinary(script); err != nil || lb.platform != "" || lb.interp != "" {
		t.Errorf("a script: %+v, %v", lb, err)
	}
	if _, err := inspectBinary(filepath.Join(t.TempDir(), "none")); err == nil {
		t.Error("a missing binary: no error")
	}
}
