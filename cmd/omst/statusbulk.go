package main

import (
	"fmt"
	"io"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// printBulkStatus writes status's bulk lines (tab-separated, for the
// status table): nothing from a daemon that does not report them.
func printBulkStatus(w io.Writer, b *rpcbridge.BulkStatus) {
	if b == nil {
		return
	}
	listener := "no listener"
	if b.Port != 0 {
		listener = fmt.Sprintf("listener on port %d", b.Port)
	}
	fmt.Fprintf(w, "bulk\t%s, %d connections per peer; %d open (%d served), %d opened, %d fallbacks to libp2p, %d accepted, %d refused\n",
		listener, b.ConnsPerPeer, b.Open, b.Serving, b.Opened, b.Fallbacks, b.Accepted, b.Refused)
	fmt.Fprintf(w, "bulk_tickets\t%d issued, %d redeemed, %d refused; %d requests refused\n",
		b.TicketsIssued, b.TicketsRedeemed, b.TicketsRefused, b.RequestsRefused)
	fmt.Fprintf(w, "bulk_bytes\tsent %d plain, %d sealed; received %d plain, %d sealed\n",
		b.SentPlain, b.SentSealed, b.ReceivedPlain, b.ReceivedSealed)
}
