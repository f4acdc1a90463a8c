package wanemu

import (
	"context"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	nfqueue "github.com/florianl/go-nfqueue/v2"
	"github.com/mdlayher/netlink"
)

// delayer holds every packet of one NFQUEUE queue for a fixed delay, then
// accepts it. With one delay per queue, packets leave in arrival order, so
// one batch verdict on the newest due packet releases every due packet.
type delayer struct {
	q      DelayQueue
	nf     *nfqueue.Nfqueue
	cancel context.CancelFunc
	done   chan struct{}

	mu      sync.Mutex
	pending []heldPacket // arrival order
	wake    chan struct{}

	held, verdictErrs, recvErrs atomic.Uint64
}

type heldPacket struct {
	id  uint32
	due time.Time
}

// startDelayer binds queue q.Num in namespace q.Netns and starts serving it.
func startDelayer(q DelayQueue) (*delayer, error) {
	nsf, err := os.Open(NetnsPath(q.Netns))
	if err != nil {
		return nil, fmt.Errorf("delayer: %w", err)
	}
	defer nsf.Close()
	nf, err := nfqueue.Open(&nfqueue.Config{
		NetNS:       int(nsf.Fd()),
		NfQueue:     q.Num,
		MaxQueueLen: q.QueueLen(),
		// Metadata only: the delayer needs the packet ID, not its bytes.
		Copymode: nfqueue.NfQnlCopyMeta,
		// GSO: hand over GSO packets whole instead of segmenting them.
		Flags:        nfqueue.NfQaCfgFlagGSO,
		AfFamily:     2, // AF_INET
		WriteTimeout: time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: open nfqueue %d in %s: %v", ErrUnsupported, q.Num, q.Netns, err)
	}
	// A burst of arrivals must not overflow the netlink socket; if it does,
	// keep going (the kernel drops the packets, as a full router would).
	_ = nf.Con.SetReadBuffer(16 << 20)
	_ = nf.SetOption(netlink.NoENOBUFS, true)
	ctx, cancel := context.WithCancel(context.Background())
	d := &delayer{q: q, nf: nf, cancel: cancel, done: make(chan struct{}), wake: make(chan struct{}, 1)}
	err = nf.RegisterWithErrorFunc(ctx, d.arrive, func(err error) int {
		if ctx.Err() != nil {
			return 1
		}
		// ENOBUFS and timeouts: count them and keep receiving.
		d.recvErrs.Add(1)
		return 0
	})
	if err != nil {
		cancel()
		nf.Close()
		return nil, fmt.Errorf("%w: bind nfqueue %d in %s: %v", ErrUnsupported, q.Num, q.Netns, err)
	}
	go d.release(ctx)
	return d, nil
}

// arrive records a queued packet. It runs on the receive goroutine.
func (d *delayer) arrive(a nfqueue.Attribute) int {
	if a.PacketID == nil {
		return 0
	}
	d.held.Add(1)
	d.mu.Lock()
	d.pending = append(d.pending, heldPacket{id: *a.PacketID, due: time.Now().Add(d.q.Delay)})
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
	return 0
}

// release accepts packets as they fall due.
func (d *delayer) release(ctx context.Context) {
	defer close(d.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		d.mu.Lock()
		now := time.Now()
		n := 0
		for n < len(d.pending) && !d.pending[n].due.After(now) {
			n++
		}
		var lastID uint32
		var next time.Time
		if n > 0 {
			lastID = d.pending[n-1].id
			d.pending = d.pending[n:]
		}
		if len(d.pending) > 0 {
			next = d.pending[0].due
		}
		d.mu.Unlock()
		if n > 0 {
			if err := d.nf.SetVerdictBatch(lastID, nfqueue.NfAccept); err != nil {
				d.verdictErrs.Add(1)
			}
			continue
		}
		var wait <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			wait = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-d.wake:
		case <-wait:
		}
		timer.Stop() // Go >= 1.23: no stale value is left to drain
	}
}

// close stops the delayer and releases its socket (and with it its
// reference to the namespace). Packets still held are dropped by the kernel.
func (d *delayer) close() {
	d.cancel()
	<-d.done
	d.nf.Close()
}

func (d *delayer) String() string {
	return fmt.Sprintf("delayer %s/%s q%d %v: %d packets, %d verdict errors, %d receive errors",
		d.q.Netns, d.q.Iface, d.q.Num, d.q.Delay, d.held.Load(), d.verdictErrs.Load(), d.recvErrs.Load())
}
