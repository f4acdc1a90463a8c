package node

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// BenchmarkLocalFile compares the two ways a file reaches a real daemon and
// leaves it, on one daemon, both in every iteration in alternating order,
// reported as metrics of their own (path-s/op, fd-s/op, and the ratio
// fd/path); the benchmark's own ns/op is meaningless (its timer is stopped):
//   - path: the daemon opens the path itself (PUT_FILE, GET_FILE: what
//     clients before protocol version 5 sent, now only for the daemon's
//     own user);
//   - fd: the client opens the file and passes its descriptor (PUT_FD,
//     GET_TO_FD: what the CLI and the clients send now).
//
// A put stores a file of fresh bytes each time (no chunk is deduplicated);
// a get writes a blob already in the cache into a new file. The size is
// OMST_BENCH_SIZE bytes (default 256 MiB).
//
//	go test ./pkg/node -run '^$' -bench LocalFile -benchtime 6x -count 3
func BenchmarkLocalFile(b *testing.B) {
	size := int64(256 << 20)
	if s := os.Getenv("OMST_BENCH_SIZE"); s != "" {
		fmt.Sscan(s, &size)
	}
	dir := b.TempDir()
	home := filepath.Join(dir, "home")
	ctx := context.Background()
	n, err := Start(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, NoDHT: true})
	if err != nil {
		b.Fatal(err)
	}
	defer n.Close()
	c, err := rpcbridge.Dial(SocketPath(home))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	in := filepath.Join(dir, "in")
	buf := make([]byte, size)
	seed := uint64(time.Now().UnixNano())
	fresh := func() {
		seed++
		r := rand.NewChaCha8([32]byte{byte(seed), byte(seed >> 8), byte(seed >> 16), byte(seed >> 24)})
		r.Read(buf)
		if err := os.WriteFile(in, buf, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	fresh()
	if _, err := c.PutFile(ctx, "bench/get", in, rpcbridge.PutOptions{}); err != nil {
		b.Fatal(err)
	}
	out := filepath.Join(dir, "out")
	put := func(how string, i int) (time.Duration, error) {
		fresh()
		name := fmt.Sprintf("bench/put-%s-%d", how, i)
		t0 := time.Now()
		var err error
		if how == "path" {
			err = rawPathRequest(SocketPath(home), 0x11, putFileBody(name, in))
		} else {
			_, err = c.PutFile(ctx, name, in, rpcbridge.PutOptions{})
		}
		d := time.Since(t0)
		if err == nil {
			err = c.Remove(ctx, name)
		}
		return d, err
	}
	get := func(how string, _ int) (time.Duration, error) {
		// Free as many page-cache pages as the get will write: on a VM,
		// writing memory the guest never touched is several times slower
		// than reusing freed pages (design/MACHINE.md).
		os.WriteFile(out, buf, 0o644)
		os.Remove(out)
		t0 := time.Now()
		var err error
		if how == "path" {
			err = rawPathRequest(SocketPath(home), 0x13, getFileBody("bench/get", out))
		} else {
			_, err = c.GetFile(ctx, "bench/get", out)
		}
		d := time.Since(t0)
		os.Remove(out)
		return d, err
	}
	for _, op := range []struct {
		name string
		do   func(how string, i int) (time.Duration, error)
	}{{"put", put}, {"get", get}} {
		b.Run("op="+op.name, func(b *testing.B) {
			// Both ways in every iteration, in alternating order; each
			// reported as its own metric: the median seconds, the MB/s
			// at that median, and the median of the iterations' fd/path
			// ratios (the pairs share the machine's state of the moment).
			var took [2][]float64
			var ratios []float64
			hows := [2]string{"path", "fd"}
			i := 0
			for b.Loop() {
				var pair [2]float64
				for k := range 2 {
					w := (i + k) % 2
					b.StopTimer()
					d, err := op.do(hows[w], i)
					if err != nil {
						b.Fatal(err)
					}
					pair[w] = d.Seconds()
					took[w] = append(took[w], d.Seconds())
					b.StartTimer()
				}
				ratios = append(ratios, pair[1]/pair[0])
				i++
			}
			for w, how := range hows {
				m := median(took[w])
				b.ReportMetric(m, how+"-s/op")
				b.ReportMetric(float64(size)/m/1e6, how+"-MB/s")
			}
			b.ReportMetric(median(ratios), "fd/path")
		})
	}
}

// median returns the median of xs (sorted in place).
func median(xs []float64) float64 {
	sort.Float64s(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

func appendStr(dst []byte, s string) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(s)))
	return append(dst, s...)
}

func putFileBody(name, path string) []byte {
	return appendStr(binary.BigEndian.AppendUint32(appendStr(nil, name), 0), path)
}

func getFileBody(name, path string) []byte { return appendStr(appendStr(nil, name), path) }

// rawPathRequest sends one PUT_FILE (0x11) or GET_FILE (0x13) frame, as a
// client before protocol version 5 did, and waits for INFO.
func rawPathRequest(sock string, t byte, body []byte) error {
	conn, err := net.Dial("unix", sock)
	if err != nil {
		return err
	}
	defer conn.Close()
	frame := func(t byte, body []byte) []byte {
		return append(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), t, 0, 0, 0), body...)
	}
	read := func() (byte, []byte, error) {
		var h [8]byte
		if _, err := io.ReadFull(conn, h[:]); err != nil {
			return 0, nil, err
		}
		b := make([]byte, binary.BigEndian.Uint32(h[:]))
		_, err := io.ReadFull(conn, b)
		return h[4], b, err
	}
	if _, err := conn.Write(frame(0x01, []byte{'O', 'M', 'S', 'T', 0, 0, 0, 4})); err != nil {
		return err
	}
	if _, _, err := read(); err != nil {
		return err
	}
	if _, err := conn.Write(frame(t, body)); err != nil {
		return err
	}
	typ, b, err := read()
	if err != nil {
		return err
	}
	if typ != 0x31 {
		return fmt.Errorf("reply 0x%02x: %q", typ, b)
	}
	return nil
}
