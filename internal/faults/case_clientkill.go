package faults

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// caseClientKill: one daemon. Clients are SIGKILLed mid-upload (`omst put
// NAME -` fed from a pipe, killed once a random number of bytes, fewer
// than the whole blob, went in: the standard input is never closed, so the
// client never sees an end of input) and mid-download (`omst get NAME -o
// F` and `omst get NAME` to a pipe, killed at a random byte count). After
// each: the daemon runs, the name of a cut upload does not exist or holds
// the bytes of the earlier completed put (never the prefix), F does not
// exist or holds the whole blob; at the end the daemon's descriptors are
// back at their baseline, and puts and gets work.
func caseClientKill(e *Env) error {
	ports, err := FreePorts(1)
	if err != nil {
		return err
	}
	d := e.NewDaemonAt("n1", e.Dir+"/n1", ports[0], nil, randomSync(e)...)
	e.Step("start daemon n1")
	if err := e.Start(d); err != nil {
		return err
	}
	e.Step("warm-up put and get, then the descriptor baseline")
	warm := e.Blob(e.Size(1<<20, 8<<20))
	if err := e.MustPut(d, "ck/warm", warm); err != nil {
		return err
	}
	if err := e.GetExact(d, "ck/warm", 0, "a plain get"); err != nil {
		return err
	}
	// A bigger blob for the downloads, so a kill lands inside them.
	if err := e.MustPut(d, "ck/dl", e.Blob(e.Size(16<<20, 48<<20))); err != nil {
		return err
	}
	if err := d.SetBaseline(); err != nil {
		return err
	}
	base, _ := d.Baseline()
	rss0, _ := d.RSS()
	e.Logf("n1 baseline: %v, RSS %d MiB", base, rss0>>20)

	for it := 1; it <= 2; it++ {
		name := fmt.Sprintf("ck/up%d", it)
		if e.Rng.IntN(2) == 0 {
			name = "ck/warm" // a cut upload over a completed name
		}
		data := e.Blob(e.Size(2<<20, 32<<20))
		at := 1 + e.Rng.Int64N(int64(len(data))-1)
		e.Step("upload %d: put %q (%d bytes) through a pipe, SIGKILL the client after %d bytes", it, name, len(data), at)
		if err := e.cutUpload(d, name, data, at); err != nil {
			return err
		}
		e.Step("upload %d: n1 alive; %q absent or the earlier completed bytes", it, name)
		if !d.Running() {
			return violation("n1 died after a client was killed mid-upload: %s; log tail:\n%s", d.ExitState(), d.LogTail(15))
		}
		// The daemon learns of the dead client when its next read fails;
		// give the upload a moment to be abandoned before reading the name.
		e.sleep(200 * time.Millisecond)
		for _, mode := range []GetMode{GetFile, GetStdout} {
			if _, _, err := e.Get(d, name, mode, false); err != nil {
				return fmt.Errorf("after a client was killed mid-upload: %w", err)
			}
		}
	}

	for it := 1; it <= 2; it++ {
		name := "ck/dl"
		size := mustDone(e, name).Size
		mode := e.RandGetMode()
		at := e.Rng.Int64N(max(size, 1))
		e.Step("download %d: get %q (%d bytes, %s), SIGKILL the client after %d bytes", it, name, size, mode, at)
		gk, err := e.getKilling(d, nil, name, mode, at)
		if err != nil {
			return fmt.Errorf("%w (client killed mid-download)", err)
		}
		e.Logf("killed client: %s", gk.Verdict)
		if !d.Running() {
			return violation("n1 died after a client was killed mid-download: %s", d.ExitState())
		}
	}

	e.Step("puts and gets after the killed clients")
	after := e.Blob(e.Size(0, 8<<20))
	if err := e.MustPut(d, "ck/after", after); err != nil {
		return err
	}
	for _, name := range e.Ledger.CompletedNames() {
		if err := e.GetExact(d, name, 0, "a completed put on a daemon whose clients were killed"); err != nil {
			return err
		}
	}
	e.Step("n1's descriptors back at the baseline; no leftover get temp files")
	if err := e.CheckDaemons(d); err != nil {
		return err
	}
	if left := leftoverTemps(e.Dir); len(left) > 0 {
		e.Printf("note: temp files of killed gets still exist: %s", strings.Join(left, ", "))
	}
	rss1, _ := d.RSS()
	e.Printf("n1 RSS %d MiB at the baseline, %d MiB after the killed clients", rss0>>20, rss1>>20)
	return nil
}

func mustDone(e *Env, name string) Version {
	v, _ := e.Ledger.Done(name)
	return v
}

// cutUpload starts `omst put name -`, writes data[:at] into its standard
// input (leaving it open), SIGKILLs it and records the attempt.
func (e *Env) cutUpload(d *Daemon, name string, data []byte, at int64) error {
	e.Ledger.Attempt(name, NewVersion(data))
	p, err := StartCLI(e.Bin, true, false, "--home", d.Home, "put", name, "-")
	if err != nil {
		return err
	}
	n, werr := writeAll(p.Stdin, data[:at])
	// Let the client pass what it read on to the daemon before the kill,
	// so the cut lands inside the upload rather than before it.
	e.sleep(time.Duration(e.Rng.IntN(50)) * time.Millisecond)
	p.Kill()
	r := p.Wait(e.Ctx, OpTimeout)
	if r.Err != nil {
		return r.Err
	}
	if werr != nil {
		e.Logf("client stopped reading after %d bytes: %v (%s)", n, werr, r.Describe())
	}
	if r.Signal == "" {
		// The client ended by itself before the kill: with its input still
		// open it cannot have succeeded.
		if r.Code == 0 {
			return violation("put %q: the client exited 0 with its standard input still open after %d of %d bytes", name, at, len(data))
		}
		e.Logf("client ended before the kill: %s", r.Describe())
	}
	return nil
}

// leftoverTemps lists temp files that gets left beside their outputs
// (.NAME.omst-*) in the get-* directories under dir.
func leftoverTemps(dir string) []string {
	var out []string
	dirs, _ := filepath.Glob(filepath.Join(dir, "get-*"))
	for _, g := range dirs {
		ents, _ := os.ReadDir(g)
		for _, de := range ents {
			if strings.HasPrefix(de.Name(), ".") && strings.Contains(de.Name(), ".omst-") {
				out = append(out, filepath.Join(g, de.Name()))
			}
		}
	}
	return out
}
