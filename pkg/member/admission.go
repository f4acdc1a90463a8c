package member

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
)

// DefaultTimeout is how long a connected peer has to show a valid
// certificate before it is disconnected, and the longest a stream waits
// for its peer's admission.
const DefaultTimeout = 5 * time.Second

// ErrNotMember wraps every refusal of a peer that is not (or no longer) an
// admitted member.
var ErrNotMember = errors.New("not a member")

// Issuer is the root's side of joining: it holds the grid key and the
// ledger (pkg/gridstore.Dir is one).
type Issuer interface {
	// Redeem checks a join token's text and issues a certificate for p,
	// once per token.
	Redeem(token string, p peer.ID, now time.Time) (cert []byte, err error)
	// Renew renews cert, p's still valid certificate: only p's newest,
	// once, not before half its life, from the issuer's record of it
	// (pkg/gridstore.Dir.Renew says how).
	Renew(cert []byte, p peer.ID, now time.Time) ([]byte, error)
}

// Config configures an Admission.
type Config struct {
	// Timeout is DefaultTimeout when zero.
	Timeout time.Duration
	// Now is time.Now when nil.
	Now func() time.Time
	// Logger is slog.Default() when nil.
	Logger *slog.Logger
	// Issuer, on the root only, redeems tokens and renews certificates.
	Issuer Issuer
	// Up returns the peers to forward join requests to (the tree's
	// parents, in order), on every node but the root.
	Up func() []peer.ID
	// OnRevocations is called with a newer revocation list once it is
	// adopted (to keep it on disk).
	OnRevocations func(b []byte)
	// Joining says an open node is about to join (Join): members' HELLOs
	// are then expected, not worth a warning.
	Joining bool
}

// Material is a member's grid material, as pkg/gridstore keeps it.
type Material struct {
	GridKey     ed25519.PublicKey
	Cert        []byte // this node's certificate; nil: none yet
	Revocations []byte // nil: none
}

// Stats are an Admission's counters and state, for status.
type Stats struct {
	Open        bool
	Grid        string
	Role        string
	Prefixes    []string
	CertExpires time.Time
	RevSeq      uint64
	Admitted    int    // peers admitted now
	Refused     uint64 // certificates refused (bad, expired, revoked, other grid)
	Unshown     uint64 // connections closed for showing none in time
	Denied      uint64 // streams reset because their peer was not admitted
	Joins       uint64 // join requests read (then served or refused)
	Issuer      bool   // this node issues certificates (the root)
	// RecordsRejected counts name records refused: unsigned, forged,
	// outside their origin's rights.
	RecordsRejected uint64
	LastRefusal     string
}

// Admission decides which peers are members. It is safe for concurrent
// use.
type Admission struct {
	cfg Config
	log *slog.Logger

	mu    sync.Mutex
	pub   ed25519.PublicKey // nil: open
	grid  grid.ID
	cert  []byte
	self  grid.Cert
	revB  []byte
	revs  *grid.Revocations
	peers map[peer.ID]*peerState
	// revokedPeers: peers seen showing a revoked certificate (which
	// serial, when) and no valid one since; see Revoked.
	revokedPeers map[peer.ID]revokedMark
	// shunned: peers whose connection was closed for showing no valid
	// certificate, and when; this node does not dial them (or wait for
	// them) again for ShunFor, so that an outsider in the DHT's routing
	// table costs a failed stream, not a dial and a timeout each time.
	shunned map[peer.ID]time.Time
	// hints: why a peer may not serve this node (it refused this node's
	// certificate, or it is a member of a closed grid and this node is
	// open), for errors that would otherwise say only "connection
	// failed" or "stream reset". Bounded like shunned.
	hints    map[peer.ID]string
	stats    Stats
	attached *attachment // set by Wrap
}

type revokedMark struct {
	serial uint64
	at     time.Time
}

type peerState struct {
	shown    []byte // the certificate it showed while this node was open
	cert     grid.Cert
	admitted bool
	ready    chan struct{} // closed when admitted
	err      error         // why the last certificate was refused
	// heard is closed once this node's HELLO to the peer was answered
	// (or failed): from then on the peer has admitted this node, if it
	// will, and gives its streams a member's limits.
	heard     chan struct{}
	heardDone bool
}

// New returns an Admission with m's material (a zero Material: open).
func New(cfg Config, m Material) (*Admission, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	a := &Admission{cfg: cfg, log: cfg.Logger, peers: map[peer.ID]*peerState{}, revokedPeers: map[peer.ID]revokedMark{}, shunned: map[peer.ID]time.Time{}, hints: map[peer.ID]string{}}
	if m.GridKey != nil {
		if err := a.setMaterial(m); err != nil {
			return nil, err
		}
	}
	return a, nil
}

// Open reports whether a admits everyone (no grid material).
func (a *Admission) Open() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pub == nil
}

// GridKey returns the grid's public key (nil when open).
func (a *Admission) GridKey() ed25519.PublicKey {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.pub
}

// Cert returns this node's certificate, decoded, and whether it has one.
func (a *Admission) Cert() (grid.Cert, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.self, a.cert != nil
}

// CheckOwn checks this node's own certificate at now (validity and the
// revocation list), as its peers will.
func (a *Admission) CheckOwn(now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cert == nil {
		return fmt.Errorf("no certificate")
	}
	return a.self.Check(a.self.Peer, now, a.revs)
}

// CertBytes returns this node's certificate as issued (nil: none).
func (a *Admission) CertBytes() []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.cert
}

// PeerCert returns the certificate peer p was admitted with, and whether
// p is admitted now (false on an open Admission: no one shows one).
func (a *Admission) PeerCert(p peer.ID) (grid.Cert, bool) { return a.certOf(p) }

// certOf returns p's admitted certificate.
func (a *Admission) certOf(p peer.ID) (grid.Cert, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.peers[p]
	if st == nil || !st.admitted {
		return grid.Cert{}, false
	}
	return st.cert, true
}

// SetMaterial installs or replaces the grid material: an open Admission
// closes (peers connected now must show a certificate within the
// timeout), a new certificate of this node is sent to every connected
// peer, a newer revocation list is adopted. A different grid key than the
// one installed is refused.
func (a *Admission) SetMaterial(m Material) error {
	a.mu.Lock()
	wasOpen := a.pub == nil
	oldCert := a.cert
	err := a.setMaterial(m)
	at := a.attached
	a.mu.Unlock()
	if err != nil || at == nil {
		return err
	}
	if wasOpen || string(oldCert) != string(m.Cert) {
		at.helloAll(wasOpen)
	}
	if m.Revocations != nil {
		if _, err := a.AdoptRevocations(m.Revocations); err != nil {
			return err
		}
	}
	return nil
}

// setMaterial is SetMaterial under a.mu, without the network.
func (a *Admission) setMaterial(m Material) error {
	if len(m.GridKey) != ed25519.PublicKeySize {
		return fmt.Errorf("grid key of %d bytes", len(m.GridKey))
	}
	if a.pub != nil && !a.pub.Equal(m.GridKey) {
		return fmt.Errorf("grid material of %s, but this node is a member of %s", grid.IDOf(m.GridKey), a.grid)
	}
	var self grid.Cert
	if m.Cert != nil {
		c, err := grid.DecodeCert(m.Cert, m.GridKey)
		if err != nil {
			return fmt.Errorf("this node's certificate: %w", err)
		}
		self = c
	}
	if a.pub == nil && m.Revocations != nil {
		l, err := grid.DecodeRevocations(m.Revocations, m.GridKey)
		if err != nil {
			return fmt.Errorf("revocation list: %w", err)
		}
		a.revB, a.revs = m.Revocations, &l
	}
	wasOpen := a.pub == nil
	a.pub, a.grid = m.GridKey, grid.IDOf(m.GridKey)
	if m.Cert != nil {
		a.cert, a.self = m.Cert, self
	}
	if wasOpen {
		// Peers that sent their HELLO while this node was open.
		for p, st := range a.peers {
			if st.shown != nil {
				_ = a.admitLocked(p, st, st.shown)
				st.shown = nil
			}
		}
	}
	return nil
}

// forget drops what is known of p once it has no connection left, unless
// it is an admitted member (kept, so that its reconnect costs no wait).
func (a *Admission) forget(p peer.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st := a.peers[p]; st != nil && !st.admitted {
		delete(a.peers, p)
	}
}

// check decides whether cert b, shown by p at now, admits p. It is plain
// code: no IO.
func (a *Admission) check(p peer.ID, b []byte, now time.Time) (grid.Cert, error) {
	if len(b) == 0 {
		return grid.Cert{}, fmt.Errorf("%s showed no certificate: %w of %s", p, ErrNotMember, a.grid)
	}
	c, err := grid.DecodeCert(b, a.pub)
	if err != nil {
		return grid.Cert{}, fmt.Errorf("%w of %s: %w", ErrNotMember, a.grid, err)
	}
	if err := c.Check(p, now, a.revs); err != nil {
		if errors.Is(err, grid.ErrRevoked) {
			a.markRevoked(p, c.Serial, now)
		}
		return grid.Cert{}, fmt.Errorf("%w of %s: %w", ErrNotMember, a.grid, err)
	}
	return c, nil
}

// admit records p's certificate b (from its HELLO): nil if it admits p.
func (a *Admission) admit(p peer.ID, b []byte) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	st := a.state(p)
	if a.pub == nil {
		if len(b) > 0 {
			a.hintLocked(p, closedGridHint)
		}
		if st.shown == nil && len(b) > 0 && !a.cfg.Joining {
			a.log.Warn("a member of a closed grid connected: this open node has no certificate and will be refused there (start it with --join TOKEN)", "peer", p)
		}
		st.shown = b // checked if this node closes (SetMaterial)
		return nil
	}
	return a.admitLocked(p, st, b)
}

func (a *Admission) admitLocked(p peer.ID, st *peerState, b []byte) error {
	c, err := a.check(p, b, a.cfg.Now())
	if err != nil {
		st.err = err
		a.stats.Refused++
		a.stats.LastRefusal = err.Error()
		return err
	}
	st.cert, st.err = c, nil
	delete(a.shunned, p)
	delete(a.hints, p)
	delete(a.revokedPeers, p)
	if !st.admitted {
		st.admitted = true
		close(st.ready)
	}
	return nil
}

func (a *Admission) state(p peer.ID) *peerState {
	st := a.peers[p]
	if st == nil {
		st = &peerState{ready: make(chan struct{}), heard: make(chan struct{})}
		a.peers[p] = st
	}
	return st
}

// expect notes a new connection of p's (this node's HELLO is on its way).
func (a *Admission) expect(p peer.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.state(p)
}

// heardFrom records that p answered this node's HELLO (or that sending it
// failed), if p is still known (see forget).
func (a *Admission) heardFrom(p peer.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if st := a.peers[p]; st != nil && !st.heardDone {
		st.heardDone = true
		close(st.heard)
	}
}

// waitHeard waits, at most the timeout, until p answered this node's
// HELLO: a stream opened before then could reach p while it has not yet
// admitted this node, and be refused for the small limits of a peer not
// admitted (pkg/peerhost). Nothing to wait for when open.
func (a *Admission) waitHeard(ctxDone <-chan struct{}, p peer.ID) {
	a.mu.Lock()
	st := a.peers[p]
	open := a.pub == nil
	a.mu.Unlock()
	if open || st == nil {
		return
	}
	t := time.NewTimer(a.cfg.Timeout)
	defer t.Stop()
	select {
	case <-st.heard:
	case <-t.C:
	case <-ctxDone:
	}
}

// admitted reports whether p is admitted now, re-checking its certificate's
// time and revocation; a peer that no longer passes is un-admitted.
func (a *Admission) admitted(p peer.ID) (ok bool, ready <-chan struct{}, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pub == nil {
		return true, nil, nil
	}
	st := a.state(p)
	if st.admitted {
		if err := st.cert.Check(p, a.cfg.Now(), a.revs); err != nil {
			a.unadmit(p, st, err)
		} else {
			return true, nil, nil
		}
	}
	return false, st.ready, st.err
}

func (a *Admission) unadmit(p peer.ID, st *peerState, err error) {
	st.admitted = false
	st.ready = make(chan struct{})
	st.err = fmt.Errorf("%w of %s: %w", ErrNotMember, a.grid, err)
	if errors.Is(err, grid.ErrRevoked) {
		a.markRevoked(p, st.cert.Serial, a.cfg.Now())
	}
}

// markRevoked records that p showed certificate serial, revoked, at now
// (under a.mu). Bounded like shunned.
func (a *Admission) markRevoked(p peer.ID, serial uint64, now time.Time) {
	if _, ok := a.revokedPeers[p]; !ok && len(a.revokedPeers) >= maxShunned {
		for q, m := range a.revokedPeers {
			if now.Sub(m.at) > ShunFor || len(a.revokedPeers) >= maxShunned {
				delete(a.revokedPeers, q)
			}
		}
	}
	a.revokedPeers[p] = revokedMark{serial: serial, at: now}
}

// Member reports whether p is admitted now (always, when open), without
// side effects: cheap enough for the resource manager to ask on every
// reservation (pkg/peerhost).
func (a *Admission) Member(p peer.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pub == nil {
		return true
	}
	st := a.peers[p]
	return st != nil && st.admitted && st.cert.Check(p, a.cfg.Now(), a.revs) == nil
}

// Admitted reports whether p is an admitted member now (always, when
// open).
func (a *Admission) Admitted(p peer.ID) bool {
	ok, _, _ := a.admitted(p)
	return ok
}

// Wait returns nil once p is admitted, or an error wrapping ErrNotMember
// (with the reason its certificate was refused, or that it showed none)
// after the timeout or when ctx ends.
func (a *Admission) Wait(ctxDone <-chan struct{}, p peer.ID) error {
	ok, ready, err := a.admitted(p)
	if ok {
		return nil
	}
	t := time.NewTimer(a.cfg.Timeout)
	defer t.Stop()
	for {
		select {
		case <-ready:
		case <-t.C:
			return a.notAdmitted(p, err)
		case <-ctxDone:
			return a.notAdmitted(p, err)
		}
		if ok, ready, err = a.admitted(p); ok {
			return nil
		}
	}
}

func (a *Admission) notAdmitted(p peer.ID, err error) error {
	if _, _, e := a.admitted(p); e != nil {
		err = e
	}
	if err != nil {
		return fmt.Errorf("peer %s: %w", p, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return fmt.Errorf("peer %s showed no membership certificate within %v: %w of %s", p, a.cfg.Timeout, ErrNotMember, a.grid)
}

// ShunFor is how long a peer whose connection was closed for showing no
// valid certificate is not dialled again, and how long a peer that showed
// a revoked one is refused at the door (Revoked).
const ShunFor = time.Minute

// maxShunned bounds the shunned peers remembered (the oldest go first).
const maxShunned = 4096

// shun records that p's connection was closed for showing no valid
// certificate.
func (a *Admission) shun(p peer.ID) {
	a.mu.Lock()
	defer a.mu.Unlock()
	now := a.cfg.Now()
	if len(a.shunned) >= maxShunned {
		for q, at := range a.shunned {
			if now.Sub(at) > ShunFor || len(a.shunned) >= maxShunned {
				delete(a.shunned, q)
			}
		}
	}
	a.shunned[p] = now
}

// Shunned reports whether p was disconnected for showing no valid
// certificate less than ShunFor ago (and has not been admitted since).
func (a *Admission) Shunned(p peer.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok := a.shunned[p]
	if ok && a.cfg.Now().Sub(at) > ShunFor {
		delete(a.shunned, p)
		return false
	}
	return ok
}

// closedGridHint marks a peer that showed a certificate while this node
// was open: it serves members only.
const closedGridHint = "is a member of a closed grid and serves members only; this daemon has no certificate (start it with --join TOKEN)"

// openRefusal is why p will not serve this open node, or "": p showed a
// certificate (it belongs to a closed grid).
func (a *Admission) openRefusal(p peer.ID) string {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pub == nil && a.hints[p] == closedGridHint {
		return fmt.Sprintf("peer %s %s", p, closedGridHint)
	}
	return ""
}

// noteRefusal remembers that p refused this node's certificate.
func (a *Admission) noteRefusal(p peer.ID, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.hintLocked(p, "refused this node's membership: "+strings.TrimPrefix(err.Error(), ErrRefused.Error()+": "))
}

func (a *Admission) hintLocked(p peer.ID, why string) {
	if len(a.hints) >= maxShunned {
		for q := range a.hints {
			delete(a.hints, q)
			break
		}
	}
	a.hints[p] = why
}

// explain adds to err, a failure to reach p, the likely membership
// reason: this node's own certificate no longer holds (expired, revoked:
// members then refuse it at the door), p refused it, or p belongs to a
// closed grid and this node is open. err is returned as is otherwise.
func (a *Admission) explain(p peer.ID, err error) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.pub != nil && a.cert != nil {
		if cerr := a.self.Check(a.self.Peer, a.cfg.Now(), a.revs); cerr != nil {
			return fmt.Errorf("%w (this node is no longer a member: %v)", err, cerr)
		}
	}
	if why := a.hints[p]; why != "" {
		return fmt.Errorf("%w (peer %s %s)", err, p, why)
	}
	return err
}

// Revoked reports whether p showed a revoked certificate less than
// ShunFor ago, one still on the revocation list held, and no valid one
// since: the gater refuses it at the door meanwhile. The memory follows
// the list and the peer's certificates: a peer admitted again (a newer
// serial, not on the list) gets in once that time has passed and is
// admitted on its HELLO; a serial that left the list is forgotten.
func (a *Admission) Revoked(p peer.ID) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	m, ok := a.revokedPeers[p]
	if !ok {
		return false
	}
	if a.revs == nil || !a.revs.Has(m.serial) || a.cfg.Now().Sub(m.at) > ShunFor {
		delete(a.revokedPeers, p)
		return false
	}
	return true
}

// AdoptRevocations installs revocation list b if it is valid and newer
// than the one held; it then cuts off revoked peers and sends the list on
// to every connected peer. It reports whether b was adopted.
func (a *Admission) AdoptRevocations(b []byte) (bool, error) {
	a.mu.Lock()
	if a.pub == nil {
		a.mu.Unlock()
		return false, nil
	}
	l, err := grid.DecodeRevocations(b, a.pub)
	if err != nil {
		a.mu.Unlock()
		return false, err
	}
	if a.revs != nil && l.Seq <= a.revs.Seq {
		a.mu.Unlock()
		return false, nil
	}
	a.revB, a.revs = b, &l
	var cut []peer.ID
	for p, st := range a.peers {
		if st.admitted && l.Has(st.cert.Serial) {
			a.unadmit(p, st, fmt.Errorf("certificate %d of %s: %w", st.cert.Serial, p, grid.ErrRevoked))
			cut = append(cut, p)
		}
	}
	at := a.attached
	a.mu.Unlock()
	a.log.Info("revocation list adopted", "seq", l.Seq, "revoked", len(l.Serials), "peers_cut_off", len(cut))
	if a.cfg.OnRevocations != nil {
		a.cfg.OnRevocations(b)
	}
	if at != nil {
		// A revoked peer gets the list too, before it is cut off: it
		// then knows why members refuse it (its errors say so).
		for _, p := range cut {
			go func() {
				at.sendHello(p)
				at.cutOff(p)
			}()
		}
		at.helloAllBut(cut)
	}
	return true, nil
}

// hello returns the HELLO this node sends.
func (a *Admission) hello() hello {
	a.mu.Lock()
	defer a.mu.Unlock()
	return hello{Cert: a.cert, Revocations: a.revB}
}

// Stats returns the counters and state.
func (a *Admission) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.stats
	s.Open = a.pub == nil
	if s.Open {
		return s
	}
	s.Grid = a.grid.String()
	s.Issuer = a.cfg.Issuer != nil
	if a.cert != nil {
		s.Role, s.Prefixes, s.CertExpires = a.self.Role.String(), a.self.Prefixes, time.Unix(a.self.NotAfter, 0)
	}
	if a.revs != nil {
		s.RevSeq = a.revs.Seq
	}
	for _, st := range a.peers {
		if st.admitted {
			s.Admitted++
		}
	}
	return s
}

func (a *Admission) count(f func(*Stats)) {
	a.mu.Lock()
	f(&a.stats)
	a.mu.Unlock()
}
