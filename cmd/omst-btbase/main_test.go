//go:build linux

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

func testEnv(role, host, site, params string) func(string) string {
	m := map[string]string{
		"OMST_WAN_ROLE": role, "OMST_WAN_HOST": host, "OMST_WAN_SITE": site, "OMST_WAN_IP": "10.1.0.3",
		"OMST_WAN_ROOT_IP": "10.0.0.1", "OMST_WAN_OUT": "/out/" + host, "OMST_WAN_TMP": "/shm/r/" + host,
		"OMST_WAN_SHARED": "/shm/r/shared", "OMST_WAN_SITES": "2", "OMST_WAN_WORKERS": "3",
		"TEST_INSTANCE_COUNT": "9", "TEST_CASE": "broadcast", "TEST_INSTANCE_PARAMS": params,
	}
	return func(k string) string { return m[k] }
}

func TestLoadConfig(t *testing.T) {
	c, err := loadConfig(testEnv("worker", "a-w2", "0", "blob_size=16MiB|omst_bin=/x|timeout=2m"))
	if err != nil {
		t.Fatal(err)
	}
	if c.index != 1 || c.site != 0 || c.blobSize != 16<<20 || c.pieceSize != 1<<20 || c.timeout != 2*time.Minute ||
		c.instances != 9 || c.seed != 1 || c.path(fileStart) != "/shm/r/shared/bt/start" {
		t.Fatalf("config %+v", c)
	}
	for _, tc := range []struct{ role, host, site, params, want string }{
		{"worker", "a-w2", "0", "mode=tree", "bittorrent baseline"},
		{"worker", "a-w2", "0", "piece_size=1000000", "power of two"},
		{"worker", "a-w2", "0", "blob_size=lots", "blob_size"},
		{"worker", "a-w2", "0", "timeout=0s", "timeout"},
		{"worker", "a-w2", "7", "", "OMST_WAN_SITE"},
		{"worker", "a-head", "0", "", "OMST_WAN_HOST"},
		{"switch", "a-w2", "0", "", "OMST_WAN_ROLE"},
	} {
		_, err := loadConfig(testEnv(tc.role, tc.host, tc.site, tc.params))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: error %v, want one about %s", tc, err, tc.want)
		}
	}
	env := testEnv("root", "root", "", "")
	if _, err := loadConfig(func(k string) string {
		if k == "OMST_WAN_SHARED" {
			return ""
		}
		return env(k)
	}); err == nil || !strings.Contains(err.Error(), "OMST_WAN_SHARED") {
		t.Errorf("no OMST_WAN_SHARED: error %v", err)
	}
}

func TestParseInfoHash(t *testing.T) {
	out := "*** BitTorrent File Information ***\nMode: single\nInfo Hash: 0394584812C5A92E755EE3B4834EB463EB99CA05\nPiece Length: 1.0MiB\n"
	ih, err := parseInfoHash(out)
	if err != nil || ih != "0394584812c5a92e755ee3b4834eb463eb99ca05" {
		t.Fatalf("got %q, %v", ih, err)
	}
	if _, err := parseInfoHash("Info Hash: 12\n"); err == nil {
		t.Fatal("short hash accepted")
	}
}

func TestParseScrape(t *testing.T) {
	for _, tc := range []struct {
		body string
		want int
		ok   bool
	}{
		{"d5:filesdee", 0, true},
		{"d5:filesd20:\x03\x94XH\x12\xc5\xa9.u^\xe3\xb4\x83N\xb4c\xeb\x99\xca\x05d8:completei3e10:downloadedi2e10:incompletei0eeee", 3, true},
		{"<title>Access Denied</title>", 0, false},
		{"", 0, false},
	} {
		n, err := parseScrape([]byte(tc.body))
		if n != tc.want || (err == nil) != tc.ok {
			t.Errorf("%q: %d, %v", tc.body, n, err)
		}
	}
}

func TestSummarize(t *testing.T) {
	c, err := loadConfig(testEnv("root", "root", "", "blob_size=1000"))
	if err != nil {
		t.Fatal(err)
	}
	c.workers = 2
	w := func(site, i int, secs float64, ok bool) record {
		return record{Role: "worker", Site: site, Index: i, Seconds: secs, OK: ok, Instance: "w"}
	}
	recs := []record{
		w(1, 1, 4, true), w(0, 0, 2, true), w(0, 1, 3, true), w(1, 0, 5, true),
		{Role: "head", Site: 1, OK: true, WANIface: "wan", WANRxBytes: 1500, WANTxBytes: 100},
		{Role: "head", Site: 0, OK: true, WANIface: "wan", WANRxBytes: 2000, WANTxBytes: 500},
		{Role: "root", Site: -1, OK: true},
	}
	s := summarize(c, recs, nil)
	if !s.Pass || s.Verified != 4 || s.Expected != 4 || s.TimeToLast != 5 || s.Min != 2 || s.Median != 4 {
		t.Fatalf("summary %+v", s)
	}
	if s.SiteIn[0] != 2 || s.SiteIn[1] != 1.5 || s.SiteInWire[1] != 1.5 || s.SiteOutWire[0] != 0.5 {
		t.Fatalf("site bytes in %v wire %v out %v", s.SiteIn, s.SiteInWire, s.SiteOutWire)
	}
	if s.Records[0].Role != "root" || s.Records[1].Site != 0 || s.Records[3].Index != 0 || s.Records[3].Role != "worker" {
		t.Fatalf("records not sorted: %+v", s.Records)
	}
	recs[0].OK, recs[0].Error = false, "wrong bytes"
	s = summarize(c, recs[:6], []string{"root: late"})
	if s.Pass || s.Verified != 3 || len(s.Failures) != 3 || s.SiteIn == nil {
		t.Fatalf("failing summary %+v", s)
	}
	s = summarize(c, recs[:5], nil)
	if s.SiteIn != nil {
		t.Fatalf("site_in_blobs from one of two heads: %v", s.SiteIn)
	}
}

// TestHook runs the completion hook as aria2c would.
func TestHook(t *testing.T) {
	dir := t.TempDir()
	complete := filepath.Join(dir, "it's done")
	hook, err := writeHook(dir, complete)
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	if out, err := exec.Command(hook, "gid", "1", "/x/payload").CombinedOutput(); err != nil {
		t.Fatalf("hook: %v: %s", err, out)
	}
	b, err := os.ReadFile(complete)
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b))
	ns, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil || len(f) != 2 || f[1] != "/x/payload" {
		t.Fatalf("hook wrote %q", b)
	}
	if at := time.Unix(0, ns); at.Before(before.Add(-time.Second)) || at.After(time.Now().Add(time.Second)) {
		t.Fatalf("hook time %v, ran at %v", at, before)
	}
}

func TestPayload(t *testing.T) {
	dir := t.TempDir()
	sum, err := writePayload(filepath.Join(dir, "p"), 1, 3<<20+5)
	if err != nil {
		t.Fatal(err)
	}
	n, sum2, err := hashFile(filepath.Join(dir, "p"))
	if err != nil || n != 3<<20+5 || sum2 != sum {
		t.Fatalf("%d %s %s %v", n, sum, sum2, err)
	}
	other, _ := writePayload(filepath.Join(dir, "q"), 2, 3<<20+5)
	if other == sum {
		t.Fatal("seeds 1 and 2 gave the same bytes")
	}
}
