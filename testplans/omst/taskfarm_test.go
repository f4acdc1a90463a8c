package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/testground/sdk-go/runtime"
)

// The paper's shape: 32 jobs on 16 workers, two each, every job once.
func TestFarmJobs(t *testing.T) {
	seen := map[int]int{}
	for w := 0; w < 16; w++ {
		got := farmJobs(w, 16, 32)
		if want := []int{w, w + 16}; !reflect.DeepEqual(got, want) {
			t.Fatalf("farmJobs(%d, 16, 32) = %v, want %v", w, got, want)
		}
		for _, j := range got {
			seen[j]++
		}
	}
	for j := 0; j < 32; j++ {
		if seen[j] != 1 {
			t.Fatalf("job %d assigned %d times", j, seen[j])
		}
	}
	if got := farmJobs(0, 16, 33); !reflect.DeepEqual(got, []int{0, 16, 32}) {
		t.Errorf("33 jobs, worker 0: %v", got)
	}
	if got := farmJobs(5, 16, 3); got != nil {
		t.Errorf("more workers than jobs, worker 5: %v, want none", got)
	}
	for _, c := range [][3]int{{-1, 16, 32}, {16, 16, 32}, {0, 0, 32}} {
		if got := farmJobs(c[0], c[1], c[2]); got != nil {
			t.Errorf("farmJobs%v = %v, want nil", c, got)
		}
	}
	if got := farmWorker(1, 3, 8); got != 11 {
		t.Errorf("farmWorker(1, 3, 8) = %d, want 11", got)
	}
}

func TestFarmResult(t *testing.T) {
	const in1 = "aaaa1111"
	const in2 = "bbbb2222"
	a, _ := io.ReadAll(farmResult(1, 7, in1, 4096))
	b, _ := io.ReadAll(farmResult(1, 7, in1, 4096))
	if len(a) != 4096 || !bytes.Equal(a, b) {
		t.Fatalf("not deterministic or wrong length: %d bytes", len(a))
	}
	if !bytes.HasPrefix(a, []byte("omst-taskfarm job=7 input-sha256="+in1+" ")) || a[farmHeaderLen-1] != '\n' {
		t.Fatalf("header %q", a[:farmHeaderLen])
	}
	// Exactly the header when size is the header's length.
	if h, _ := io.ReadAll(farmResult(1, 7, in1, farmHeaderLen)); len(h) != farmHeaderLen {
		t.Fatalf("size %d: %d bytes", farmHeaderLen, len(h))
	}
	// A header never overflows, whatever the input's hash string.
	if h := farmHeader(1, strings.Repeat("f", 500)); len(h) != farmHeaderLen || h[farmHeaderLen-1] != '\n' {
		t.Fatalf("long input hash: header of %d bytes", len(h))
	}
	want := farmResultSHA(1, 7, in1, 4096)
	dg := newDigest()
	dg.Write(a)
	if dg.Sum() != want {
		t.Fatalf("farmResultSHA %s, hash of the bytes %s", want, dg.Sum())
	}
	// Another job, other input, another seed: other bytes.
	for name, other := range map[string]string{
		"job":   farmResultSHA(1, 8, in1, 4096),
		"input": farmResultSHA(1, 7, in2, 4096),
		"seed":  farmResultSHA(2, 7, in1, 4096),
		"size":  farmResultSHA(1, 7, in1, 4095),
	} {
		if other == want {
			t.Errorf("another %s gives the same result", name)
		}
	}
	// Two jobs' payloads differ beyond the header too.
	c, _ := io.ReadAll(farmResult(1, 8, in1, 4096))
	if bytes.Equal(a[farmHeaderLen:], c[farmHeaderLen:]) {
		t.Error("jobs 7 and 8 have the same payload")
	}
}

func TestFarmTally(t *testing.T) {
	const jobs, workers, wps = 32, 16, 8
	done := func(job, site, index int) farmDone {
		return farmDone{Job: job, Site: site, Index: index, Name: farmResultName(site, index, job)}
	}
	tl := newFarmTally(jobs, workers, wps)
	for j := 0; j < jobs; j += 2 {
		w := j % workers
		if err := tl.add(done(j, w/wps, w%wps)); err != nil {
			t.Fatalf("job %d: %v", j, err)
		}
	}
	if m := tl.missing(); len(m) != 16 || m[0] != 1 || m[15] != 31 {
		t.Fatalf("missing %v, want the 16 odd jobs", m)
	}
	for name, d := range map[string]farmDone{
		"duplicate":       done(0, 0, 0),
		"out of range":    done(32, 0, 0),
		"negative":        done(-1, 0, 0),
		"another worker":  done(3, 0, 4),   // job 3 is worker 3's: site 0 #3
		"index past site": done(11, 0, 11), // worker 11 is site 1 #3
		"another name":    {Job: 5, Site: 0, Index: 5, Name: "results/site-0/worker-5"},
	} {
		if err := tl.add(d); !errors.Is(err, errFarmJob) {
			t.Errorf("%s: err = %v, want errFarmJob", name, err)
		}
	}
	// A failed job's announcement names no result: accepted by the tally
	// (the master counts its error).
	if err := tl.add(farmDone{Job: 7, Site: 0, Index: 7, Error: "boom"}); err != nil {
		t.Errorf("failed job: %v", err)
	}
}

func farmEnv(kv map[string]string) *runtime.RunEnv {
	return &runtime.RunEnv{RunParams: runtime.RunParams{TestCase: "taskfarm", TestInstanceParams: kv}}
}

func TestLoadFarmParams(t *testing.T) {
	cfg := &config{sites: 2, workersPerSite: 8, blobSize: 16 << 20, resultSize: 1 << 20}
	p := params{re: farmEnv(map[string]string{"compute": "500ms"})}
	fp, err := loadFarmParams(&p, cfg)
	if err != nil || fp.jobs != 32 || fp.compute != 500*time.Millisecond || fp.workers != 16 {
		t.Fatalf("defaults: %+v, %v", fp, err)
	}
	for _, tc := range []struct {
		kv   map[string]string
		cfg  config
		want string
	}{
		{map[string]string{"jobs": "0"}, *cfg, "jobs=0"},
		{map[string]string{"jobs": "many"}, *cfg, `jobs="many"`},
		{map[string]string{"compute": "-1s"}, *cfg, "compute=-1s"},
		{map[string]string{"compute": "soon"}, *cfg, `compute="soon"`},
		{nil, config{sites: 2, workersPerSite: 8, blobSize: 1, resultSize: 100}, "result_size=100"},
		{nil, config{sites: 2, workersPerSite: 8, blobSize: 0, resultSize: 1 << 20}, "blob_size=0"},
		{nil, config{sites: 1, workersPerSite: 0, blobSize: 1, resultSize: 1 << 20}, "at least one worker"},
	} {
		p := params{re: farmEnv(tc.kv)}
		if _, err := loadFarmParams(&p, &tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v %+v: err = %v, want one naming %q", tc.kv, tc.cfg, err, tc.want)
		}
	}
}

// TestFarmResultVerify puts a job's result through a real daemon as a
// worker does and verifies it as the master does; a result computed on
// other initial data is refused. Set OMST_BIN to an omst binary.
func TestFarmResultVerify(t *testing.T) {
	bin := os.Getenv("OMST_BIN")
	if bin == "" {
		t.Skip("OMST_BIN not set")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := startDaemon(ctx, "farm", daemonSpec{bin: bin, ip: "127.0.0.1", transport: "tcp", logLevel: "warn",
		logPath: filepath.Join(t.TempDir(), "daemon.log")})
	if err != nil {
		t.Fatal(err)
	}
	defer d.stop(10 * time.Second)
	const size = 1<<20 + 3
	input := "0123abcd"
	put := func(name string, job int, inputSHA string) string {
		info, err := d.client.Put(ctx, name, farmResult(1, job, inputSHA, size), rpcbridge.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return info.ID
	}
	good := farmResultName(0, 3, 3)
	id := put(good, 3, input)
	var rec record
	want := blobInfo{Name: good, ID: id, Size: size, SHA256: farmResultSHA(1, 3, input, size)}
	if err := fetchVerify(ctx, d.client, want, &rec, t.Logf); err != nil {
		t.Fatalf("good result: %v", err)
	}
	bad := farmResultName(0, 3, 19)
	badID := put(bad, 19, "other-input")
	want = blobInfo{Name: bad, ID: badID, Size: size, SHA256: farmResultSHA(1, 19, input, size)}
	if err := fetchVerify(ctx, d.client, want, &rec, t.Logf); !errors.Is(err, errWrongBytes) {
		t.Fatalf("result on other input: err = %v, want errWrongBytes", err)
	}
}

// The master's account: the makespan from the first start to the last
// verified result; the first jobs' input times per worker; the WAN bytes
// only when every head measured them.
func TestFarmAccount(t *testing.T) {
	cfg := &config{sites: 2, workersPerSite: 1, blobSize: 1 << 20, resultSize: 1 << 10, mode: modeStar}
	c := &taskfarmCase{fp: farmParams{jobs: 4, compute: time.Second, workers: 2}, put: 0.25}
	c.dones = []farmDone{
		{Job: 2, Site: 0, Index: 0, Start: 2.0, Input: 2.1, Verified: 3.5},
		{Job: 0, Site: 0, Index: 0, Start: 0.01, Input: 1.01, Verified: 2.2},
		{Job: 1, Site: 1, Index: 0, Start: 0.02, Input: 3.02, Verified: 4.8},
		{Job: 3, Site: 1, Index: 0, Error: "boom", Start: 4.1},
	}
	heads := []record{{Role: roleHead, Site: 0, WANIface: "wan0", WANRxBytes: 8 << 20}, {Role: roleHead, Site: 1, WANIface: "wan1", WANRxBytes: 4 << 20}}
	a := c.account(cfg, heads, false)
	if a.FirstStart != 0.01 || a.LastVerified != 4.8 || a.Makespan != 4.8-0.01 || a.Verified != 3 {
		t.Fatalf("first %v last %v makespan %v verified %d", a.FirstStart, a.LastVerified, a.Makespan, a.Verified)
	}
	if a.InputFirstMax != 3.0 || a.InputFirstMedian != 3.0 {
		t.Fatalf("first jobs' input: median %v max %v, want 3 and 3 (the jobs 0 and 1)", a.InputFirstMedian, a.InputFirstMax)
	}
	if len(a.SiteWANInMiB) != 2 || a.SiteWANInMiB[0] != 8 || a.SiteWANInMiB[1] != 4 {
		t.Fatalf("WAN in %v", a.SiteWANInMiB)
	}
	if a.JobsDone[0].Job != 0 || a.JobsDone[3].Job != 3 || a.MasterPutSeconds != 0.25 || a.Pass {
		t.Fatalf("account %+v", a)
	}
	if a := c.account(cfg, heads[:1], true); a.SiteWANInMiB != nil {
		t.Fatalf("one head of two measured: WAN in %v, want none", a.SiteWANInMiB)
	}
}
