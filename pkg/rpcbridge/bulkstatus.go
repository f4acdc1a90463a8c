package rpcbridge

// BulkStatus counts a daemon's bulk path (docs/protocol.md, "The bulk
// path"; docs/operations.md lists the fields): Status.Bulk.
type BulkStatus struct {
	// Port is the bulk listener's TCP port (0: none, --bulk-listen
	// none); ConnsPerPeer the bulk connections opened to a peer this
	// node fetches from (--bulk-conns; 0: libp2p streams only).
	Port         int `json:"port"`
	ConnsPerPeer int `json:"conns_per_peer"`
	// Open is the bulk connections open now at either end; Serving those
	// of them its listener serves. Opened counts the connections this node
	// opened to peers, Fallbacks the times it could not and fetched over
	// libp2p streams instead; Accepted the connections its listener
	// served, Refused those it refused (no valid ticket, a peer no longer
	// a member, too many in their handshake).
	Open      int64  `json:"open"`
	Serving   int    `json:"serving"`
	Opened    uint64 `json:"opened"`
	Fallbacks uint64 `json:"fallbacks"`
	Accepted  uint64 `json:"accepted"`
	Refused   uint64 `json:"refused"`
	// TicketsIssued counts the tickets the listener granted over libp2p
	// sessions, TicketsRedeemed those it took for a connection,
	// TicketsRefused the connections' tickets it refused (unknown,
	// expired, replayed, or the peer no longer a member),
	// RequestsRefused the ticket requests it declined (another site, not
	// a member, too many outstanding, malformed).
	TicketsIssued   uint64 `json:"tickets_issued"`
	TicketsRedeemed uint64 `json:"tickets_redeemed"`
	TicketsRefused  uint64 `json:"tickets_refused"`
	RequestsRefused uint64 `json:"requests_refused"`
	// SentPlain, SentSealed, ReceivedPlain and ReceivedSealed count the
	// fetch protocol's bytes carried over bulk connections, by mode
	// (sealed: AES-256-GCM, its framing not counted).
	SentPlain      uint64 `json:"sent_plain"`
	SentSealed     uint64 `json:"sent_sealed"`
	ReceivedPlain  uint64 `json:"received_plain"`
	ReceivedSealed uint64 `json:"received_sealed"`
}
