package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// ---- smallgather ----

// smallgatherCase (issue 27, many names in one call): a task farm's small
// objects. Before the start every worker puts small_count results of
// small_size bytes under sgres/sS/wI/ in one PUT_MANY, the root puts as
// many small inputs in all under sgin/, and the root waits until it lists
// every result. After the start the root runs `omst get -r sgres -o DIR`
// (one GET_MANY) and verifies every file; then the first worker of site
// 0 fetches every input from the root by prefix in one GET_MANY (its
// daemon lists the names up the tree, names protocol LIST) and verifies
// them. The root's record is the gather, the worker's
// the inputs, each in seconds from its own start (not the start signal).
type smallgatherCase struct{}

const (
	sgResults    = "sgres/"
	sgInputs     = "sgin/"
	stateSGDone  = "omst-smallgather-gathered"
	sgFetchSite  = 0
	sgFetchIndex = 0
)

func (smallgatherCase) name() string                        { return "smallgather" }
func (smallgatherCase) workerStartsLate(*instance) bool     { return false }
func (smallgatherCase) workerParents(in *instance) []string { return []string{in.defaultParent()} }

// smallBytes is the content of the small object name: size bytes from
// SHA-256 in counter mode over seed and name.
func smallBytes(seed int64, name string, size int64) []byte {
	out := make([]byte, 0, size+sha256.Size)
	var ctr [16]byte
	binary.BigEndian.PutUint64(ctr[:8], uint64(seed))
	for k := uint64(0); int64(len(out)) < size; k++ {
		binary.BigEndian.PutUint64(ctr[8:], k)
		h := sha256.New()
		h.Write(ctr[:])
		h.Write([]byte(name))
		out = h.Sum(out)
	}
	return out[:size]
}

func sgTotal(in *instance) int {
	return in.cfg.sites * in.cfg.workersPerSite * in.cfg.smallCount
}

func sgInputName(k int) string { return fmt.Sprintf("%s%05d", sgInputs, k) }

// putSmall puts names' contents in one PUT_MANY.
func putSmall(ctx context.Context, in *instance, names []string) error {
	items := make([]rpcbridge.PutItem, len(names))
	for i, n := range names {
		b := smallBytes(in.cfg.seed, n, in.cfg.smallSize)
		items[i] = rpcbridge.PutItem{Name: n, Size: uint64(len(b)), Open: func() (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(b)), nil
		}}
	}
	t0 := time.Now()
	_, sum, err := in.d.client.PutMany(ctx, items, rpcbridge.PutOptions{ChunkSize: int(in.cfg.chunkSize)})
	if err == nil && sum.Failed > 0 {
		err = fmt.Errorf("put many: %d of %d failed", sum.Failed, sum.Entries)
	}
	in.re.RecordMessage("put %d small objects in %.3fs", len(names), time.Since(t0).Seconds())
	return err
}

func (smallgatherCase) prepare(ctx context.Context, in *instance) error {
	total := sgTotal(in)
	switch in.role {
	case roleWorker:
		names := make([]string, in.cfg.smallCount)
		for k := range names {
			names[k] = fmt.Sprintf("%ss%d/w%d/%05d", sgResults, in.site, in.index, k)
		}
		return putSmall(ctx, in, names)
	case roleRoot:
		names := make([]string, total)
		for k := range names {
			names[k] = sgInputName(k)
		}
		if err := putSmall(ctx, in, names); err != nil {
			return err
		}
		t0 := time.Now()
		for {
			infos, err := in.d.client.List(ctx, sgResults)
			if err != nil {
				return err
			}
			if len(infos) >= total {
				in.re.RecordMessage("the root lists %d names under %s %.2fs after its inputs were put", len(infos), sgResults, time.Since(t0).Seconds())
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("the root lists %d of %d results: %w", len(infos), total, ctx.Err())
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

func (smallgatherCase) act(ctx context.Context, in *instance, rec *record) error {
	switch {
	case in.role == roleRoot:
		err := sgGatherCLI(ctx, in, rec)
		if _, serr := in.sc.SignalEntry(ctx, stateSGDone); serr != nil && err == nil {
			err = serr
		}
		return err
	case in.role == roleWorker && in.site == sgFetchSite && in.index == sgFetchIndex:
		b, err := in.sc.Barrier(ctx, stateSGDone, 1)
		if err == nil {
			err = <-b.C
		}
		if err != nil {
			return fmt.Errorf("wait for the root's gather: %w", err)
		}
		return sgFetchInputs(ctx, in, rec)
	}
	rec.OK = true
	return nil
}

// sgGatherCLI runs `omst get -r sgres -o DIR --json` against the root's
// daemon and verifies every file.
func sgGatherCLI(ctx context.Context, in *instance, rec *record) error {
	total := sgTotal(in)
	dir, err := os.MkdirTemp(filepath.Dir(in.d.home), "gather-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	t0 := time.Now()
	cmd := exec.CommandContext(ctx, in.d.spec.bin, "--home", in.d.home, "get", "-r", sgResults, "-o", dir, "--json")
	out, err := cmd.Output()
	secs := time.Since(t0).Seconds()
	var rep struct {
		Entries, OK, Failed int
		Bytes               int64
		Seconds             float64
	}
	if jerr := json.Unmarshal(out, &rep); jerr != nil {
		return fmt.Errorf("get -r: %v; %w", err, jerr)
	}
	if err != nil {
		return fmt.Errorf("get -r: %d of %d failed: %w", rep.Failed, rep.Entries, err)
	}
	rec.Seconds, rec.Bytes = secs, rep.Bytes
	rec.Note = fmt.Sprintf("seconds = `omst get -r` of %d results at the root, from its start (the request alone %.3fs)", rep.OK, rep.Seconds)
	if rep.OK != total {
		return fmt.Errorf("get -r brought %d of %d results", rep.OK, total)
	}
	bad := 0
	for s := range in.cfg.sites {
		for w := range in.cfg.workersPerSite {
			for k := range in.cfg.smallCount {
				rel := fmt.Sprintf("s%d/w%d/%05d", s, w, k)
				b, rerr := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
				if rerr != nil || !bytes.Equal(b, smallBytes(in.cfg.seed, sgResults+rel, in.cfg.smallSize)) {
					bad++
				}
			}
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d results with wrong bytes", bad, total)
	}
	rec.OK = true
	in.re.RecordMessage("gathered %d results (%d bytes) in %.3fs, every byte right", total, rep.Bytes, secs)
	return nil
}

// sgFetchInputs fetches every input by prefix in one GET_MANY and verifies
// it.
func sgFetchInputs(ctx context.Context, in *instance, rec *record) error {
	total := sgTotal(in)
	t0 := time.Now()
	bad := 0
	sum, err := in.d.client.GetMany(ctx, rpcbridge.ManyRequest{Prefix: sgInputs, ByPrefix: true}, func(e rpcbridge.ManyEntry, r io.Reader) error {
		if e.Err != nil {
			bad++
			return nil
		}
		b, rerr := io.ReadAll(r)
		if rerr != nil || !bytes.Equal(b, smallBytes(in.cfg.seed, e.Name, in.cfg.smallSize)) {
			bad++
		}
		return nil
	})
	rec.Seconds, rec.Bytes = time.Since(t0).Seconds(), int64(sum.Bytes)
	rec.Note = fmt.Sprintf("seconds = one GET_MANY by prefix of %d inputs put at the root, at this worker", total)
	if err != nil {
		return err
	}
	if bad > 0 || sum.OK != total {
		return fmt.Errorf("%d of %d inputs failed or had wrong bytes", bad, total)
	}
	rec.OK = true
	in.re.RecordMessage("fetched %d inputs in %.3fs, every byte right", total, rec.Seconds)
	return nil
}

func (smallgatherCase) measured(in *instance, all []record, _ []record) ([]record, int) {
	var out []record
	for _, r := range all {
		if r.Role == roleRoot || (r.Role == roleWorker && r.Site == sgFetchSite && r.Index == sgFetchIndex) {
			out = append(out, r)
		}
	}
	return out, 2
}
