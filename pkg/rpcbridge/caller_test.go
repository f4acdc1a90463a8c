package rpcbridge

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/omst-project/omst/internal/asuser"
	"github.com/omst-project/omst/pkg/blob"
)

// nobody is the unprivileged user the tests act as.
const nobody = 65534

// asUser runs f as another user (internal/asuser); it needs root.
func asUser(t *testing.T, uid, gid int, f func()) {
	t.Helper()
	if !asuser.Available() {
		t.Skip("needs root to act as another user")
	}
	if err := asuser.Run(uid, gid, func() error { f(); return nil }); err != nil {
		t.Fatal(err)
	}
}

// openServer starts a server whose socket other users may reach (its
// directory 0755, the socket 0666).
func openServer(t *testing.T, m Backend) *testServer {
	ts := startServer(t, m, ServerOptions{})
	if err := os.Chmod(filepath.Dir(ts.path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ts.path, 0o666); err != nil {
		t.Fatal(err)
	}
	return ts
}

// sharedDir returns a directory every user may write to (mode 1777, like
// /tmp).
func sharedDir(t *testing.T) string {
	d, err := os.MkdirTemp("", "rbshared")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	if err := os.Chmod(d, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}
	return d
}

type callerRecorder struct {
	*memBackend
	mu      sync.Mutex
	callers []Caller
}

func (c *callerRecorder) Stat(ctx context.Context, name string) (Info, error) {
	cl, ok := CallerOf(ctx)
	if !ok {
		return Info{}, errors.New("no caller in the request's context")
	}
	c.mu.Lock()
	c.callers = append(c.callers, cl)
	c.mu.Unlock()
	return c.memBackend.Stat(ctx, name)
}

// TestCallerFromKernel: the backend learns who calls from the kernel, not
// from anything the client says.
func TestCallerFromKernel(t *testing.T) {
	m := &callerRecorder{memBackend: newMem()}
	m.store("x", []byte("x"), PutOptions{})
	ts := openServer(t, m)
	ctx := context.Background()
	c := dial(t, ts.path)
	if _, err := c.Stat(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	asUser(t, nobody, nobody, func() {
		c, err := Dial(ts.path)
		if err != nil {
			panic(err)
		}
		defer c.Close()
		if _, err := c.Stat(ctx, "x"); err != nil {
			panic(err)
		}
	})
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.callers) != 2 {
		t.Fatalf("callers %+v", m.callers)
	}
	me, other := m.callers[0], m.callers[1]
	if !me.Known || !me.Daemon || me.UID != uint32(os.Geteuid()) || me.PID != int32(os.Getpid()) || !me.Trusted() {
		t.Errorf("same-user caller %+v", me)
	}
	if !other.Known || other.Daemon || other.UID != nobody || other.GID != nobody || other.Trusted() {
		t.Errorf("other caller %+v", other)
	}
}

// TestPathsOnlyForDaemonUser: PUT_FILE and GET_FILE make the daemon open a
// path with its own rights: a caller of another uid is refused (FORBIDDEN)
// before the backend sees anything, so it can neither read a file only the
// daemon's user may read nor create one where only that user may write.
func TestPathsOnlyForDaemonUser(t *testing.T) {
	m := newMem()
	m.store("loot/p", []byte("payload"), PutOptions{})
	ts := openServer(t, m)
	private := t.TempDir() // 0700, root's
	secret := filepath.Join(private, "shadow")
	if err := os.WriteFile(secret, []byte("root:secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := filepath.Join(private, "planted")
	before := m.callCount()
	asUser(t, nobody, nobody, func() {
		r := rawDialNoTest(ts.path)
		defer r.Close()
		for _, req := range []struct {
			t    FrameType
			body []byte
		}{
			{FramePutFile, appendPutFileReq(nil, "loot/shadow", 0, secret)},
			{FrameGetFile, appendGetFileReq(nil, "loot/p", planted)},
		} {
			typ, body := rawCall(r, req.t, req.body)
			if typ != FrameError {
				panic(req.t.String() + " was served to another user")
			}
			e, _ := decodeError(body)
			if e == nil || e.Code != CodeForbidden || !strings.Contains(e.Message, "pass it") {
				panic(req.t.String() + ": " + e.Error())
			}
		}
	})
	if m.callCount() != before {
		t.Error("the backend was called for a refused request")
	}
	if _, ok := m.blobs["loot/shadow"]; ok {
		t.Error("the secret was stored")
	}
	if _, err := os.Lstat(planted); !os.IsNotExist(err) {
		t.Errorf("a file was created in root's directory: %v", err)
	}
	// The daemon's own user still may.
	c := dial(t, ts.path)
	r := rawDial(t, ts.path, true)
	if typ, _ := rawCall(r.c, FrameGetFile, appendGetFileReq(nil, "loot/p", planted)); typ != FrameInfo {
		t.Fatalf("GET_FILE by the daemon's user: %v", typ)
	}
	// Version 8: INFO when the blob is found, END once the file is written.
	if types := replyTypes(t, r); types[len(types)-1] != FrameEnd {
		t.Fatalf("GET_FILE reply %v", types)
	}
	if b, _ := os.ReadFile(planted); string(b) != "payload" {
		t.Fatalf("GET_FILE wrote %q", b)
	}
	_ = c
}

// TestDescriptorsAsOtherUser: a caller of another uid puts its own file and
// gets into its own directory through descriptors; what it may not open,
// it cannot have the daemon open either.
func TestDescriptorsAsOtherUser(t *testing.T) {
	m := newMem()
	m.store("shared/in", []byte("shared bytes"), PutOptions{})
	ts := openServer(t, m)
	home := sharedDir(t)
	private := t.TempDir()
	secret := filepath.Join(private, "shadow")
	os.WriteFile(secret, []byte("root:secret"), 0o600)
	ctx := context.Background()
	var putErr, getErr, secretErr, privErr error
	asUser(t, nobody, nobody, func() {
		c, err := Dial(ts.path)
		if err != nil {
			panic(err)
		}
		defer c.Close()
		mine := filepath.Join(home, "mine")
		if err := os.WriteFile(mine, []byte("my result"), 0o600); err != nil {
			panic(err)
		}
		_, putErr = c.PutFile(ctx, "results/mine", mine, PutOptions{})
		_, getErr = c.GetFile(ctx, "shared/in", filepath.Join(home, "got"))
		_, secretErr = c.PutFile(ctx, "loot/shadow", secret, PutOptions{})
		_, privErr = c.GetFile(ctx, "shared/in", filepath.Join(private, "planted"))
	})
	if putErr != nil || getErr != nil {
		t.Fatalf("own files: put %v, get %v", putErr, getErr)
	}
	if b, _ := m.lookup("results/mine"); string(b.data) != "my result" {
		t.Errorf("stored %q", b.data)
	}
	st, err := os.Stat(filepath.Join(home, "got"))
	if err != nil || st.Sys().(*syscall.Stat_t).Uid != nobody {
		t.Errorf("the got file: %v, %v (want it owned by the caller)", st, err)
	}
	if !errors.Is(secretErr, os.ErrPermission) || !strings.Contains(secretErr.Error(), secret) {
		t.Errorf("put of root's file: %v", secretErr)
	}
	if !errors.Is(privErr, os.ErrPermission) {
		t.Errorf("get into root's directory: %v", privErr)
	}
	if _, ok := m.blobs["loot/shadow"]; ok {
		t.Error("the secret was stored")
	}
	if _, err := os.Lstat(filepath.Join(private, "planted")); !os.IsNotExist(err) {
		t.Errorf("created in root's directory: %v", err)
	}
}

// rawDialNoTest is rawDial for a goroutine that may not call t.Fatal.
func rawDialNoTest(path string) net.Conn {
	c, err := net.Dial("unix", path)
	if err != nil {
		panic(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if typ, _ := rawCall(c, FrameHello, appendHello(nil, ProtocolVersion)); typ != FrameHello {
		panic("no HELLO")
	}
	return c
}

// rawCall sends one frame (with fds attached, if any) and reads one reply
// frame.
func rawCall(c net.Conn, t FrameType, body []byte, fds ...int) (FrameType, []byte) {
	frame := append(appendHeader(nil, t, len(body)), body...)
	if len(fds) > 0 {
		if _, _, err := c.(*net.UnixConn).WriteMsgUnix(frame, syscall.UnixRights(fds...), nil); err != nil {
			panic(err)
		}
	} else if _, err := c.Write(frame); err != nil {
		panic(err)
	}
	return rawRecv(c)
}

func rawRecv(c net.Conn) (FrameType, []byte) {
	var h [HeaderSize]byte
	if _, err := io.ReadFull(c, h[:]); err != nil {
		return 0, []byte(err.Error())
	}
	hd, err := parseHeader(h[:])
	if err != nil {
		panic(err)
	}
	body := make([]byte, hd.Len)
	if _, err := io.ReadFull(c, body); err != nil {
		panic(err)
	}
	return hd.Type, body
}

func errCode(t *testing.T, typ FrameType, body []byte) (Code, string) {
	t.Helper()
	if typ != FrameError {
		t.Fatalf("got %v, want ERROR", typ)
	}
	e, err := decodeError(body)
	if err != nil {
		t.Fatal(err)
	}
	return e.Code, e.Message
}

// TestDescriptorRules: PUT_FD and GET_TO_FD take exactly one descriptor,
// open the right way; anything else is refused with a reason, and no
// descriptor a client sends stays open in the daemon.
func TestDescriptorRules(t *testing.T) {
	m := newMem()
	m.store("x", []byte("xyz"), PutOptions{})
	ts := startServer(t, m, ServerOptions{})
	dir := t.TempDir()
	ro, _ := os.Create(filepath.Join(dir, "ro"))
	ro.Close()
	ro, _ = os.Open(filepath.Join(dir, "ro"))
	defer ro.Close()
	wo, _ := os.OpenFile(filepath.Join(dir, "wo"), os.O_WRONLY|os.O_CREATE, 0o600)
	defer wo.Close()
	dfd, _ := os.Open(dir)
	defer dfd.Close()
	pfd, err := unix.Open(filepath.Join(dir, "ro"), unix.O_PATH, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pfd)
	base := openFDs(t)

	for _, tc := range []struct {
		name  string
		t     FrameType
		body  []byte
		fds   []int
		code  Code
		want  string
		close bool // a malformed request: the connection is closed
	}{
		{"put_fd without a descriptor", FramePutFD, appendPutReq(nil, "y", 0), nil, CodeBadRequest, "0 descriptors", true},
		{"put_fd with two", FramePutFD, appendPutReq(nil, "y", 0), []int{int(ro.Fd()), int(ro.Fd())}, CodeBadRequest, "2 descriptors", true},
		{"stat with one", FrameStat, appendNameReq(nil, "x"), []int{int(ro.Fd())}, CodeBadRequest, "1 descriptors, want 0", true},
		{"get_to_fd into a read-only file", FrameGetToFD, appendNameReq(nil, "x"), []int{int(ro.Fd())}, CodeBadRequest, "not open for writing", false},
		{"put_fd from a write-only file", FramePutFD, appendPutReq(nil, "y", 0), []int{int(wo.Fd())}, CodeBadRequest, "not open for reading", false},
		{"put_fd of a directory", FramePutFD, appendPutReq(nil, "y", 0), []int{int(dfd.Fd())}, CodeBadRequest, "directory", false},
		{"get_to_fd into an O_PATH descriptor", FrameGetToFD, appendNameReq(nil, "x"), []int{pfd}, CodeBadRequest, "O_PATH", false},
		{"put_fd with a bad name", FramePutFD, appendPutReq(nil, "/y", 0), []int{int(ro.Fd())}, CodeInvalidName, "", false},
	} {
		r := rawDial(t, ts.path, true)
		typ, body := rawCall(r.c, tc.t, tc.body, tc.fds...)
		code, msg := errCode(t, typ, body)
		if code != tc.code || !strings.Contains(msg, tc.want) {
			t.Errorf("%s: %v %q, want %v %q", tc.name, code, msg, tc.code, tc.want)
		}
		if !tc.close {
			// Still in step.
			if typ, _ := rawCall(r.c, FrameStat, appendNameReq(nil, "x")); typ != FrameInfo {
				t.Errorf("%s: connection out of step (%v)", tc.name, typ)
			}
		}
		r.c.Close()
	}
	if _, ok := m.blobs["y"]; ok {
		t.Error("a refused put stored a name")
	}

	// A flood of descriptors: the daemon keeps none of them.
	r := rawDial(t, ts.path, true)
	many := make([]int, 200)
	for i := range many {
		many[i] = int(ro.Fd())
	}
	typ, body := rawCall(r.c, FrameStat, appendNameReq(nil, "x"), many...)
	if code, _ := errCode(t, typ, body); code != CodeBadRequest {
		t.Errorf("200 descriptors with a STAT: %v", code)
	}
	r.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for openFDs(t) > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := openFDs(t); n > base {
		t.Errorf("%d descriptors open after the requests, %d before", n, base)
	}
}

// TestGetToFDStreams: GET_TO_FD into a pipe delivers the bytes in order; a
// pipe nobody reads blocks the request only until the client hangs up (no
// thread stays blocked in a write), and the caller's descriptor gets its
// flags back.
func TestGetToFDStreams(t *testing.T) {
	m := newMem()
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: more than a pipe holds
	m.store("big", data, PutOptions{})
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan []byte, 1)
	go func() { b, _ := io.ReadAll(pr); got <- b }()
	var started Info
	info, err := c.GetToFD(ctx, "big", pw, GetHooks{Started: func(in Info) { started = in }})
	pw.Close()
	if err != nil || info.Size != uint64(len(data)) || started.Size != info.Size {
		t.Fatalf("GetToFD: %+v %v (started %+v)", info, err, started)
	}
	if b := <-got; !bytes.Equal(b, data) {
		t.Fatalf("pipe reader got %d bytes", len(b))
	}
	pr.Close()

	// Nobody reads: cancelling the client ends the request.
	pr, pw, _ = os.Pipe()
	defer pr.Close()
	defer pw.Close()
	flagsBefore, _ := unix.FcntlInt(pw.Fd(), unix.F_GETFL, 0)
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	if _, err := c.GetToFD(cctx, "big", pw, GetHooks{}); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GetToFD into a stuck pipe: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if fl, _ := unix.FcntlInt(pw.Fd(), unix.F_GETFL, 0); fl == flagsBefore {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if fl, _ := unix.FcntlInt(pw.Fd(), unix.F_GETFL, 0); fl != flagsBefore {
		t.Errorf("descriptor flags %#x after the request, %#x before (the daemon's handler is still in it?)", fl, flagsBefore)
	}
}

// TestPutFDStreams: PUT_FD reads a pipe to its end, and a regular file
// from the descriptor's offset.
func TestPutFDStreams(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	c := dial(t, ts.path)
	ctx := context.Background()
	pr, pw, _ := os.Pipe()
	go func() {
		for range 100 {
			pw.Write(bytes.Repeat([]byte("p"), 10000))
		}
		pw.Close()
	}()
	info, err := c.PutFD(ctx, "piped", pr, PutOptions{})
	pr.Close()
	if err != nil || info.Size != 1000000 {
		t.Fatalf("put from a pipe: %+v %v", info, err)
	}

	// A regular file from its offset; the offset moves.
	p := filepath.Join(t.TempDir(), "f")
	os.WriteFile(p, []byte("headbody"), 0o644)
	f, _ := os.Open(p)
	defer f.Close()
	f.Seek(4, io.SeekStart)
	if info, err := c.PutFD(ctx, "tail", f, PutOptions{}); err != nil || info.Size != 4 {
		t.Fatalf("put from offset 4: %+v %v", info, err)
	}
	if b, _ := m.lookup("tail"); string(b.data) != "body" {
		t.Fatalf("stored %q", b.data)
	}
}

// TestGetFileFIFONoReader: a GET_FILE to a FIFO nobody reads waits for a
// reader only while the request lasts: the client hanging up ends it, and
// no handler stays blocked (the server's Close, in the cleanup, would
// report one that does not stop).
func TestGetFileFIFONoReader(t *testing.T) {
	m := newMem()
	m.store("x", bytes.Repeat([]byte("f"), 1<<20), PutOptions{})
	ts := startServer(t, m, ServerOptions{})
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 20 { // more than a few threads would be stuck if opens blocked for good
		r := rawDial(t, ts.path, true)
		r.send(FrameGetFile, appendGetFileReq(nil, "x", fifo))
		time.Sleep(20 * time.Millisecond)
		r.c.Close()
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ts.srv.mu.Lock()
		n := len(ts.srv.conns)
		ts.srv.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d connections still served 5 s after their clients hung up", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestPutFrom: a put's error names the file once, after the name, and
// keeps its code and sentinel.
func TestPutFrom(t *testing.T) {
	inner := &Error{Code: CodeNoSpace, Message: `put "a/b": ingest "a/b": cache cap full`}
	err := PutFrom(inner, "a/b", "/data/in")
	if got, want := err.Error(), `put "a/b" from /data/in: ingest "a/b": cache cap full`; got != want {
		t.Errorf("message %q, want %q", got, want)
	}
	if !errors.Is(err, blob.ErrNoSpace) || CodeOf(err) != CodeNoSpace {
		t.Errorf("lost its code: %v", CodeOf(err))
	}
	if got := PutFrom(errors.New("connection lost"), "x", "f").Error(); got != `put "x" from f: connection lost` {
		t.Errorf("message %q", got)
	}
}

// TestPutFileDevice: PUT_FILE (the daemon's own user) reads regular files
// and FIFOs only: opening a device may have effects, so it is refused
// unread.
func TestPutFileDevice(t *testing.T) {
	m := newMem()
	ts := startServer(t, m, ServerOptions{})
	r := rawDial(t, ts.path, true)
	typ, body := rawCall(r.c, FramePutFile, appendPutFileReq(nil, "dev", 0, os.DevNull))
	if code, msg := errCode(t, typ, body); code != CodeIO || !strings.Contains(msg, "not a regular file or FIFO") {
		t.Errorf("PUT_FILE of %s: %v %q", os.DevNull, code, msg)
	}
	if _, ok := m.blobs["dev"]; ok {
		t.Error("a device was stored")
	}
}
