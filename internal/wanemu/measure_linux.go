package wanemu

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"slices"
	"time"
)

// RTT is a round-trip time measurement: 1-byte TCP ping-pongs over one
// connection with Nagle off.
type RTT struct {
	Connect          time.Duration // the TCP handshake (one round trip)
	Min, Median, Max time.Duration
	Samples          int
	From, To         string
}

func (r RTT) String() string {
	return fmt.Sprintf("%s -> %s: rtt min %.1f ms, median %.1f ms, max %.1f ms (%d samples; connect %.1f ms)",
		r.From, r.To, ms(r.Min), ms(r.Median), ms(r.Max), r.Samples, ms(r.Connect))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Throughput is a bulk TCP transfer measurement, in one direction, counted
// at the receiver after a warm-up (slow start excluded).
type Throughput struct {
	From, To string
	Bytes    int64         // received after the warm-up
	Elapsed  time.Duration // from the end of the warm-up to the last byte
	Warmup   time.Duration
}

// Rate is the measured rate in bits per second.
func (t Throughput) Rate() float64 {
	if t.Elapsed <= 0 {
		return 0
	}
	return float64(t.Bytes) * 8 / t.Elapsed.Seconds()
}

func (t Throughput) String() string {
	return fmt.Sprintf("%s -> %s: %.1f Mbit/s (%d MB in %.2f s after %v warm-up)",
		t.From, t.To, t.Rate()/1e6, t.Bytes/1e6, t.Elapsed.Seconds(), t.Warmup)
}

// listenOn opens a listener on ip:0 in host h's namespace.
func listenOn(h Host, ip netip.Addr) (net.Listener, error) {
	return ListenIn(h.Netns, net.JoinHostPort(ip.String(), "0"))
}

// MeasureRTT measures the round trip from host from to host to's data IP
// with n ping-pongs.
func (e *Emulator) MeasureRTT(from, to Host, n int) (RTT, error) {
	res := RTT{From: from.Name, To: to.Name}
	ln, err := listenOn(to, to.IP)
	if err != nil {
		return res, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = io.Copy(c, c)
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	start := time.Now()
	c, err := DialIn(from.Netns, net.JoinHostPort(to.IP.String(), port), 10*time.Second)
	if err != nil {
		return res, err
	}
	defer c.Close()
	res.Connect = time.Since(start)
	_ = c.SetDeadline(time.Now().Add(time.Duration(n)*time.Second + 10*time.Second))
	buf := []byte{0}
	var samples []time.Duration
	for i := 0; i < n; i++ {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			return res, err
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			return res, err
		}
		samples = append(samples, time.Since(t0))
	}
	slices.Sort(samples)
	res.Samples = len(samples)
	if len(samples) > 0 {
		res.Min, res.Median, res.Max = samples[0], samples[len(samples)/2], samples[len(samples)-1]
	}
	return res, nil
}

// MeasureThroughput sends as fast as TCP allows from host from to host to's
// data IP for d, and reports the rate the receiver saw after warm-up.
func (e *Emulator) MeasureThroughput(from, to Host, d, warmup time.Duration) (Throughput, error) {
	res := Throughput{From: from.Name, To: to.Name, Warmup: warmup}
	ln, err := listenOn(to, to.IP)
	if err != nil {
		return res, err
	}
	defer ln.Close()
	type recvResult struct {
		t   Throughput
		err error
	}
	got := make(chan recvResult, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- recvResult{err: err}
			return
		}
		defer c.Close()
		_ = c.SetReadDeadline(time.Now().Add(d + warmup + 60*time.Second))
		buf := make([]byte, 256<<10)
		var total, warmBytes int64
		var first, warmAt, last time.Time
		for {
			n, err := c.Read(buf)
			if n > 0 {
				now := time.Now()
				if first.IsZero() {
					first = now
				}
				total += int64(n)
				last = now
				if warmAt.IsZero() && now.Sub(first) >= warmup {
					warmAt, warmBytes = now, total
				}
			}
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				got <- recvResult{err: err}
				return
			}
		}
		if warmAt.IsZero() {
			got <- recvResult{err: fmt.Errorf("transfer shorter than the %v warm-up", warmup)}
			return
		}
		r := res
		r.Bytes, r.Elapsed = total-warmBytes, last.Sub(warmAt)
		got <- recvResult{t: r}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	c, err := DialIn(from.Netns, net.JoinHostPort(to.IP.String(), port), 10*time.Second)
	if err != nil {
		return res, err
	}
	defer c.Close()
	buf := make([]byte, 256<<10)
	end := time.Now().Add(warmup + d)
	_ = c.SetWriteDeadline(end.Add(30 * time.Second))
	for time.Now().Before(end) {
		if _, err := c.Write(buf); err != nil {
			return res, fmt.Errorf("send: %w", err)
		}
	}
	_ = c.(*net.TCPConn).CloseWrite()
	select {
	case r := <-got:
		return r.t, r.err
	case <-time.After(60 * time.Second):
		return res, errors.New("receiver did not finish")
	}
}
