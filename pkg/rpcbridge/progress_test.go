package rpcbridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// --- shared test vectors of version 8 (docs/rpcbridge.md §11) -----------------

// progressVectorsPath holds the vectors of version 8, apart from frames.txt
// and frames-v7.txt so that a client of version 7 checks all of those.
const progressVectorsPath = "../../testdata/rpcbridge/frames-v8.txt"

func progressVectorCases() []vector {
	valid := []struct {
		name string
		t    FrameType
		fs   []kv
	}{
		{"hello_v8", FrameHello, []kv{{"magic", Magic}, {"version", "8"}}},
		{"progress_zero", FrameProgress, []kv{{"done", "0"}}},
		{"progress", FrameProgress, []kv{{"done", "5000000"}}},
		{"progress_big", FrameProgress, []kv{{"done", "1099511627776"}}},
	}
	var out []vector
	for _, c := range valid {
		frame, err := encodeFrom(c.t, c.fs)
		if err != nil {
			panic(fmt.Sprintf("vector %s: %v", c.name, err))
		}
		out = append(out, vector{name: c.name, typ: c.t, frame: frame, fields: c.fs})
	}
	frame := func(t FrameType, b []byte) []byte { return append(appendHeader(nil, t, len(b)), b...) }
	invalid := []vector{
		{name: "progress_short", why: "PROGRESS body of 4 bytes", frame: frame(FrameProgress, []byte{0, 0, 0, 1})},
		{name: "progress_trailing", why: "a byte after the u64", frame: frame(FrameProgress, append(appendProgress(nil, 1), 0))},
		{name: "progress_empty", why: "PROGRESS with an empty body", frame: frame(FrameProgress, nil)},
	}
	return append(out, invalid...)
}

// TestVectorsV8 checks frames-v8.txt as TestVectors
// does frames.txt (TestVectors -update writes it: vectorFiles).
func TestVectorsV8(t *testing.T) {
	want := formatVectorsAs(progressVectorCases(), "protocol version 8: PROGRESS")
	data, err := os.ReadFile(progressVectorsPath)
	if err != nil {
		t.Fatalf("%v (regenerate with -update)", err)
	}
	if !bytes.Equal(data, want) {
		t.Errorf("%s differs from what the Go encoders produce: regenerate with -update", progressVectorsPath)
	}
	vs, err := parseVectors(data)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range vs {
		typ, fs, err := checkFrame(v.frame)
		if !v.valid() {
			if err == nil {
				t.Errorf("%s (%s): accepted", v.name, v.why)
			}
			continue
		}
		if err != nil || typ != v.typ || fmt.Sprint(fs) != fmt.Sprint(v.fields) {
			t.Errorf("%s: %v %v %v", v.name, typ, fs, err)
		}
	}
}

func FuzzDecodeProgress(f *testing.F) {
	f.Add(appendProgress(nil, 0))
	f.Add(appendProgress(nil, 5000000))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeProgress(b)
		if err != nil {
			if !errors.Is(err, errMalformed) {
				t.Fatalf("error not malformed: %v", err)
			}
			return
		}
		if !bytes.Equal(appendProgress(nil, d), b) {
			t.Fatal("PROGRESS not canonical")
		}
		// The client's rule never panics and refuses what exceeds the size.
		if checkProgress(d, 0, d) != nil || (d > 0 && checkProgress(d, 0, d-1) == nil) || (d > 0 && checkProgress(d-1, d, d) == nil) {
			t.Fatalf("checkProgress wrong at %d", d)
		}
	})
}

// TestProgressDue: a frame when the bytes grew and ProgressEvery passed
// since the last one; none when nothing moved, however long.
func TestProgressDue(t *testing.T) {
	t0 := time.Unix(1700000000, 0)
	for _, c := range []struct {
		done, last uint64
		after      time.Duration
		want       bool
	}{
		{10, 0, 100 * time.Millisecond, true},
		{10, 0, 99 * time.Millisecond, false},
		{10, 10, time.Hour, false},
		{11, 10, time.Second, true},
		{9, 10, time.Second, false}, // never back
	} {
		if got := progressDue(c.done, c.last, t0, t0.Add(c.after), ProgressEvery); got != c.want {
			t.Errorf("done %d last %d after %v: %v, want %v", c.done, c.last, c.after, got, c.want)
		}
	}
}

// TestProgressSenderPaced: with an injected clock and ticker, the sender
// writes a frame per tick that found more bytes ProgressEvery after the
// last frame, and none for ticks that found nothing new or came early.
func TestProgressSenderPaced(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	// The loop reads the clock, then the bytes, once per tick: the test
	// hands each over, so every tick sees exactly its step.
	nows, dones, ticks := make(chan time.Time), make(chan uint64), make(chan time.Time)
	var mu sync.Mutex
	ps := &progressSender{mu: &mu, fc: newFrameConn(a, time.Second),
		done: func() uint64 { return <-dones },
		now:  func() time.Time { return <-nows },
		tick: func(time.Duration) (<-chan time.Time, func()) { return ticks, func() {} }}
	got := make(chan uint64, 16)
	go func() {
		fc := newFrameConn(b, 0)
		for {
			h, body, err := readReply(fc)
			if err != nil {
				close(got)
				return
			}
			d, err := decodeProgress(body)
			if h.Type != FrameProgress || err != nil {
				t.Errorf("%v %v", h.Type, err)
			}
			got <- d
		}
	}()
	now := time.Unix(1700000000, 0)
	ps.start(now)
	step := func(d time.Duration, bytes uint64) {
		now = now.Add(d)
		ticks <- now
		nows <- now
		dones <- bytes
	}
	step(100*time.Millisecond, 10) // sent
	step(50*time.Millisecond, 20)  // too early
	step(50*time.Millisecond, 30)  // sent
	step(500*time.Millisecond, 30) // nothing new
	step(100*time.Millisecond, 40) // sent
	if err := ps.stop(); err != nil {
		t.Fatal(err)
	}
	a.Close()
	var frames []uint64
	for d := range got {
		frames = append(frames, d)
	}
	if fmt.Sprint(frames) != "[10 30 40]" {
		t.Fatalf("frames %v, want [10 30 40]", frames)
	}
}

// slowFileBackend is memBackend as a FileBackend whose GetToFile writes
// the blob in pieces, pausing between them, and reports its progress.
type slowFileBackend struct {
	*memBackend
	pieces int
	pause  time.Duration
}

func (b *slowFileBackend) GetToFile(ctx context.Context, name string, f *os.File, started func(Info, ProgressFunc) error) (Info, error) {
	mb, err := b.lookup(name)
	if err != nil {
		return Info{}, err
	}
	var done atomic.Uint64
	if err := started(mb.info, done.Load); err != nil {
		return Info{}, err
	}
	step := (len(mb.data) + b.pieces - 1) / b.pieces
	for off := 0; off < len(mb.data); off += step {
		end := min(off+step, len(mb.data))
		if _, err := f.WriteAt(mb.data[off:end], int64(off)); err != nil {
			return Info{}, err
		}
		done.Store(uint64(end))
		select {
		case <-time.After(b.pause):
		case <-ctx.Done():
			return Info{}, ctx.Err()
		}
	}
	if err := f.Truncate(int64(len(mb.data))); err != nil {
		return Info{}, err
	}
	return mb.info, nil
}

// TestGetToFDProgress: a version 8 client's GetFileWith gets PROGRESS
// frames while the daemon writes the file, counting up, at most every
// ProgressEvery, the last of every byte; the file is right. A client of
// version 7 gets INFO then END, no PROGRESS (its hook is called once, with
// every byte, by the Go client).
func TestGetToFDProgress(t *testing.T) {
	m := newMem()
	data := randBytes(4<<20, 3)
	m.store("big", data, PutOptions{})
	ts := startServer(t, &slowFileBackend{memBackend: m, pieces: 8, pause: 60 * time.Millisecond}, ServerOptions{})
	c := dial(t, ts.path)
	dir := t.TempDir()
	var reports []uint64
	var at []time.Time
	start := time.Now()
	info, err := c.GetFileWith(context.Background(), "big", filepath.Join(dir, "out"), GetHooks{
		Progress: func(d uint64) { reports = append(reports, d); at = append(at, time.Now()) },
	})
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if got, _ := os.ReadFile(filepath.Join(dir, "out")); !bytes.Equal(got, data) {
		t.Fatal("file differs")
	}
	t.Logf("%d reports in %v: %v", len(reports), took, reports)
	if len(reports) < 3 || reports[len(reports)-1] != info.Size {
		t.Fatalf("reports %v: want at least 3, the last %d", reports, info.Size)
	}
	if max := int(took/ProgressEvery) + 2; len(reports) > max {
		t.Fatalf("%d reports in %v: more than %d", len(reports), took, max)
	}
	for i := 1; i < len(reports); i++ {
		if reports[i] < reports[i-1] {
			t.Fatalf("reports went back: %v", reports)
		}
		// Intermediate frames are paced (the last one is not); allow the
		// scheduler some slack.
		if i < len(reports)-1 && at[i].Sub(at[i-1]) < ProgressEvery/2 {
			t.Fatalf("reports %d and %d %v apart", i-1, i, at[i].Sub(at[i-1]))
		}
	}

	// The raw reply of version 8: INFO, PROGRESS..., the last of every byte, END.
	r := rawDial(t, ts.path, true)
	f, err := os.Create(filepath.Join(dir, "raw"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sendWithFD(t, r.c, FrameGetToFD, appendNameReq(nil, "big"), f)
	types := replyTypes(t, r)
	if types[0] != FrameInfo || types[len(types)-1] != FrameEnd || types[len(types)-2] != FrameProgress {
		t.Fatalf("version 8 reply %v", types)
	}

	// Version 7: INFO, END.
	old := rawDial(t, ts.path, false)
	old.send(FrameHello, appendHello(nil, 7))
	if typ, body := old.recv(); typ != FrameHello || !bytes.Equal(body, appendHello(nil, 7)) {
		t.Fatalf("hello %v %x", typ, body)
	}
	sendWithFD(t, old.c, FrameGetToFD, appendNameReq(nil, "big"), f)
	if types := replyTypes(t, old); fmt.Sprint(types) != fmt.Sprint([]FrameType{FrameInfo, FrameEnd}) {
		t.Fatalf("version 7 reply %v, want INFO END", types)
	}
}

// TestGetFileProgress: GET_FILE (the daemon's own user) of version 8 is
// answered as GET_TO_FD is (INFO, PROGRESS..., END); of version 7 with one
// INFO once the file is complete.
func TestGetFileProgress(t *testing.T) {
	m := newMem()
	data := randBytes(1<<20, 4)
	m.store("f", data, PutOptions{})
	ts := startServer(t, &slowFileBackend{memBackend: m, pieces: 4, pause: 60 * time.Millisecond}, ServerOptions{})
	dir := t.TempDir()
	r := rawDial(t, ts.path, true)
	r.send(FrameGetFile, appendGetFileReq(nil, "f", filepath.Join(dir, "v8")))
	types := replyTypes(t, r)
	if types[0] != FrameInfo || types[len(types)-1] != FrameEnd || len(types) < 4 {
		t.Fatalf("version 8 reply %v", types)
	}
	old := rawDial(t, ts.path, false)
	old.send(FrameHello, appendHello(nil, 7))
	old.recv()
	old.send(FrameGetFile, appendGetFileReq(nil, "f", filepath.Join(dir, "v7")))
	if typ, _ := old.recv(); typ != FrameInfo {
		t.Fatalf("version 7 reply %v, want INFO", typ)
	}
	for _, n := range []string{"v8", "v7"} {
		if got, _ := os.ReadFile(filepath.Join(dir, n)); !bytes.Equal(got, data) {
			t.Fatalf("%s differs", n)
		}
	}
}

// sendWithFD writes a request frame with f's descriptor attached.
func sendWithFD(t *testing.T, c net.Conn, typ FrameType, body []byte, f *os.File) {
	t.Helper()
	frame := append(appendHeader(nil, typ, len(body)), body...)
	if _, _, err := c.(*net.UnixConn).WriteMsgUnix(frame, syscall.UnixRights(int(f.Fd())), nil); err != nil {
		t.Fatal(err)
	}
}

// replyTypes reads a reply to its END or ERROR and returns its frame types.
func replyTypes(t *testing.T, r *raw) []FrameType {
	t.Helper()
	var types []FrameType
	for {
		typ, body := r.recv()
		types = append(types, typ)
		switch typ {
		case FrameEnd:
			return types
		case FrameError:
			e, _ := decodeError(body)
			t.Fatalf("error %v after %v", e, types)
		case FrameProgress:
			if _, err := decodeProgress(body); err != nil {
				t.Fatal(err)
			}
		}
		if len(types) > 1000 {
			t.Fatal("no END")
		}
	}
}

// TestGetFileFromVersion7Daemon: the Go client of version 8 against a
// daemon of version 7 (a scripted one: HELLO 7, then INFO and END for a
// GET_TO_FD): the get succeeds, the Progress hook is called once, with
// every byte, at END.
func TestGetFileFromVersion7Daemon(t *testing.T) {
	path := filepath.Join(t.TempDir(), "old.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	data := []byte("written by an old daemon")
	in := Info{Name: "old/x", ID: "bafyold", Size: uint64(len(data)), ChunkSize: 1 << 20, Chunks: 1, Origin: "12D3KooWOld"}
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		uc := c.(*net.UnixConn)
		fc := newFrameConn(c, 5*time.Second)
		if h, _, err := readReply(fc); err != nil || h.Type != FrameHello {
			served <- fmt.Errorf("hello: %v %v", h.Type, err)
			return
		}
		fc.frame(FrameHello, appendHello(nil, 7))
		fc.flush()
		// The request with its descriptor: read it with recvmsg.
		buf, oob := make([]byte, 256), make([]byte, 64)
		n, oobn, _, _, err := uc.ReadMsgUnix(buf, oob)
		if err != nil || n < HeaderSize || FrameType(buf[4]) != FrameGetToFD {
			served <- fmt.Errorf("request: %d bytes %v", n, err)
			return
		}
		msgs, _ := syscall.ParseSocketControlMessage(oob[:oobn])
		fds, err := syscall.ParseUnixRights(&msgs[0])
		if err != nil || len(fds) != 1 {
			served <- fmt.Errorf("descriptor: %v", err)
			return
		}
		f := os.NewFile(uintptr(fds[0]), "passed")
		f.WriteAt(data, 0)
		f.Close()
		off := fc.begin(FrameInfo)
		fc.wbuf = appendInfo(fc.wbuf, &in)
		fc.end(off)
		fc.frame(FrameEnd, nil)
		served <- fc.flush()
	}()
	c, err := Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var reports []uint64
	out := filepath.Join(t.TempDir(), "out")
	if _, err := c.GetFileWith(context.Background(), "old/x", out, GetHooks{Progress: func(d uint64) { reports = append(reports, d) }}); err != nil {
		t.Fatal(err)
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); !bytes.Equal(got, data) {
		t.Fatalf("file %q", got)
	}
	if fmt.Sprint(reports) != fmt.Sprint([]uint64{in.Size}) {
		t.Fatalf("progress %v, want one report of %d", reports, in.Size)
	}
}
