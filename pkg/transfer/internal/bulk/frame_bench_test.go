package bulk

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"io"
	"net"
	"strconv"
	"testing"
)

// BenchmarkAEADFrame: AES-256-GCM's Seal and Open of one frame's
// plaintext, in place, by frame size, the cipher alone (no socket): what a
// larger frame than maxFrame would save per byte (cpu-s/GiB: Seal and
// Open together, one end each).
//
//	go test -run '^$' -bench AEADFrame -count 6 ./pkg/transfer/internal/bulk
func BenchmarkAEADFrame(b *testing.B) {
	key := make([]byte, KeyLen)
	rand.Read(key)
	blk, err := aes.NewCipher(key)
	if err != nil {
		b.Fatal(err)
	}
	aead, err := cipher.NewGCM(blk)
	if err != nil {
		b.Fatal(err)
	}
	for _, size := range []int{16 << 10, 64 << 10, 256 << 10, 1 << 20} {
		b.Run(strconv.Itoa(size>>10)+"KiB", func(b *testing.B) {
			buf := make([]byte, frameHeaderLen+size+aead.Overhead())
			rand.Read(buf[frameHeaderLen : frameHeaderLen+size])
			var nonce [12]byte
			b.SetBytes(int64(size))
			b.ReportAllocs()
			cpu0 := cpuTime()
			defer func() {
				// CPU per byte: steadier than the rate on a loaded machine.
				b.ReportMetric((cpuTime()-cpu0).Seconds()/(float64(b.N)*float64(size)/(1<<30)), "cpu-s/GiB")
			}()
			for i := 0; b.Loop(); i++ {
				nonce[11] = byte(i)
				ct := aead.Seal(buf[frameHeaderLen:frameHeaderLen], nonce[:], buf[frameHeaderLen:frameHeaderLen+size], buf[:frameHeaderLen])
				if _, err := aead.Open(ct[:0], nonce[:], ct, buf[:frameHeaderLen]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// bufConn is a net.Conn whose writes are read back from a buffer (one
// direction of a connection, in memory).
type bufConn struct {
	net.Conn
	b bytes.Buffer
}

func (c *bufConn) Read(p []byte) (int, error)  { return c.b.Read(p) }
func (c *bufConn) Write(p []byte) (int, error) { return c.b.Write(p) }

// TestSealedConnNoAllocs: sealing and opening a frame allocate nothing
// once a connection's buffers are there (each frame's nonce allocated 16
// bytes at both ends before).
func TestSealedConnNoAllocs(t *testing.T) {
	key := make([]byte, KeyLen)
	rand.Read(key)
	c := &bufConn{}
	w, err := newSealedConn(c, key, true)
	if err != nil {
		t.Fatal(err)
	}
	r, err := newSealedConn(c, key, false)
	if err != nil {
		t.Fatal(err)
	}
	r.rdir = w.wdir // one direction, read back at the same end
	msg := make([]byte, 2*maxFrame+100)
	rand.Read(msg)
	got := make([]byte, len(msg))
	allocs := testing.AllocsPerRun(50, func() {
		if _, err := w.Write(msg); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(r, got); err != nil {
			t.Fatal(err)
		}
	})
	if !bytes.Equal(got, msg) {
		t.Fatal("bytes changed on the way")
	}
	if allocs != 0 {
		t.Fatalf("%v allocations per 3 frames written and read, want 0", allocs)
	}
}
