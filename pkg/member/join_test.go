package member_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	msmux "github.com/multiformats/go-multistream"

	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/gridstore"
	"github.com/omst-project/omst/pkg/member"
)

// joinStream opens a join stream from o to p on the connection there is
// (no dial), the protocol agreed before it returns: the server's handler
// has the stream.
func joinStream(ctx context.Context, o host.Host, p peer.ID) (network.Stream, error) {
	s, err := o.Network().NewStream(network.WithNoDial(ctx, "join test"), p)
	if err != nil {
		return nil, err
	}
	if err := s.SetProtocol(member.JoinProto); err != nil {
		s.Reset()
		return nil, err
	}
	if err := msmux.SelectProtoOrFail(member.JoinProto, s); err != nil {
		s.Reset()
		return nil, err
	}
	return s, nil
}

// halfLived is the material of a member whose certificate is past half its
// life (renewable).
func (g *testGrid) halfLived(t *testing.T, role grid.Role) func(peer.ID) member.Material {
	return func(p peer.ID) member.Material {
		now := time.Now()
		return member.Material{GridKey: g.key.Public(), Cert: g.cert(t, p, role, now.Add(-50*time.Minute), now.Add(10*time.Minute))}
	}
}

// TestSilentJoinStreams: outsiders that open join streams and send
// nothing on them (ten each, reopened as they close) keep no member from
// renewing, and keep no connection of theirs open past the timeout. A
// second join stream of a peer that is not a member is refused at once.
func TestSilentJoinStreams(t *testing.T) {
	g := newGrid(t)
	const timeout = time.Second
	root := start(t, "tcp", member.Config{Issuer: g, Timeout: timeout}, g.member(t, grid.RoleClient))
	up := func() []peer.ID { return []peer.ID{root.h.ID()} }
	w := start(t, "tcp", member.Config{Up: up, Timeout: timeout}, g.halfLived(t, grid.RoleWorker))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := read(ctx, w.h, root.h); err != nil {
		t.Fatal(err)
	}

	var outs []host.Host
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 3 {
		o := outsider(t, "tcp")
		if err := o.Connect(ctx, peer.AddrInfo{ID: root.h.ID(), Addrs: root.h.Addrs()}); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, o)
		for range 10 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					s, err := joinStream(ctx, o, root.h.ID())
					if err != nil {
						return // the connection is gone
					}
					_, _ = io.Copy(io.Discard, s) // until the root closes it
					s.Reset()
				}
			}()
		}
	}
	defer func() { close(stop); wg.Wait() }()
	time.Sleep(100 * time.Millisecond) // the streams reach the root's handler

	// A second request of an outsider's, sent in full, is refused at once.
	o := outs[0]
	if s, err := joinStream(ctx, o, root.h.ID()); err == nil {
		tok, _ := g.key.NewToken(grid.RoleWorker, []string{"x/"}, time.Now(), time.Hour, time.Hour)
		text, _ := g.key.Sign(tok)
		s.Write(member.JoinProtoRequest(o.ID(), text))
		s.CloseWrite()
		b, _ := io.ReadAll(s)
		if err := member.DecodeJoinAnswer(b); !errors.Is(err, member.ErrRefused) || !strings.Contains(err.Error(), "one join request at a time") {
			t.Errorf("an outsider's second join stream: %v", err)
		}
	}

	// The member renews meanwhile.
	old, _ := w.adm.Cert()
	if _, err := w.adm.Renew(ctx); err != nil {
		t.Fatalf("a member's renewal while outsiders hold silent join streams: %v", err)
	}
	if c, _ := w.adm.Cert(); c.Serial == old.Serial {
		t.Fatal("not renewed")
	}

	// And every outsider is cut off at the timeout (plus the sweep's
	// tick), silent streams or not.
	deadline := time.Now().Add(4 * timeout)
	for _, o := range outs {
		for root.h.Network().Connectedness(o.ID()) == network.Connected {
			if time.Now().After(deadline) {
				t.Fatalf("an outsider holding silent join streams is still connected %v after it connected", 4*timeout)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// rootWithLedger starts a root whose issuer is a real ledger (in a fresh
// home); it returns the node and the ledger.
func rootWithLedger(t *testing.T, timeout time.Duration) (node, gridstore.Dir) {
	d := gridstore.Open(filepath.Join(t.TempDir(), "root"))
	root := start(t, "tcp", member.Config{Issuer: d, Timeout: timeout}, func(p peer.ID) member.Material {
		if _, _, err := d.Init(p, time.Now(), 24*time.Hour); err != nil {
			t.Fatal(err)
		}
		m, err := d.Material()
		if err != nil {
			t.Fatal(err)
		}
		return member.Material{GridKey: m.Pub, Cert: m.Cert}
	})
	return root, d
}

// admitted is the material of a peer admitted by the ledger issued ago,
// for life.
func admitted(t *testing.T, d gridstore.Dir, role grid.Role, prefixes []string, ago, life time.Duration) func(peer.ID) member.Material {
	return func(p peer.ID) member.Material {
		text, err := d.Admit(p, role, prefixes, life, time.Now().Add(-ago))
		if err != nil {
			t.Fatal(err)
		}
		pub, cert, _, err := grid.ParseCertText(text)
		if err != nil {
			t.Fatal(err)
		}
		return member.Material{GridKey: pub, Cert: cert}
	}
}

func ledgerEntries(t *testing.T, d gridstore.Dir) int {
	b, err := os.ReadFile(filepath.Join(d.Path(), "ledger.json"))
	if err != nil {
		t.Fatal(err)
	}
	var l struct{ Members []json.RawMessage }
	if err := json.Unmarshal(b, &l); err != nil {
		t.Fatal(err)
	}
	return len(l.Members)
}

// TestRenewalFlood: a member that forwards renewals of another member's
// certificate, again and again, gets the one renewal there is (and soon a
// refusal for the rate), never a new certificate: the ledger does not
// grow. A renewal of the renewal is refused (half its life), and an
// outsider's renewal is refused.
func TestRenewalFlood(t *testing.T) {
	const timeout = time.Second
	root, d := rootWithLedger(t, timeout)
	up := func() []peer.ID { return []peer.ID{root.h.ID()} }
	w := start(t, "tcp", member.Config{Up: up, Timeout: timeout}, admitted(t, d, grid.RoleWorker, []string{"w/"}, 40*time.Minute, time.Hour))
	m := start(t, "tcp", member.Config{Up: up, Timeout: timeout}, admitted(t, d, grid.RoleWorker, []string{"m/"}, 0, time.Hour))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, n := range []node{w, m} {
		if _, err := read(ctx, n.h, root.h); err != nil {
			t.Fatal(err)
		}
	}
	oldCert := w.adm.CertBytes()
	renewed, err := w.adm.Renew(ctx)
	if err != nil {
		t.Fatal(err)
	}
	before := ledgerEntries(t, d)
	var same, busy int
	for i := range 40 {
		b, err := m.adm.RenewFor(ctx, root.h.ID(), w.h.ID(), oldCert)
		switch {
		case err == nil && string(b) == string(renewed):
			same++
		case errors.Is(err, member.ErrRefused) && strings.Contains(err.Error(), "busy"):
			busy++
		default:
			t.Fatalf("forwarded renewal %d: %v (a new certificate: %v)", i, err, err == nil)
		}
	}
	if after := ledgerEntries(t, d); after != before {
		t.Fatalf("the ledger grew from %d to %d certificates under a renewal flood", before, after)
	}
	if same == 0 || busy == 0 {
		t.Fatalf("%d answered with the renewal there is, %d refused for the rate: want both", same, busy)
	}
	// The renewal is not renewed before half its life, by anyone.
	if _, err := w.adm.Renew(ctx); err == nil || !strings.Contains(err.Error(), "half its life") {
		t.Fatalf("a fresh certificate renewed: %v", err)
	}
	// An outsider asks for a renewal of its own: refused.
	o := start(t, "tcp", member.Config{Timeout: timeout}, nil)
	if err := o.h.Connect(ctx, peer.AddrInfo{ID: root.h.ID(), Addrs: root.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	if _, err := o.adm.RenewFor(ctx, root.h.ID(), o.h.ID(), oldCert); err == nil || !strings.Contains(err.Error(), "not an admitted member") {
		t.Fatalf("an outsider's renewal: %v", err)
	}
}
