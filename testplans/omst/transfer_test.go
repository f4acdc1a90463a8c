package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestFetchVerify runs against a real daemon: set OMST_BIN to an omst binary.
func TestFetchVerify(t *testing.T) {
	bin := os.Getenv("OMST_BIN")
	if bin == "" {
		t.Skip("OMST_BIN not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := startDaemon(ctx, "test", daemonSpec{bin: bin, ip: "127.0.0.1", transport: "tcp", logLevel: "warn",
		logPath: filepath.Join(t.TempDir(), "daemon.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop(10 * time.Second)

	bi, err := putPayload(ctx, d.client, "test/blob", 1, 0, 3<<20+17, 0)
	if err != nil {
		t.Fatal(err)
	}
	var rec record
	if err := fetchVerify(ctx, d.client, bi, &rec, t.Logf); err != nil {
		t.Fatalf("good blob: %v", err)
	}
	if rec.Bytes != bi.Size || rec.ID != bi.ID || rec.Attempts != 1 {
		t.Fatalf("record %+v", rec)
	}
	for name, mutate := range map[string]func(*blobInfo){
		"sha256": func(b *blobInfo) { b.SHA256 = "00" + b.SHA256[2:] },
		"id":     func(b *blobInfo) { b.ID = "bafkother" },
		"size":   func(b *blobInfo) { b.Size++ },
	} {
		bad := bi
		mutate(&bad)
		if err := fetchVerify(ctx, d.client, bad, &rec, t.Logf); !errors.Is(err, errWrongBytes) {
			t.Errorf("wrong %s: err = %v, want errWrongBytes", name, err)
		}
	}
	// A name that never appears: retried until the context ends, bounded.
	sctx, scancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer scancel()
	missing := bi
	missing.Name = "test/missing"
	if err := fetchVerify(sctx, d.client, missing, &rec, t.Logf); err == nil || errors.Is(err, errWrongBytes) {
		t.Errorf("missing name: err = %v", err)
	}
}
