package main

import (
	"path/filepath"
	"testing"
	"time"
)

// TestDaemonBulkSendfile: omst daemon --bulk-sendfile=false reaches the
// engine. A root and a worker on a trusted LAN (plain bulk connections);
// the worker gets a blob put at the root. By default the root sends
// chunks of its store with sendfile (status served_sendfile > 0); with
// --bulk-sendfile=false at the root it serves them from its store all the
// same (served_unhashed > 0) and served_sendfile stays 0.
func TestDaemonBulkSendfile(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-process test skipped in -short mode")
	}
	for _, tc := range []struct {
		name     string
		flags    []string
		sendfile bool
	}{
		{"default", nil, true},
		{"off", []string{"--bulk-sendfile=false"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			plain := []string{"--trusted-lan", "--site", "a"}
			root := startDaemon(t, filepath.Join(dir, "root"), append(plain, tc.flags...)...)
			w := startDaemon(t, filepath.Join(dir, "w"), append(plain, "--parent", tcpAddr(t, root))...)
			src := filepath.Join(dir, "data.bin")
			want := writeRandomFile(t, src, 16<<20, 3)
			mustOmst(t, time.Minute, "--home", root.home, "put", "x/blob", src)
			out := filepath.Join(dir, "got.bin")
			mustOmst(t, time.Minute, "--home", w.home, "get", "x/blob", "-o", out)
			if fileHash(t, out) != want {
				t.Fatal("bytes differ")
			}
			st := root.status(t)
			if st.ServedUnhashed == 0 {
				t.Fatalf("the root served no chunk from its store (status %+v)", st)
			}
			if got := st.ServedSendfile > 0; got != tc.sendfile {
				t.Fatalf("the root sent %d of %d chunks from its store with sendfile; want sendfile %v", st.ServedSendfile, st.ServedUnhashed, tc.sendfile)
			}
		})
	}
}
