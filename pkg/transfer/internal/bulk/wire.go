package bulk

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/omst-project/omst/internal/wire"
)

// ProtoTickets is the libp2p protocol on which a node asks a peer for
// bulk tickets (docs/protocol.md, "The bulk path"). A bulk connection
// opened with them carries /omst/fetch/1.3.0's requests and replies. A
// peer that does not serve it is older: the asker uses libp2p streams.
const ProtoTickets protocol.ID = "/omst/bulk/1.0.0"

// Magic opens a bulk connection's hello.
const Magic = "OMSTBLK1"

// Sizes and limits.
const (
	TicketLen   = 32                     // a ticket's random bytes
	HelloLen    = len(Magic) + TicketLen // the hello a bulk connection starts with
	MaxTickets  = 16                     // tickets one request may ask for
	MaxSiteLen  = 255                    // a site name in a ticket request
	MaxRefusal  = 512                    // the message of an UNAVAILABLE reply
	requestVer  = 1                      // the ticket request's version byte
	flagTrusted = 1                      // request flag: the asker's LAN is trusted
	statusGrant = 0                      // reply: tickets follow
	statusNone  = 1                      // reply: no bulk path here (message follows)
)

// Mode is how a bulk connection carries its bytes.
type Mode byte

const (
	// ModeSealed: every byte both ways in AES-256-GCM frames under a key
	// of the connection's own (the ticket's), sent over the libp2p session.
	ModeSealed Mode = 1
	// ModePlain: bytes as they are, on a LAN both ends' operators said is
	// trusted, within one site.
	ModePlain Mode = 2
)

func (m Mode) String() string {
	switch m {
	case ModeSealed:
		return "aes-256-gcm"
	case ModePlain:
		return "plain"
	}
	return fmt.Sprintf("mode %d", byte(m))
}

// Hello answers, the one byte a listener writes after a bulk connection's
// hello: helloOK, or why the connection is refused (it is then closed).
const (
	helloOK byte = iota
	helloUnknown
	helloExpired
	helloReplayed
	helloNotMember
	helloBusy
	helloMalformed
)

// Errors of ticket redemption, each an answer to a hello
// (errors.Is-comparable, on both ends).
var (
	ErrUnknownTicket  = errors.New("bulk: unknown ticket")
	ErrExpiredTicket  = errors.New("bulk: expired ticket")
	ErrReplayedTicket = errors.New("bulk: ticket already used")
	ErrNotMember      = errors.New("bulk: ticket holder is no longer an admitted member")
	ErrBusy           = errors.New("bulk: too many connections being opened")
	// ErrUnavailable: the peer serves no bulk path (or none to this node).
	ErrUnavailable = errors.New("bulk: no bulk path")
)

// refusalErr maps a hello answer to its error.
func refusalErr(code byte) error {
	switch code {
	case helloUnknown:
		return ErrUnknownTicket
	case helloExpired:
		return ErrExpiredTicket
	case helloReplayed:
		return ErrReplayedTicket
	case helloNotMember:
		return ErrNotMember
	case helloBusy:
		return ErrBusy
	case helloMalformed:
		return wire.Malformed("the listener found our hello malformed")
	}
	return wire.Malformed("unknown hello answer %d", code)
}

// refusalCode maps an error of Redeem to its hello answer.
func refusalCode(err error) byte {
	switch {
	case errors.Is(err, ErrExpiredTicket):
		return helloExpired
	case errors.Is(err, ErrReplayedTicket):
		return helloReplayed
	case errors.Is(err, ErrNotMember):
		return helloNotMember
	case errors.Is(err, ErrBusy):
		return helloBusy
	case errors.Is(err, wire.ErrMalformed):
		return helloMalformed
	}
	return helloUnknown
}

// TicketID is a ticket's random bytes.
type TicketID [TicketLen]byte

// Ticket is one ticket as granted: its ID and, in ModeSealed, the key of
// the connection it opens.
type Ticket struct {
	ID  TicketID
	Key []byte // KeyLen bytes in ModeSealed, nil in ModePlain
}

// TicketRequest asks for Count tickets; Trusted and Site are the asker's
// own setting (ChooseMode).
type TicketRequest struct {
	Count   int
	Trusted bool
	Site    string
}

// AppendTicketRequest appends q's encoding: version u8 (1), count u8,
// flags u8 (1: trusted), site length u8, site bytes.
func AppendTicketRequest(b []byte, q TicketRequest) []byte {
	var flags byte
	if q.Trusted {
		flags |= flagTrusted
	}
	site := wire.TruncUTF8(q.Site, MaxSiteLen)
	b = append(b, requestVer, byte(q.Count), flags, byte(len(site)))
	return append(b, site...)
}

// DecodeTicketRequest parses a whole ticket request.
func DecodeTicketRequest(b []byte) (TicketRequest, error) {
	var q TicketRequest
	if len(b) < 4 {
		return q, wire.Malformed("ticket request of %d bytes", len(b))
	}
	if b[0] != requestVer {
		return q, wire.Malformed("ticket request version %d", b[0])
	}
	q.Count = int(b[1])
	if q.Count < 1 || q.Count > MaxTickets {
		return q, wire.Malformed("ticket request for %d tickets (1 to %d)", q.Count, MaxTickets)
	}
	if b[2]&^flagTrusted != 0 {
		return q, wire.Malformed("ticket request flags 0x%02x", b[2])
	}
	q.Trusted = b[2]&flagTrusted != 0
	n := int(b[3])
	if len(b) != 4+n {
		return q, wire.Malformed("ticket request says a site of %d bytes, holds %d", n, len(b)-4)
	}
	if !utf8.Valid(b[4:]) {
		return q, wire.Malformed("site name not UTF-8")
	}
	q.Site = string(b[4:])
	return q, nil
}

// Grant is a reply that grants tickets: the mode of the connections they
// open, the port of the listener (at the address the asker reached the
// granter at), and how long they stay valid.
type Grant struct {
	Mode    Mode
	Port    uint16
	TTL     time.Duration
	Tickets []Ticket
}

// AppendGrant appends g's encoding: status u8 (0), mode u8, port u16, TTL
// in milliseconds u32, count u8, then per ticket its ID and, in
// ModeSealed, its key.
func AppendGrant(b []byte, g Grant) []byte {
	b = append(b, statusGrant, byte(g.Mode))
	b = binary.BigEndian.AppendUint16(b, g.Port)
	b = binary.BigEndian.AppendUint32(b, uint32(g.TTL/time.Millisecond))
	b = append(b, byte(len(g.Tickets)))
	for _, t := range g.Tickets {
		b = append(b, t.ID[:]...)
		if g.Mode == ModeSealed {
			b = append(b, t.Key...)
		}
	}
	return b
}

// AppendUnavailable appends a reply that grants nothing: status u8 (1),
// message length u16, message.
func AppendUnavailable(b []byte, msg string) []byte {
	msg = wire.TruncUTF8(msg, MaxRefusal)
	b = append(b, statusNone)
	b = binary.BigEndian.AppendUint16(b, uint16(len(msg)))
	return append(b, msg...)
}

// maxGrantLen is the longest reply to a ticket request.
const maxGrantLen = 1 + 1 + 2 + 4 + 1 + MaxTickets*(TicketLen+KeyLen)

// DecodeGrant parses a whole reply to a request for want tickets: the
// grant, or an error wrapping ErrUnavailable with the peer's message, or
// one wrapping wire.ErrMalformed.
func DecodeGrant(b []byte, want int) (Grant, error) {
	var g Grant
	if len(b) < 1 {
		return g, wire.Malformed("empty ticket reply")
	}
	switch b[0] {
	case statusNone:
		if len(b) < 3 || len(b) != 3+int(binary.BigEndian.Uint16(b[1:])) || len(b) > 3+MaxRefusal {
			return g, wire.Malformed("ticket refusal of %d bytes", len(b))
		}
		return g, fmt.Errorf("%w: %q", ErrUnavailable, b[3:])
	case statusGrant:
	default:
		return g, wire.Malformed("ticket reply status %d", b[0])
	}
	if len(b) < 9 {
		return g, wire.Malformed("ticket grant of %d bytes", len(b))
	}
	g.Mode = Mode(b[1])
	per := TicketLen
	switch g.Mode {
	case ModeSealed:
		per += KeyLen
	case ModePlain:
	default:
		return g, wire.Malformed("unknown bulk mode %d", b[1])
	}
	g.Port = binary.BigEndian.Uint16(b[2:])
	if g.Port == 0 {
		return g, wire.Malformed("bulk port 0")
	}
	g.TTL = time.Duration(binary.BigEndian.Uint32(b[4:])) * time.Millisecond
	n := int(b[8])
	if n < 1 || n > want {
		return g, wire.Malformed("grant of %d tickets for a request of %d", n, want)
	}
	if len(b) != 9+n*per {
		return g, wire.Malformed("grant of %d tickets in %d bytes", n, len(b))
	}
	b = b[9:]
	for range n {
		var t Ticket
		copy(t.ID[:], b)
		if g.Mode == ModeSealed {
			t.Key = append([]byte(nil), b[TicketLen:per]...)
		}
		g.Tickets = append(g.Tickets, t)
		b = b[per:]
	}
	return g, nil
}

// AppendHello appends the hello that opens a bulk connection with t.
func AppendHello(b []byte, t TicketID) []byte {
	b = append(b, Magic...)
	return append(b, t[:]...)
}

// DecodeHello parses a bulk connection's hello (HelloLen bytes).
func DecodeHello(b []byte) (TicketID, error) {
	var t TicketID
	if len(b) != HelloLen {
		return t, wire.Malformed("hello of %d bytes", len(b))
	}
	if string(b[:len(Magic)]) != Magic {
		return t, wire.Malformed("not a bulk hello (%q)", b[:len(Magic)])
	}
	copy(t[:], b[len(Magic):])
	return t, nil
}

// Policy is one end's setting for its bulk connections: whether its
// operator says its LAN is trusted, and its site.
type Policy struct {
	TrustedLAN bool
	Site       string
}

// ChooseMode is the mode of the connections a granter with policy server
// opens to an asker with policy client: plain only when both ends say
// their LAN is trusted and both are of the same named site; sealed
// otherwise (across sites, always).
// SameSite reports whether a listener of site server grants tickets to
// an asker of site client: unless both name a site and the names differ.
// Bulk connections are a site's: across sites chunks go over the libp2p
// session (measured on the emulated grid, 2 x 3 workers, WAN 100 Mbit/s
// 20 ms: four fresh sealed connections per head to the root made the
// broadcast 5 % slower than the session's warm one, 6.13-6.19 s against
// 5.85-5.86).
func SameSite(server, client string) bool {
	return server == "" || client == "" || server == client
}

func ChooseMode(server, client Policy) Mode {
	if server.TrustedLAN && client.TrustedLAN && server.Site != "" && server.Site == client.Site {
		return ModePlain
	}
	return ModeSealed
}
