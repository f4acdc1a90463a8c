package rpcbridge

import (
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"
)

// Progress of a get into a file (protocol version 8; docs/rpcbridge.md
// §6.15): on a connection of version 8, GET_TO_FD and GET_FILE are answered
// INFO as soon as the blob is found, then PROGRESS frames while its bytes
// are written into the file, the last one saying every byte, then END (or
// ERROR instead of the rest). A client draws its progress bar and summary
// from them: it needs no STAT, no look at the file, no STATUS.
const (
	FrameProgress FrameType = 0x3A // u64 bytes of the blob in the file so far (version 8)
)

// ProgressVersion is the protocol version that brings PROGRESS.
const ProgressVersion = 8

// progressLen is the size of a PROGRESS body.
const progressLen = 8

// ProgressEvery is the least time between two PROGRESS frames of one
// reply; the last one (every byte) is sent whatever the time.
const ProgressEvery = 100 * time.Millisecond

func init() {
	frameNames[FrameProgress] = "PROGRESS"
}

// appendProgress appends a PROGRESS body: u64 bytes done.
func appendProgress(dst []byte, done uint64) []byte { return appendU64(dst, done) }

// decodeProgress decodes a PROGRESS body.
func decodeProgress(b []byte) (uint64, error) {
	if len(b) != progressLen {
		return 0, malformed("PROGRESS body of %d bytes, want %d", len(b), progressLen)
	}
	return binary.BigEndian.Uint64(b), nil
}

// checkProgress is the client's rule for a PROGRESS frame of a reply whose
// INFO said size bytes: it counts up (never back) and never past size.
func checkProgress(done, last, size uint64) error {
	switch {
	case done > size:
		return malformed("PROGRESS of %d bytes for a blob of %d", done, size)
	case done < last:
		return malformed("PROGRESS went back from %d to %d bytes", last, done)
	}
	return nil
}

// progressDue is the server's rule for sending a PROGRESS frame: when the
// bytes done grew since the last frame (sent at lastAt with last bytes) and
// at least every has passed since it. The last frame (done = size) does not
// go through it: it is always sent.
func progressDue(done, last uint64, lastAt, now time.Time, every time.Duration) bool {
	return done > last && now.Sub(lastAt) >= every
}

// ProgressFunc reports how many of a blob's bytes are in the destination
// so far. A backend hands one to GetToFile's started; the server calls it
// from another goroutine while the get goes on, so it must be safe for
// that, and cheap.
type ProgressFunc func() uint64

// progressSender sends the PROGRESS frames of one reply from a goroutine
// of its own: it samples done every ProgressEvery (the clock is injected)
// and writes a frame when progressDue says so. The frames go through fc
// under mu, which the reply's other writes take too.
type progressSender struct {
	mu   *sync.Mutex
	fc   *frameConn
	done ProgressFunc
	now  func() time.Time
	tick func(time.Duration) (<-chan time.Time, func())

	last   uint64
	lastAt time.Time
	werr   atomic.Pointer[error]
	quit   chan struct{}
	ended  chan struct{}
}

// start begins sampling; lastAt is when the INFO went out.
func (p *progressSender) start(lastAt time.Time) {
	p.lastAt = lastAt
	p.quit, p.ended = make(chan struct{}), make(chan struct{})
	go p.loop()
}

func (p *progressSender) loop() {
	defer close(p.ended)
	c, stop := p.tick(ProgressEvery)
	defer stop()
	for {
		select {
		case <-p.quit:
			return
		case <-c:
		}
		now := p.now()
		d := p.done()
		if !progressDue(d, p.last, p.lastAt, now, ProgressEvery) {
			continue
		}
		if err := p.send(d); err != nil {
			p.werr.Store(&err)
			return
		}
		p.last, p.lastAt = d, now
	}
}

// send writes one PROGRESS frame.
func (p *progressSender) send(d uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.fc.frame(FrameProgress, appendProgress(nil, d))
	return p.fc.flush()
}

// stop ends the sampling (if started) and returns the first failed write.
func (p *progressSender) stop() error {
	if p.quit == nil {
		return nil
	}
	close(p.quit)
	<-p.ended
	p.quit = nil
	if e := p.werr.Load(); e != nil {
		return *e
	}
	return nil
}

// realTicker is progressSender.tick outside tests.
func realTicker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}
