package bulk

import (
	"bytes"
	"testing"
	"time"
)

func FuzzDecodeTicketRequest(f *testing.F) {
	f.Add(AppendTicketRequest(nil, TicketRequest{Count: 4, Trusted: true, Site: "siteA"}))
	f.Add(AppendTicketRequest(nil, TicketRequest{Count: 1}))
	f.Add([]byte{1, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		q, err := DecodeTicketRequest(b)
		if err != nil {
			return
		}
		if q.Count < 1 || q.Count > MaxTickets || !bytes.Equal(AppendTicketRequest(nil, q), b) {
			t.Fatalf("ticket request not canonical: %+v", q)
		}
	})
}

func FuzzDecodeGrant(f *testing.F) {
	f.Add(AppendGrant(nil, Grant{Mode: ModeSealed, Port: 1, TTL: time.Second, Tickets: []Ticket{{ID: TicketID{1}, Key: make([]byte, KeyLen)}}}), 1)
	f.Add(AppendGrant(nil, Grant{Mode: ModePlain, Port: 7000, TTL: time.Second, Tickets: []Ticket{{ID: TicketID{1}}, {ID: TicketID{2}}}}), 4)
	f.Add(AppendUnavailable(nil, "no"), 1)
	f.Fuzz(func(t *testing.T, b []byte, want int) {
		want = min(max(want, 0), MaxTickets)
		g, err := DecodeGrant(b, want)
		if err != nil {
			return
		}
		if len(g.Tickets) < 1 || len(g.Tickets) > want || g.Port == 0 || !bytes.Equal(AppendGrant(nil, g), b) {
			t.Fatalf("grant not canonical: %+v", g)
		}
	})
}

func FuzzDecodeHello(f *testing.F) {
	f.Add(AppendHello(nil, TicketID{1, 2, 3}))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		id, err := DecodeHello(b)
		if err != nil {
			return
		}
		if !bytes.Equal(AppendHello(nil, id), b) {
			t.Fatal("hello not canonical")
		}
	})
}
