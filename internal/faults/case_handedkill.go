package faults

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// caseHandedKill: a GET_FD client keeps a blob file of the store's own
// mapped while the daemon evicts the blob, is SIGKILLed and restarted
// (pkg/cache: a file handed out is marked 0400 and never punched again;
// its evicted chunks stay on disk, beyond the cap, until its last chunk
// goes). A root and a worker w1 with --cache-size 32M under it.
//
//  1. The harness gets a fresh 10..12 MiB blob A at w1 with GET_FD
//     (rpcbridge, as the C and Python clients do) and maps every extent
//     read-only; A's extents are in w1's blob file DIR/blobs/<cid>.s<n>
//     (else the case proves nothing), which is 0400.
//  2. w1 stream-gets two fresh blobs of 12..14 MiB: together with A over the
//     cap, so some of A's chunks are evicted, not all (the file stays).
//     The mapping still reads A exactly and the file holds no hole.
//  3. w1 is SIGKILLed: the mapping reads A; w1 restarted on its home: its
//     Open finds the file still handed out (0400, no hole punched) and
//     the mapping reads A.
//  4. While A is still mapped, w1 stream-gets a fourth blob of 12..14 MiB: the
//     rest of A goes (the file is unlinked, never punched: the mapping
//     still reads A). The mapping is dropped: then what the store keeps
//     on disk (the blocks of its chunk and blob files) and its cache_used
//     are within the 32 MiB cap.
//
// Daemons alive, no panic, descriptors back at the root.
func caseHandedKill(e *Env) error {
	const capBytes = 32 << 20
	root, w, err := e.StartRootAndWorker(nil, []string{"--cache-size", "32M"})
	if err != nil {
		return err
	}
	store := filepath.Join(w.Home, storeDir)

	a := e.Blob(e.Size(10<<20, 12<<20))
	e.Step("put hk/a (%d bytes) at the root; GET_FD it at w1 and map it", len(a))
	if err := e.MustPut(root, "hk/a", a); err != nil {
		return err
	}
	m, err := mapGetFD(e, w, "hk/a")
	if err != nil {
		return err
	}
	defer m.unmap()
	if !bytes.Equal(m.read(), a) {
		return violation("GET_FD of hk/a at w1 maps bytes other than the put's")
	}
	if m.file == "" {
		return violation("GET_FD of hk/a at w1 handed out no extent in a blob file of the store's own (%s): the case proves nothing", strings.Join(m.paths, ", "))
	}
	if err := handedIntact(m.file, int64(len(a)), "after the GET_FD"); err != nil {
		return err
	}
	e.Printf("hk/a mapped from %s (%d extents)", filepath.Base(m.file), len(m.maps))

	total := int64(len(a))
	for _, n := range []string{"hk/b", "hk/c"} {
		data := e.Blob(e.Size(12<<20, 14<<20))
		total += int64(len(data))
		e.Step("put %s (%d bytes) at the root, stream-get it at w1 (A's chunks are evicted)", n, len(data))
		if err := e.MustPut(root, n, data); err != nil {
			return err
		}
		if err := e.streamGetExact(w, n, 0); err != nil {
			return err
		}
	}
	st, _, err := w.Status(e.Ctx)
	if err != nil {
		return err
	}
	if _, err := os.Stat(m.file); err != nil {
		return fmt.Errorf("A's blob file went with only part of A evicted (cache_used %d): the case's sizes are wrong: %w", st.CacheUsed, err)
	}
	if st.CacheUsed >= total {
		return fmt.Errorf("w1 evicted nothing (cache_used %d of %d): the case's sizes are wrong", st.CacheUsed, st.CacheCap)
	}
	if !bytes.Equal(m.read(), a) {
		return violation("the mapping of hk/a read other bytes once w1 evicted some of its chunks (cache_used %d): a handed-out file was punched", st.CacheUsed)
	}
	if err := handedIntact(m.file, int64(len(a)), "after the evictions"); err != nil {
		return err
	}

	e.Step("SIGKILL w1 while hk/a is mapped; restart it")
	if err := w.Kill(); err != nil {
		return err
	}
	if !bytes.Equal(m.read(), a) {
		return violation("the mapping of hk/a read other bytes once w1 was killed")
	}
	if err := e.Restart(w, true, "SIGKILL with a blob file mapped by a client"); err != nil {
		return err
	}
	if err := handedIntact(m.file, int64(len(a)), "after the restart"); err != nil {
		return err
	}
	if !bytes.Equal(m.read(), a) {
		return violation("the mapping of hk/a read other bytes after w1's restart")
	}

	d := e.Blob(e.Size(12<<20, 14<<20))
	e.Step("put hk/d (%d bytes) at the root, get it at w1 with hk/a still mapped (the rest of A goes)", len(d))
	if err := e.MustPut(root, "hk/d", d); err != nil {
		return err
	}
	if err := e.streamGetExact(w, "hk/d", reconnectWithin); err != nil {
		return err
	}
	if !bytes.Equal(m.read(), a) {
		return violation("the mapping of hk/a read other bytes once the restarted w1 evicted its chunks: the restarted store punched a handed-out file")
	}
	if _, err := os.Stat(m.file); err == nil {
		if err := handedIntact(m.file, int64(len(a)), "after the restarted w1 evicted"); err != nil {
			return err
		}
		return violation("A's blob file %s is still in w1's store after a get that needed all of A's room", m.file)
	}
	e.Step("drop the mapping: w1's store within its cap on disk")
	m.unmap()
	onDisk, err := storeBlocks(store)
	if err != nil {
		return err
	}
	if st, _, err = w.Status(e.Ctx); err != nil {
		return err
	}
	e.Printf("w1 after A's last chunk went: cache_used %d, %d bytes on disk in its chunk and blob files, cap %d", st.CacheUsed, onDisk, capBytes)
	if st.CacheUsed > capBytes || onDisk > capBytes {
		return violation("w1's store holds %d bytes on disk (cache_used %d) over its %d-byte cap once no file is mapped", onDisk, st.CacheUsed, capBytes)
	}
	e.Step("daemons alive, answering, no panics, no leaked descriptors")
	return e.CheckDaemons(root, w)
}

// streamGetExact gets name at d to stdout (a fetch into a blob file of
// the store's own, not a destination shared with it) until it reads the
// put's bytes, for at most within.
func (e *Env) streamGetExact(d *Daemon, name string, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		v, rd, err := e.Get(d, name, GetStdout, false)
		if err != nil || v == Exact {
			return err
		}
		if time.Now().After(deadline) || e.Ctx.Err() != nil {
			return violation("get %q to stdout at %s must return the put bytes: %s, exit %d: %s", name, d.Name, v, rd.Code, trim(rd.Stderr))
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// fdMapping is a blob got with GET_FD and mapped, extent by extent.
type fdMapping struct {
	maps  [][]byte // each extent's mapping, from the page below its offset
	skip  []int    // the bytes before the extent's offset in each mapping
	paths []string // each extent's file, as /proc/self/fd names it
	file  string   // a blob file of the store's own among them ("" if none)
}

// mapGetFD gets name at d with GET_FD and maps every extent read-only
// (closing the descriptors: the mappings keep the files).
func mapGetFD(e *Env, d *Daemon, name string) (*fdMapping, error) {
	c, err := rpcbridge.Dial(filepath.Join(d.Home, "omst.sock"))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_, xs, err := c.GetFD(e.Ctx, name)
	if err != nil {
		return nil, violation("GET_FD of %q at %s: %v", name, d.Name, err)
	}
	m := &fdMapping{}
	page := int64(os.Getpagesize())
	var merr error
	for _, x := range xs {
		p, _ := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", x.File.Fd()))
		m.paths = append(m.paths, p)
		if filepath.Base(filepath.Dir(p)) == blobDir && strings.Contains(filepath.Base(p), ".s") {
			m.file = p
		}
		if merr == nil {
			off := int64(x.FileOffset)
			base := off / page * page
			b, err := syscall.Mmap(int(x.File.Fd()), base, int(off-base+int64(x.Length)), syscall.PROT_READ, syscall.MAP_SHARED)
			if err != nil {
				merr = fmt.Errorf("map an extent of %s: %w", p, err)
			} else {
				m.maps = append(m.maps, b)
				m.skip = append(m.skip, int(off-base))
			}
		}
		x.File.Close()
	}
	if merr != nil {
		m.unmap()
		return nil, merr
	}
	return m, nil
}

// read copies the blob's bytes out of the mappings.
func (m *fdMapping) read() []byte {
	var out []byte
	for i, b := range m.maps {
		out = append(out, b[m.skip[i]:]...)
	}
	return out
}

// unmap drops the mappings (again: nothing).
func (m *fdMapping) unmap() {
	for _, b := range m.maps {
		syscall.Munmap(b)
	}
	m.maps, m.skip = nil, nil
}

// handedIntact checks that the blob file at path is marked handed out
// (no write permission) and holds no hole in its size bytes (never
// punched).
func handedIntact(path string, size int64, when string) error {
	f, err := os.Open(path)
	if err != nil {
		return violation("%s: the handed-out blob file %s: %v", when, path, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.Mode().Perm()&0o222 != 0 {
		return violation("%s: the handed-out blob file %s has mode %v: not marked handed out", when, path, fi.Mode().Perm())
	}
	if fi.Size() != size {
		return violation("%s: the handed-out blob file %s has %d bytes, want %d", when, path, fi.Size(), size)
	}
	if h, err := unix.Seek(int(f.Fd()), 0, unix.SEEK_HOLE); err == nil && h < size {
		return violation("%s: the handed-out blob file %s holds a hole at %d: a range punched out under a client's mapping", when, path, h)
	}
	return nil
}

// storeBlocks is the disk space of the store's chunk and blob files (their
// allocated blocks: a punched range holds none).
func storeBlocks(store string) (int64, error) {
	var n int64
	for _, dir := range []string{chunkDir, blobDir} {
		files, err := Files(filepath.Join(store, dir))
		if err != nil && !os.IsNotExist(err) {
			return 0, err
		}
		for _, f := range files {
			var st syscall.Stat_t
			if syscall.Stat(f, &st) == nil {
				n += st.Blocks * 512
			}
		}
	}
	return n, nil
}
