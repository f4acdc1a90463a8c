package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/omst-project/omst/pkg/rpcbridge"
)

// TestPrintBulkStatus: status prints every bulk counter, in its place;
// nothing for a daemon that reports none.
func TestPrintBulkStatus(t *testing.T) {
	var b bytes.Buffer
	printBulkStatus(&b, nil)
	if b.Len() != 0 {
		t.Fatalf("no bulk status printed %q", b.String())
	}
	printBulkStatus(&b, &rpcbridge.BulkStatus{Port: 4001, ConnsPerPeer: 4, Open: 3, Serving: 2, Opened: 5, Fallbacks: 6,
		Accepted: 7, Refused: 8, TicketsIssued: 9, TicketsRedeemed: 10, TicketsRefused: 11, RequestsRefused: 12,
		SentPlain: 13, SentSealed: 14, ReceivedPlain: 15, ReceivedSealed: 16})
	want := []string{
		"bulk\tlistener on port 4001, 4 connections per peer; 3 open (2 served), 5 opened, 6 fallbacks to libp2p, 7 accepted, 8 refused\n",
		"bulk_tickets\t9 issued, 10 redeemed, 11 refused; 12 requests refused\n",
		"bulk_bytes\tsent 13 plain, 14 sealed; received 15 plain, 16 sealed\n",
	}
	if got := b.String(); got != strings.Join(want, "") {
		t.Fatalf("printed\n%q\nwant\n%q", got, strings.Join(want, ""))
	}
	b.Reset()
	printBulkStatus(&b, &rpcbridge.BulkStatus{})
	if !strings.HasPrefix(b.String(), "bulk\tno listener, 0 connections per peer;") {
		t.Fatalf("a daemon without a bulk path: %q", b.String())
	}
}
