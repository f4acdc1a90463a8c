package rpcbridge

import (
	"bytes"
	"io"
	"net"
	"reflect"
	"testing"
	"time"
)

func seedInfo() Info {
	return Info{Name: "data/1", ID: "bafyex", Size: 5000000, ChunkSize: 1 << 20, Chunks: 5,
		Time: 1700000000000000000, Origin: "12D3KooWEx", Local: true, Pinned: true}
}

func FuzzDecodeHeader(f *testing.F) {
	f.Add(appendHeader(nil, FrameStat, 10))
	f.Add(appendHeader(nil, FrameData, MaxFrameBody))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1, 0, 0, 0})
	f.Add([]byte{0, 0, 0, 0, 1, 1, 0, 0})
	f.Add([]byte{0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := parseHeader(b)
		if err != nil {
			return
		}
		if h.Len > MaxFrameBody {
			t.Fatalf("accepted length %d", h.Len)
		}
		if got := appendHeader(nil, h.Type, int(h.Len)); !bytes.Equal(got, b[:HeaderSize]) {
			t.Fatalf("re-encoded %x, want %x", got, b[:HeaderSize])
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(appendHello(nil, 1))
	f.Add(appendHello(nil, 0xffffffff))
	f.Add([]byte("OMST\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := decodeHello(b)
		if err != nil {
			return
		}
		if got := appendHello(nil, v); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

func FuzzDecodePutReq(f *testing.F) {
	f.Add(appendPutReq(nil, "a/b", 0))
	f.Add(appendPutReq(nil, "", 1<<20))
	f.Add([]byte{0, 0, 0, 5, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, cs, err := decodePutReq(b)
		if err != nil {
			return
		}
		if got := appendPutReq(nil, name, cs); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

func FuzzDecodePutFileReq(f *testing.F) {
	f.Add(appendPutFileReq(nil, "a/b", 0, "/tmp/x"))
	f.Add(appendPutFileReq(nil, "x", 4096, ""))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, cs, path, err := decodePutFileReq(b)
		if err != nil {
			return
		}
		if got := appendPutFileReq(nil, name, cs, path); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

func FuzzDecodeNameReq(f *testing.F) {
	f.Add(appendNameReq(nil, "data/1"))
	f.Add(appendNameReq(nil, ""))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, err := decodeNameReq(b)
		if err != nil {
			return
		}
		if got := appendNameReq(nil, name); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

func FuzzDecodeGetFileReq(f *testing.F) {
	f.Add(appendGetFileReq(nil, "data/1", "/tmp/out"))
	f.Fuzz(func(t *testing.T, b []byte) {
		name, path, err := decodeGetFileReq(b)
		if err != nil {
			return
		}
		if got := appendGetFileReq(nil, name, path); !bytes.Equal(got, b) {
			t.Fatalf("re-encoded %x, want %x", got, b)
		}
	})
}

func FuzzDecodeInfo(f *testing.F) {
	in := seedInfo()
	f.Add(appendInfo(nil, &in))
	f.Add(appendInfo(nil, &Info{}))
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := decodeInfo(b)
		if err != nil {
			return
		}
		enc := appendInfo(nil, &in)
		if len(enc) != len(b) || len(enc) != infoLen(&in) {
			t.Fatalf("re-encoded to %d bytes, from %d", len(enc), len(b))
		}
		if back, err := decodeInfo(enc); err != nil || back != in {
			t.Fatalf("round trip: %+v %v", back, err)
		}
		// only the reserved flag bits may differ
		if !bytes.Equal(enc[:len(enc)-4], b[:len(b)-4]) || enc[len(enc)-1]&3 != b[len(b)-1]&3 {
			t.Fatalf("re-encoded %x, want %x", enc, b)
		}
	})
}

func FuzzDecodeListing(f *testing.F) {
	in := seedInfo()
	f.Add(appendListing(nil, []Info{in, {Name: "b"}}))
	f.Add(appendListing(nil, nil))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		infos, err := decodeListing(nil, b)
		if err != nil {
			return
		}
		enc := appendListing(nil, infos)
		if len(enc) != len(b) {
			t.Fatalf("re-encoded to %d bytes, from %d", len(enc), len(b))
		}
		back, err := decodeListing(nil, enc)
		if err != nil || len(back) != len(infos) || (len(infos) > 0 && !reflect.DeepEqual(back, infos)) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

func FuzzDecodeError(f *testing.F) {
	f.Add(appendError(nil, CodeNotFound, `stat "x": not found`))
	f.Add(appendError(nil, 0, ""))
	f.Add(appendError(nil, 1000, "future code"))
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeError(b)
		if err != nil {
			return
		}
		if e == nil || e.Code == 0 {
			t.Fatal("decoded an error without a code")
		}
		if b[0]|b[1]|b[2]|b[3] != 0 && len(e.Message) <= maxMessageLen {
			if got := appendError(nil, e.Code, e.Message); !bytes.Equal(got, b) {
				t.Fatalf("re-encoded %x, want %x", got, b)
			}
		}
	})
}

// fuzzBackend never touches the file system.
type fuzzBackend struct{ *memBackend }

// FuzzServerConn feeds arbitrary bytes to a server connection: it must
// never panic nor hang.
func FuzzServerConn(f *testing.F) {
	hello := append(appendHeader(nil, FrameHello, 8), appendHello(nil, 1)...)
	frame := func(t FrameType, body []byte) []byte { return append(appendHeader(nil, t, len(body)), body...) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	f.Add(cat(hello, frame(FrameStat, appendNameReq(nil, "x"))))
	f.Add(cat(hello, frame(FramePut, appendPutReq(nil, "x", 0)), frame(FrameData, []byte("abc")), frame(FrameData, nil),
		frame(FrameGet, appendNameReq(nil, "x")), frame(FrameList, appendNameReq(nil, "")), frame(FrameStatus, nil)))
	f.Add(cat(hello, frame(FramePut, appendPutReq(nil, "x", 0)), frame(FrameData, []byte("abc")), frame(FrameAbort, nil),
		frame(FrameRemove, appendNameReq(nil, "x"))))
	f.Add(cat(hello, frame(FramePutFile, appendPutFileReq(nil, "y", 0, "/p")), frame(FrameGetFile, appendGetFileReq(nil, "y", "/q"))))
	f.Add(cat(hello, []byte{0, 0, 0, 1, 0x77, 0, 0, 0, 1}))
	// Version 8: GET_FILE answered with PROGRESS frames; a PROGRESS sent to
	// the daemon is malformed.
	hello8 := append(appendHeader(nil, FrameHello, 8), appendHello(nil, ProgressVersion)...)
	f.Add(cat(hello8, frame(FramePut, appendPutReq(nil, "y", 0)), frame(FrameData, []byte("abc")), frame(FrameData, nil),
		frame(FrameGetFile, appendGetFileReq(nil, "y", "/dev/null"))))
	f.Add(cat(hello8, frame(FrameProgress, appendProgress(nil, 1))))
	m := newMem()
	s := NewServer(fuzzBackend{m}, ServerOptions{IOTimeout: time.Second, IdleTimeout: time.Second})
	f.Fuzz(func(t *testing.T, in []byte) {
		cli, srv := net.Pipe()
		s.wg.Add(1)
		done := make(chan struct{})
		go func() { s.serveConn(srv); close(done) }()
		go io.Copy(io.Discard, cli)
		cli.SetWriteDeadline(time.Now().Add(2 * time.Second))
		cli.Write(in)
		cli.Close()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("handler did not return")
		}
	})
}

func FuzzDecodePreheatReq(f *testing.F) {
	f.Add(appendPreheatReq(nil, "a/b", []string{"site-a", "site-b"}))
	f.Add(appendPreheatReq(nil, "a/b", nil))
	f.Add([]byte{0, 0, 0, 1, 'x', 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		name, sites, err := decodePreheatReq(b)
		if err != nil {
			return
		}
		if len(sites) > maxPreheatSites || !bytes.Equal(appendPreheatReq(nil, name, sites), b) {
			t.Fatal("PREHEAT body not canonical or over its limits")
		}
	})
}
