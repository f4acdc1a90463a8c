package localfile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// realTemp is t.TempDir() without links (the test's expectations compare
// resolved paths).
func realTemp(t *testing.T) string {
	d, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func writeFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestResolve(t *testing.T) {
	d := realTemp(t)
	os.MkdirAll(filepath.Join(d, "a/b"), 0o755)
	writeFile(t, filepath.Join(d, "a/b/f"), "x")
	os.Symlink("a/b", filepath.Join(d, "lb"))            // relative link to a dir
	os.Symlink(filepath.Join(d, "a/b/f"), d+"/lf")       // absolute link to a file
	os.Symlink("lf", d+"/llf")                           // link to a link
	os.Symlink("missing", d+"/dangling")                 // dangling
	os.Symlink("loop2", d+"/loop1")                      // a loop
	os.Symlink("loop1", d+"/loop2")                      //
	os.Symlink("../b/../../a/b/f", d+"/a/b/../b/dotdot") // ".." after a link

	for _, tc := range []struct{ in, want string }{
		{d + "/a/b/f", d + "/a/b/f"},
		{d + "/lb/f", d + "/a/b/f"},
		{d + "/lf", d + "/a/b/f"},
		{d + "/llf", d + "/a/b/f"},
		{d + "/lb/../b/./f", d + "/a/b/f"},
		{d + "//a///b/f", d + "/a/b/f"},
		{d + "/lb/new", d + "/a/b/new"}, // the last component need not exist
		{d + "/dangling", d + "/missing"},
		{d + "/a/b/dotdot", d + "/a/b/f"},
	} {
		got, err := Resolve(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		in   string
		want error
	}{
		{d + "/loop1", unix.ELOOP},
		{d + "/nodir/f", unix.ENOENT},
		{d + "/a/b/f/g", unix.ENOTDIR},
		{"", unix.ENOENT},
	} {
		if got, err := Resolve(tc.in); !errors.Is(err, tc.want) {
			t.Errorf("Resolve(%q) = %q, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	// Relative paths are taken against the working directory.
	t.Chdir(d + "/a")
	if got, err := Resolve("b/f"); err != nil || got != d+"/a/b/f" {
		t.Errorf("Resolve(b/f) in %s/a = %q, %v", d, got, err)
	}
}

func TestMayFollow(t *testing.T) {
	const me, other, owner = 1000, 2000, 3000
	stickyWW := &unix.Stat_t{Mode: unix.S_IFDIR | unix.S_ISVTX | 0o777, Uid: owner}
	plainWW := &unix.Stat_t{Mode: unix.S_IFDIR | 0o777, Uid: owner}
	stickyPriv := &unix.Stat_t{Mode: unix.S_IFDIR | unix.S_ISVTX | 0o755, Uid: owner}
	for _, tc := range []struct {
		link uint32
		dir  *unix.Stat_t
		want bool
	}{
		{me, stickyWW, true},     // one's own link
		{owner, stickyWW, true},  // the directory owner's link
		{other, stickyWW, false}, // a link planted in /tmp
		{other, plainWW, true},   // not sticky: the kernel follows
		{other, stickyPriv, true},
	} {
		if got := MayFollow(me, &unix.Stat_t{Uid: tc.link}, tc.dir); got != tc.want {
			t.Errorf("MayFollow(link of %d, dir %o of %d) = %v", tc.link, tc.dir.Mode, tc.dir.Uid, got)
		}
	}
}

// plantedTmp makes a sticky world-writable directory (like /tmp) owned by
// root, with a victim file beside it, and returns both; it needs root (to
// give links to another user).
func plantedTmp(t *testing.T) (tmp, victim string) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to plant another user's links")
	}
	d := realTemp(t)
	tmp = filepath.Join(d, "tmp")
	if err := os.Mkdir(tmp, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(tmp, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	victim = filepath.Join(d, "victim")
	writeFile(t, victim, "precious")
	return tmp, victim
}

// TestPlantedLink: a link another user planted in a sticky world-writable
// directory is followed neither to write (the victim keeps its bytes) nor
// to read, not as the last component and not as a directory on the way;
// a link of one's own there is.
func TestPlantedLink(t *testing.T) {
	tmp, victim := plantedTmp(t)
	const attacker = 54321
	plant := func(name, target string) string {
		p := filepath.Join(tmp, name)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
		if err := os.Lchown(p, attacker, attacker); err != nil {
			t.Fatal(err)
		}
		return p
	}
	out := plant("out", victim)
	evilDir := plant("evil", filepath.Dir(victim))
	ctx := context.Background()

	if _, err := Create(ctx, out); !errors.Is(err, ErrUnsafeLink) {
		t.Errorf("Create through a planted link: %v, want ErrUnsafeLink", err)
	}
	if _, err := Create(ctx, evilDir+"/victim"); !errors.Is(err, ErrUnsafeLink) {
		t.Errorf("Create through a planted directory link: %v, want ErrUnsafeLink", err)
	}
	if f, err := OpenRead(ctx, out); !errors.Is(err, ErrUnsafeLink) {
		if f != nil {
			f.Close()
		}
		t.Errorf("OpenRead through a planted link: %v, want ErrUnsafeLink", err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "precious" {
		t.Fatalf("victim now holds %q", b)
	}
	if fi, err := os.Lstat(out); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the planted link was touched: %v %v", fi, err)
	}

	// One's own link in the same directory is followed.
	mine := filepath.Join(tmp, "mine")
	os.Symlink(victim, mine)
	dst, err := Create(ctx, mine)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(dst.File, "new")
	if err := dst.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(victim); string(b) != "new" {
		t.Errorf("own link: target holds %q", b)
	}
}

// TestPlantedFIFO: a FIFO another user made in a sticky world-writable
// directory is not written into.
func TestPlantedFIFO(t *testing.T) {
	tmp, _ := plantedTmp(t)
	p := filepath.Join(tmp, "out")
	if err := unix.Mkfifo(p, 0o666); err != nil {
		t.Fatal(err)
	}
	os.Chown(p, 54321, 54321)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if d, err := Create(ctx, p); !errors.Is(err, ErrUnsafeFIFO) {
		if d != nil {
			d.Abort()
		}
		t.Errorf("Create on a planted FIFO: %v, want ErrUnsafeFIFO", err)
	}
}

func TestCreateRegular(t *testing.T) {
	d := realTemp(t)
	ctx := context.Background()
	old := unix.Umask(0o027)
	defer unix.Umask(old)

	// A new file.
	p := filepath.Join(d, "new")
	dst, err := Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if !dst.Regular || dst.Path != p {
		t.Fatalf("Create(%s) = %+v", p, dst)
	}
	if _, err := os.Stat(p); !os.IsNotExist(err) {
		t.Fatalf("destination visible before Commit: %v", err)
	}
	io.WriteString(dst.File, "hello")
	if err := dst.Commit(); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("new file: %v %v, want mode 0640 (0644 less umask 027)", fi, err)
	}

	// An existing one is replaced atomically (a new inode: a reader of the
	// old one keeps reading the old bytes).
	r, _ := os.Open(p)
	defer r.Close()
	dst, err = Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(dst.File, "world!")
	if b, _ := os.ReadFile(p); string(b) != "hello" {
		t.Fatalf("destination changed before Commit: %q", b)
	}
	if err := dst.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "world!" {
		t.Errorf("after Commit: %q", b)
	}
	if b, _ := io.ReadAll(r); string(b) != "hello" {
		t.Errorf("old inode now reads %q", b)
	}

	// The replacement keeps the replaced file's permission bits, a
	// private file staying private and one wider than the umask keeping
	// its width (0600 and 0664 here, under umask 027), never for a moment
	// more open than the file it replaces.
	for _, perm := range []os.FileMode{0o600, 0o664} {
		os.Chmod(p, perm)
		dst, err = Create(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if fi, _ := dst.File.Stat(); fi.Mode().Perm() != perm {
			t.Errorf("temporary file replacing a %04o file: mode %04o", perm, fi.Mode().Perm())
		}
		io.WriteString(dst.File, "world!")
		if err := dst.Commit(); err != nil {
			t.Fatal(err)
		}
		if fi, _ := os.Stat(p); fi.Mode().Perm() != perm {
			t.Errorf("a %04o file replaced: mode %04o", perm, fi.Mode().Perm())
		}
	}

	// Its group where this process may give it (root: any; else one of
	// its groups other than its own), and as root its owner: a 0640
	// file of group G replaced by a file of the caller's group with
	// mode 0640 let the caller's group read what G's read.
	if g, ok := otherGroup(); ok {
		os.Chmod(p, 0o640)
		if err := os.Chown(p, -1, g); err != nil {
			t.Fatal(err)
		}
		uid := os.Geteuid()
		if uid == 0 {
			uid = 4343
			os.Chown(p, uid, -1)
		}
		dst, err = Create(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(dst.File, "world!")
		if err := dst.Commit(); err != nil {
			t.Fatal(err)
		}
		fi, _ := os.Stat(p)
		sys := fi.Sys().(*syscall.Stat_t)
		if fi.Mode().Perm() != 0o640 || int(sys.Gid) != g || int(sys.Uid) != uid {
			t.Errorf("a 0640 file of uid %d gid %d replaced: mode %04o uid %d gid %d", uid, g, fi.Mode().Perm(), sys.Uid, sys.Gid)
		}
	} else {
		t.Log("no group other than this process's own to give a file: group kept not tested here (TestKeptMode is)")
	}

	// Through a link: the target is replaced, the link stays.
	link := filepath.Join(d, "link")
	os.Symlink("new", link)
	dst, err = Create(ctx, link)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(dst.File, "via link")
	if err := dst.Commit(); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "via link" {
		t.Errorf("target: %q", b)
	}
	if fi, _ := os.Lstat(link); fi.Mode()&os.ModeSymlink == 0 {
		t.Error("the link was replaced")
	}

	// Abort leaves the destination and no temporary file.
	dst, err = Create(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(dst.File, "partial")
	dst.Abort()
	dst.Abort()
	if b, _ := os.ReadFile(p); string(b) != "via link" {
		t.Errorf("after Abort: %q", b)
	}
	ents, _ := os.ReadDir(d)
	for _, e := range ents {
		if strings.Contains(e.Name(), ".omst-") {
			t.Errorf("temporary file left: %s", e.Name())
		}
	}
	if err := dst.Commit(); err != nil {
		t.Errorf("Commit after Abort: %v (want a no-op)", err)
	}

	// A directory is refused.
	if _, err := Create(ctx, d); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("Create(dir) = %v", err)
	}
}

func TestCreateInPlace(t *testing.T) {
	ctx := context.Background()
	dst, err := Create(ctx, os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	if dst.Regular {
		t.Fatal("/dev/null would be replaced")
	}
	if _, err := io.WriteString(dst.File, "gone"); err != nil {
		t.Fatal(err)
	}
	if err := dst.Commit(); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(os.DevNull); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("/dev/null: %v %v", fi, err)
	}

	// A FIFO waits for its reader...
	d := realTemp(t)
	fifo := filepath.Join(d, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- string(b)
	}()
	dst, err = Create(ctx, fifo)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(dst.File, "through")
	dst.Commit()
	if s := <-got; s != "through" {
		t.Errorf("reader got %q", s)
	}

	// ... but no longer than ctx, and the wait is released.
	cctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if _, err := Create(cctx, fifo); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Create on a FIFO nobody reads: %v", err)
	}
	if el := time.Since(start); el > 3*time.Second {
		t.Errorf("took %v", el)
	}
	// The same for reading a FIFO nobody writes.
	fifo2 := filepath.Join(d, "fifo2")
	if err := unix.Mkfifo(fifo2, 0o600); err != nil {
		t.Fatal(err)
	}
	cctx2, cancel2 := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel2()
	if _, err := OpenRead(cctx2, fifo2); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("OpenRead of a FIFO nobody writes: %v", err)
	}
}

func TestOpenRead(t *testing.T) {
	d := realTemp(t)
	p := filepath.Join(d, "f")
	writeFile(t, p, "data")
	os.Symlink("f", d+"/l")
	f, err := OpenRead(context.Background(), d+"/l")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if b, _ := io.ReadAll(f); string(b) != "data" {
		t.Errorf("read %q", b)
	}
	if _, err := OpenRead(context.Background(), d); !errors.Is(err, syscall.EISDIR) {
		t.Errorf("OpenRead(dir) = %v", err)
	}
	if _, err := OpenRead(context.Background(), d+"/missing"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("OpenRead(missing) = %v", err)
	}
}

func TestCheckFD(t *testing.T) {
	d := realTemp(t)
	fd, err := unix.Open(d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := checkFD(fd, d); err != nil {
		t.Errorf("checkFD(own path) = %v", err)
	}
	if err := checkFD(fd, d+"x"); !errors.Is(err, ErrChangedPath) {
		t.Errorf("checkFD(other path) = %v", err)
	}
}

// TestMagicLinks: /dev/stdin and /dev/fd/N name open files through links
// in /proc: they are opened as the kernel resolves them.
func TestMagicLinks(t *testing.T) {
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer pr.Close()
	go func() { io.WriteString(pw, "through the pipe"); pw.Close() }()
	f, err := OpenRead(context.Background(), fmt.Sprintf("/dev/fd/%d", pr.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(f)
	f.Close()
	if string(b) != "through the pipe" {
		t.Errorf("read %q", b)
	}

	out, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	dst, err := Create(context.Background(), fmt.Sprintf("/dev/fd/%d", out.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	if dst.Regular {
		t.Error("a file behind /dev/fd would be replaced, not written")
	}
	io.WriteString(dst.File, "in place")
	dst.Commit()
	if b, _ := os.ReadFile(out.Name()); string(b) != "in place" {
		t.Errorf("wrote %q", b)
	}
}

// TestCommitNew: a get's file committed without replacing: a new path gets
// the bytes; an existing file keeps its own (fs.ErrExist), and no
// temporary file is left beside it.
func TestCommitNew(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	fresh := filepath.Join(dir, "fresh")
	d, err := Create(ctx, fresh)
	if err != nil {
		t.Fatal(err)
	}
	d.File.WriteString("new")
	if err := d.CommitNew(); err != nil {
		t.Fatal(err)
	}
	old := filepath.Join(dir, "old")
	os.WriteFile(old, []byte("mine"), 0o644)
	d, err = Create(ctx, old)
	if err != nil {
		t.Fatal(err)
	}
	d.File.WriteString("theirs")
	if err := d.CommitNew(); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("CommitNew onto a file: %v", err)
	}
	if b, _ := os.ReadFile(old); string(b) != "mine" {
		t.Fatalf("existing file now %q", b)
	}
	if b, _ := os.ReadFile(fresh); string(b) != "new" {
		t.Fatalf("new file %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Fatalf("%d entries in the directory, want 2", len(ents))
	}
}

// openFDs counts this process's open descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	es, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(es)
}

// A FIFO open whose context has ended before the goroutine's open even
// began is still released: each call returns at once and leaves no
// descriptor (and no goroutine) blocked. With one release, a writer's end
// opened before the reader blocked failed (ENXIO) and a reader's came and
// went unseen: the open stayed blocked for good and each call waited 2 s.
func TestFIFOReleasedBeforeItsOpen(t *testing.T) {
	d := realTemp(t)
	fifo := filepath.Join(d, "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	before := openFDs(t)
	for i := range 20 {
		for _, side := range []string{"read", "write"} {
			start := time.Now()
			var err error
			if side == "read" {
				var f *os.File
				if f, err = OpenRead(ctx, fifo); err == nil {
					f.Close()
				}
			} else {
				var dst *Dest
				if dst, err = Create(ctx, fifo); err == nil {
					dst.Abort()
				}
			}
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("%s %d: %v, want the context's cause", side, i, err)
			}
			if took := time.Since(start); took > time.Second {
				t.Fatalf("%s %d took %v: the blocked open was not released", side, i, took)
			}
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for openFDs(t) > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := openFDs(t); n > before {
		t.Fatalf("%d descriptors left open (before %d, now %d)", n-before, before, n)
	}
}

// otherGroup returns a group this process may give a file it owns and that
// is not its own group: any (4242) as root, else a supplementary group.
func otherGroup() (int, bool) {
	if os.Geteuid() == 0 {
		return 4242, true
	}
	gs, _ := os.Getgroups()
	for _, g := range gs {
		if g != os.Getegid() {
			return g, true
		}
	}
	return 0, false
}

// TestKeptMode: a replaced file's bits are kept, less its set-id and
// sticky bits; where its group could not be kept, the group's bits are
// cut to the others'.
func TestKeptMode(t *testing.T) {
	for _, c := range []struct {
		old       uint32
		sameGroup bool
		want      uint32
	}{
		{0o600, true, 0o600},
		{0o640, true, 0o640},
		{0o4755, true, 0o755},
		{0o100664, true, 0o664},
		{0o640, false, 0o600},
		{0o664, false, 0o644},
		{0o674, false, 0o644},
		{0o654, false, 0o644},
		{0o606, false, 0o606},
		{0o661, false, 0o601},
	} {
		if got := KeptMode(c.old, c.sameGroup); got != c.want {
			t.Errorf("KeptMode(%#o, %v) = %#o, want %#o", c.old, c.sameGroup, got, c.want)
		}
	}
}
