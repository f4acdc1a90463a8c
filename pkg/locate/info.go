package locate

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"github.com/omst-project/omst/internal/wire"
)

// ProtoInfo is the protocol a node answers with its place: one stream per
// question; the asker sends nothing, the node writes its INFO and closes.
//
//	INFO: version u8 = 1, flags u8 (bit 0: gateway; other bits 0),
//	      site u16 length + that many bytes (<= MaxSite)
const ProtoInfo protocol.ID = "/omst/info/1.0.0"

// MaxSite bounds a site label on the wire (as pkg/tree's HELLO does).
const MaxSite = 256

const (
	infoVersion  = 1
	flagGateway  = 1 << 0
	maxInfoBytes = 2 + 2 + MaxSite
)

// Info is what a node tells about itself.
type Info struct {
	Site    string
	Gateway bool
}

// EncodeInfo returns the INFO message; a site longer than MaxSite is an
// error.
func EncodeInfo(in Info) ([]byte, error) {
	if len(in.Site) > MaxSite {
		return nil, fmt.Errorf("info: site label of %d bytes exceeds %d", len(in.Site), MaxSite)
	}
	b := []byte{infoVersion, 0}
	if in.Gateway {
		b[1] |= flagGateway
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(in.Site)))
	return append(b, in.Site...), nil
}

// DecodeInfo parses an INFO message: exactly one, of version 1, with no
// unknown flag and nothing after it.
func DecodeInfo(b []byte) (Info, error) {
	if len(b) < 4 {
		return Info{}, wire.Malformed("info: %d bytes, need at least 4", len(b))
	}
	if b[0] != infoVersion {
		return Info{}, wire.Malformed("info: version %d, want %d", b[0], infoVersion)
	}
	if b[1]&^flagGateway != 0 {
		return Info{}, wire.Malformed("info: unknown flags 0x%02x", b[1])
	}
	n := int(binary.BigEndian.Uint16(b[2:]))
	if n > MaxSite {
		return Info{}, wire.Malformed("info: site label of %d bytes exceeds %d", n, MaxSite)
	}
	if len(b) != 4+n {
		return Info{}, wire.Malformed("info: %d bytes, the site label says %d", len(b), 4+n)
	}
	return Info{Site: string(b[4 : 4+n]), Gateway: b[1]&flagGateway != 0}, nil
}

// serveInfo answers one INFO question with self().
func serveInfo(self func() Info) network.StreamHandler {
	return func(s network.Stream) {
		defer s.Close()
		_ = s.SetDeadline(time.Now().Add(5 * time.Second))
		b, err := EncodeInfo(self())
		if err != nil {
			_ = s.Reset()
			return
		}
		_, _ = s.Write(b)
	}
}

// AskInfo asks p for its INFO, within ctx.
func AskInfo(ctx context.Context, h host.Host, p peer.ID) (Info, error) {
	s, err := h.NewStream(ctx, p, ProtoInfo)
	if err != nil {
		return Info{}, fmt.Errorf("info from %s: %w", p, err)
	}
	defer s.Reset()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if dl, ok := ctx.Deadline(); ok {
		_ = s.SetDeadline(dl)
	}
	_ = s.CloseWrite()
	b, err := io.ReadAll(io.LimitReader(s, maxInfoBytes+1))
	if err != nil {
		return Info{}, fmt.Errorf("info from %s: %w", p, err)
	}
	in, err := DecodeInfo(b)
	if err != nil {
		return Info{}, fmt.Errorf("info from %s: %w", p, err)
	}
	return in, nil
}
