package gridstore

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Dir is the grid material directory of a node: HOME/grid. Its methods are
// safe for concurrent use, within a process and across processes.
type Dir struct {
	path string
}

// Open returns the grid directory of the node whose home is home
// (HOME/grid). Nothing is created until something is written.
func Open(home string) Dir { return Dir{path: filepath.Join(home, "grid")} }

// Path returns the directory's path.
func (d Dir) Path() string { return d.path }

var (
	// ErrNoGrid is returned (wrapped) by Material when there is no
	// grid.pub: the node is open, in no grid.
	ErrNoGrid = errors.New("no grid material")
	// ErrNoKey is returned (wrapped) by whatever needs the grid key when
	// there is no grid.key: this node is not the grid's root.
	ErrNoKey = errors.New("no grid key here")
	// ErrRedeemed is returned (wrapped) by Redeem for a token redeemed
	// before.
	ErrRedeemed = errors.New("token already redeemed")
	// ErrNotMember is returned (wrapped) by Revoke for a peer the ledger
	// never issued a certificate to.
	ErrNotMember = errors.New("not a member")
	// ErrNotNewest is returned (wrapped) by Renew for a certificate that
	// is not its peer's newest: a later one was issued (a renewal, an
	// admission, a token) and only that one is renewed.
	ErrNotNewest = errors.New("not the peer's newest certificate")
)

// The files of a grid directory.
const (
	keyFile    = "grid.key"
	pubFile    = "grid.pub"
	certFile   = "member.cert"
	revFile    = "revocations"
	ledgerFile = "ledger.json"
	lockFile   = "lock"
)

// Size limits of what is read back.
const (
	maxSmallFile   = 1 << 20 // grid.key, grid.pub, member.cert, revocations (a full list is 512 KiB)
	maxLedgerBytes = 64 << 20
)

// lockTimeout bounds the wait for the lock: it is held only for a
// read-modify-write, so a longer wait means a stuck holder.
const lockTimeout = 30 * time.Second

func (d Dir) file(name string) string { return filepath.Join(d.path, name) }

// read returns the contents of name and whether it exists; a file larger
// than limit is an error.
func (d Dir) read(name string, limit int64) ([]byte, bool, error) {
	path := d.file(name)
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, false, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, false, fmt.Errorf("read %s: more than %d bytes", path, limit)
	}
	return b, true, nil
}

// ensureDir creates the directory (and the home above it) with mode 0700,
// and takes group and other permissions off an existing one.
func (d Dir) ensureDir() error {
	if err := os.MkdirAll(d.path, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", d.path, err)
	}
	st, err := os.Stat(d.path)
	if err != nil {
		return fmt.Errorf("create %s: %w", d.path, err)
	}
	if !st.IsDir() {
		return fmt.Errorf("%s: not a directory", d.path)
	}
	if st.Mode().Perm()&0o077 != 0 {
		if err := os.Chmod(d.path, 0o700); err != nil {
			return fmt.Errorf("chmod %s: %w", d.path, err)
		}
	}
	return nil
}

// write replaces name with b atomically: a temporary file in the same
// directory, fsynced, renamed over name, then the directory fsynced. The
// file has mode perm.
func (d Dir) write(name string, b []byte, perm os.FileMode) error {
	path := d.file(name)
	f, err := os.CreateTemp(d.path, "."+name+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	done := false
	defer func() {
		if !done {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(perm); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(b); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("write %s: fsync: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	done = true
	return d.syncDir()
}

func (d Dir) syncDir() error {
	f, err := os.Open(d.path)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", d.path, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", d.path, err)
	}
	return nil
}

// lock creates the directory if needed and takes an exclusive flock of its
// lock file, waiting up to lockTimeout. Every read-modify-write of the
// ledger and the revocations file (and the first writes of the key and
// grid.pub) happens under it. flock(2) locks belong to an open file
// description, so it also excludes other goroutines of this process.
func (d Dir) lock() (unlock func(), err error) {
	if err := d.ensureDir(); err != nil {
		return nil, err
	}
	path := d.file(lockFile)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	deadline := time.Now().Add(lockTimeout)
	wait := time.Millisecond
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if time.Now().After(deadline) {
			f.Close()
			return nil, fmt.Errorf("lock %s: held by another process for more than %v", path, lockTimeout)
		}
		time.Sleep(wait)
		wait = min(2*wait, 20*time.Millisecond)
	}
	return func() {
		syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}
