package bulk

// What the libp2p path costs against a plain TCP connection on loopback:
// BenchmarkWire moves b.N MiB over k connections or streams at once, in
// 256 KiB writes read with a 64 KiB buffer (as the fetch server and
// client do). docs/protocol.md ("The bulk path") has the figures.
//
//	go test -run '^$' -bench Wire -benchtime 2000x ./pkg/transfer/internal/bulk

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"io"
	"math/big"
	"net"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/security/noise"

	"github.com/omst-project/omst/internal/p2ptest"
)

// pair is one way of carrying bytes: w's bytes come out of r.
type pair struct {
	w io.WriteCloser
	r io.Reader
}

func BenchmarkWire(b *testing.B) {
	for _, k := range []int{1, 4} {
		b.Run(name("tcp", k), func(b *testing.B) { run(b, k, tcpPair(b, nil)) })
		b.Run(name("tcp-aes256gcm", k), func(b *testing.B) {
			key := make([]byte, KeyLen)
			rand.Read(key)
			run(b, k, tcpPair(b, func(c net.Conn, dialer bool) (io.ReadWriteCloser, error) {
				sc, err := newSealedConn(c, key, dialer)
				return sc, err
			}))
		})
		b.Run(name("tcp-tls13", k), func(b *testing.B) { run(b, k, tlsPair(b)) })
		b.Run(name("libp2p-tls-yamux-streams", k), func(b *testing.B) {
			src, dst := p2ptest.NewHost(b), p2ptest.NewHost(b)
			run(b, k, streamPair(b, src, dst))
		})
		b.Run(name("libp2p-noise-yamux-streams", k), func(b *testing.B) {
			src := p2ptest.NewHost(b, libp2p.Security(noise.ID, noise.New))
			dst := p2ptest.NewHost(b, libp2p.Security(noise.ID, noise.New))
			run(b, k, streamPair(b, src, dst))
		})
		if k > 1 {
			b.Run(name("libp2p-tls-yamux-conns", k), func(b *testing.B) {
				run(b, k, func() pair { return streamPair(b, p2ptest.NewHost(b), p2ptest.NewHost(b))() })
			})
		}
	}
}

// cpuTime is this process's CPU time so far (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func name(s string, k int) string {
	return s + "-" + string(rune('0'+k))
}

// run moves b.N MiB over k pairs from newPair, in parallel.
func run(b *testing.B, k int, newPair func() pair) {
	pairs := make([]pair, k)
	for i := range pairs {
		pairs[i] = newPair()
	}
	buf := make([]byte, 256<<10)
	b.SetBytes(1 << 20)
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() {
		// CPU per byte, both ends together: on a loaded machine a steadier
		// measure of what each layer costs than the rate.
		b.ReportMetric((cpuTime()-cpu0).Seconds()/(float64(b.N)/1024), "cpu-s/GiB")
	}()
	var wg sync.WaitGroup
	for i, p := range pairs {
		n := int64(b.N/k) << 20
		if i == 0 {
			n += int64(b.N%k) << 20
		}
		want := n
		wg.Go(func() {
			defer p.w.Close()
			for n > 0 {
				m := min(n, int64(len(buf)))
				if _, err := p.w.Write(buf[:m]); err != nil {
					b.Error(err)
					return
				}
				n -= m
			}
		})
		wg.Go(func() {
			rb := make([]byte, 64<<10)
			got := int64(0)
			for {
				m, err := p.r.Read(rb)
				got += int64(m)
				if err != nil {
					break
				}
			}
			if got != want {
				b.Errorf("read %d bytes, want %d", got, want)
			}
		})
	}
	wg.Wait()
}

// tcpPair makes pairs of loopback TCP connections, wrapped by wrap.
func tcpPair(b *testing.B, wrap func(net.Conn, bool) (io.ReadWriteCloser, error)) func() pair {
	return func() pair {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		acc := make(chan net.Conn, 1)
		go func() {
			c, _ := l.Accept()
			acc <- c
		}()
		d, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			b.Fatal(err)
		}
		a := <-acc
		b.Cleanup(func() { d.Close(); a.Close() })
		var w io.WriteCloser = d
		var r io.Reader = a
		if wrap != nil {
			if w, err = wrap(d, true); err != nil {
				b.Fatal(err)
			}
			if r, err = wrap(a, false); err != nil {
				b.Fatal(err)
			}
		}
		return pair{w, r}
	}
}

// tlsPair makes TLS 1.3 connections over loopback TCP (Go's crypto/tls,
// AES-128-GCM or the suite it prefers on this CPU).
func tlsPair(b *testing.B) func() pair {
	cert := selfSigned(b)
	return func() pair {
		l, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
		if err != nil {
			b.Fatal(err)
		}
		defer l.Close()
		acc := make(chan net.Conn, 1)
		go func() {
			c, _ := l.Accept()
			_ = c.(*tls.Conn).Handshake()
			acc <- c
		}()
		d, err := tls.Dial("tcp", l.Addr().String(), &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
		if err != nil {
			b.Fatal(err)
		}
		a := <-acc
		b.Cleanup(func() { d.Close(); a.Close() })
		return pair{d, a}
	}
}

// streamPair makes libp2p streams from src to dst over one connection.
func streamPair(b *testing.B, src, dst host.Host) func() pair {
	acc := make(chan network.Stream, 16)
	dst.SetStreamHandler("/bench/1", func(s network.Stream) { acc <- s })
	if err := src.Connect(context.Background(), peer.AddrInfo{ID: dst.ID(), Addrs: dst.Addrs()}); err != nil {
		b.Fatal(err)
	}
	return func() pair {
		s, err := src.NewStream(context.Background(), dst.ID(), "/bench/1")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := s.Write([]byte{0}); err != nil { // the stream reaches dst's handler
			b.Fatal(err)
		}
		r := <-acc
		var one [1]byte
		if _, err := io.ReadFull(r, one[:]); err != nil {
			b.Fatal(err)
		}
		return pair{s, r}
	}
}

func selfSigned(b *testing.B) tls.Certificate {
	b.Helper()
	// A throwaway certificate; the benchmark does not verify it.
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		b.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		b.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
