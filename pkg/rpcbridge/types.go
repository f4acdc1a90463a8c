package rpcbridge

import (
	"context"
	"io"
	"os"
)

// PutOptions tune a put.
type PutOptions struct {
	// ChunkSize is the chunk size of the new blob; 0 = the daemon's default.
	ChunkSize int
}

// Info describes a named blob.
type Info struct {
	Name      string `json:"name"`
	ID        string `json:"id"`         // blob ID (CID string)
	Size      uint64 `json:"size"`       // bytes
	ChunkSize uint32 `json:"chunk_size"` // 0 if the manifest is unknown here
	Chunks    uint32 `json:"chunks"`
	Time      int64  `json:"time"`   // put time, unix nanoseconds
	Origin    string `json:"origin"` // peer ID of the node that put it
	Local     bool   `json:"local"`  // every chunk is in this node's store
	Pinned    bool   `json:"pinned"` // pinned on this node
}

// Peer is a peer a node is connected to. Role is "parent" (its parent or
// a fallback), "child", "sibling" (a node of its site), "dht" (in its DHT
// routing table) or "other"; Site is empty when unknown.
type Peer struct {
	ID    string   `json:"id"`
	Role  string   `json:"role"`
	Site  string   `json:"site"`
	Addrs []string `json:"addrs"` // the remote addresses of its connections
}

// Child is one child of a node in the tree.
type Child struct {
	ID        string   `json:"id"`
	Site      string   `json:"site"`
	Addrs     []string `json:"addrs"`
	Connected bool     `json:"connected"`
}

// Status is the daemon's state, sent over the socket as a JSON document.
type Status struct {
	PeerID          string   `json:"peer_id"`
	Site            string   `json:"site"`
	Addrs           []string `json:"addrs"`
	Parent          string   `json:"parent"`
	ParentConnected bool     `json:"parent_connected"`
	// ParentError is why the last session with the parent failed or
	// ended ("connection refused", a peer ID mismatch...); "" if none did.
	ParentError  string  `json:"parent_error,omitempty"`
	Children     []Child `json:"children"`
	CacheUsed    int64   `json:"cache_used"`
	CacheCap     int64   `json:"cache_cap"`
	CachePinned  int64   `json:"cache_pinned"`
	Chunks       int     `json:"chunks"`
	BytesServed  uint64  `json:"bytes_served"`
	BytesFetched uint64  `json:"bytes_fetched"`
	PeerErrors   uint64  `json:"peer_errors"`
	// CacheOrphaned is the bytes of stored chunks that no manifest lists
	// (left by uploads that never completed); evicted first.
	CacheOrphaned int64 `json:"cache_orphaned"`
	// ChunksDamaged counts chunks this node found damaged in its store
	// (bytes not matching their hash, files cut short or missing) and
	// dropped, since the daemon started.
	ChunksDamaged uint64 `json:"chunks_damaged"`
	// CorruptReceived counts chunks received from peers that did not
	// match their hash; CorruptReports counts peers' reports that a chunk
	// this node sent them did not.
	CorruptReceived uint64 `json:"corrupt_received"`
	CorruptReports  uint64 `json:"corrupt_reports"`
	// BytesIn counts verified chunk bytes received, by kind of source:
	// "parent", "child", "sibling", "other". BytesOut counts chunk bytes
	// sent, by the asker's relation to this node: "parent", "child",
	// "sibling" (another node of this site), "other" (e.g. another site's
	// head that found this node in the DHT).
	BytesIn  map[string]uint64 `json:"bytes_in"`
	BytesOut map[string]uint64 `json:"bytes_out"`
	// RedirectsSent counts children's requests this relay answered with a
	// sibling to ask; RedirectsTaken the redirects this node followed;
	// SiblingFailures those whose sibling could not deliver.
	RedirectsSent   uint64 `json:"redirects_sent"`
	RedirectsTaken  uint64 `json:"redirects_taken"`
	SiblingFailures uint64 `json:"sibling_failures"`
	// Hedges counts sibling requests slow enough that the chunk was also
	// asked of the relay (the first copy wins).
	Hedges uint64 `json:"hedges"`
	// DHTPeers is the size of the node's DHT routing table; DHTProvided
	// counts the announcements it made in the DHT since it started (a blob
	// announced is not announced again for 12 h, however often it is read;
	// reprovides are not counted).
	DHTPeers    int    `json:"dht_peers"`
	DHTProvided uint64 `json:"dht_provided"`
	// DHTNames counts the name records this node put in the DHT since it
	// started; DHTRecordsRejected the name records its validator refused
	// (forged, unsigned, malformed), from any peer.
	DHTNames           uint64 `json:"dht_names"`
	DHTRecordsRejected uint64 `json:"dht_records_rejected"`
	// DHTServer: this node serves the DHT (a head, the root, a flat
	// cluster's node); a worker is a client of it.
	DHTServer bool `json:"dht_server"`
	// HedgesDeclined counts children's hedges this relay declined: it had
	// sent the chunk into the site moments before, so the sibling has it.
	HedgesDeclined uint64 `json:"hedges_declined"`
	// HedgesBusy counts, of HedgesDeclined, the hedges declined because
	// the relay's port had other replies to write or its budget of second
	// copies was spent; HedgesServed the hedges it answered with the
	// chunk; HedgesDeferred the hedges this node did not send for its own
	// hedge budget. Directs counts the plain GET_DIRECTs this node sent
	// after giving up on a sibling, DirectsServed those of its children
	// this relay answered with the chunk; DirectsRedirected and
	// DirectsBusy those it answered (fetch 1.4.0) with a REDIRECT to a
	// sibling holding the chunk complete, and with BUSY.
	HedgesBusy        uint64 `json:"hedges_busy,omitempty"`
	HedgesServed      uint64 `json:"hedges_served,omitempty"`
	HedgesDeferred    uint64 `json:"hedges_deferred,omitempty"`
	Directs           uint64 `json:"directs,omitempty"`
	DirectsServed     uint64 `json:"directs_served,omitempty"`
	DirectsRedirected uint64 `json:"directs_redirected,omitempty"`
	DirectsBusy       uint64 `json:"directs_busy,omitempty"`
	// BytesPassedOn counts chunk bytes this node sent on in verified pieces
	// while it was still receiving the chunk (fetch 1.3.0's cut-through).
	BytesPassedOn uint64 `json:"bytes_passed_on"`
	// PushSent counts chunk bytes this node pushed with its answers to
	// lookups of children in other sites; PushReceived the verified bytes
	// its parent pushed to it (names 1.2.0, docs/protocol.md).
	PushSent     uint64 `json:"push_sent"`
	PushReceived uint64 `json:"push_received"`
	// ServedUnhashed counts the chunks this node read from its store and
	// sent with the outboard it kept when it wrote them, without hashing
	// them again (the receiver verifies every piece); ServedSendfile those
	// of them sent from their file with sendfile(2) on a plain bulk
	// connection. ReplicationsBatched counts the children's small puts
	// this relay copied together, in batch requests.
	ServedUnhashed      uint64 `json:"served_unhashed"`
	ServedSendfile      uint64 `json:"served_sendfile"`
	ReplicationsBatched uint64 `json:"replications_batched"`
	// UploadsRefused counts fetch streams refused for the daemon's
	// --max-upload-streams.
	UploadsRefused uint64 `json:"uploads_refused"`
	// Bulk counts the bulk path (BulkStatus).
	Bulk *BulkStatus `json:"bulk,omitempty"`
	// Membership: Open says this daemon admits anyone who can reach it
	// (no grid material); otherwise Membership describes the grid.
	Open       bool        `json:"open"`
	Membership *Membership `json:"membership,omitempty"`
	// Peers are the peers this node is connected to, with their role.
	Peers []Peer `json:"peers"`
	// Transfers are the blob fetches under way on this node (a get, a
	// replication, a preheat, a relay's store-and-forward), with the
	// peers their bytes came from so far.
	Transfers []Transfer `json:"transfers"`
	// Warnings name host settings (or states) that hurt this daemon, with
	// what to change, one line each.
	Warnings []string `json:"warnings"`
	// ErrorsByPeer splits PeerErrors of the transfer engine by peer ID.
	ErrorsByPeer map[string]uint64 `json:"errors_by_peer"`
	Names        int               `json:"names"`
	Version      string            `json:"version"`
}

// Membership is a closed daemon's view of its grid (pkg/member).
type Membership struct {
	Grid        string   `json:"grid"`
	Role        string   `json:"role"`               // "" before it joined
	Prefixes    []string `json:"prefixes,omitempty"` // the names it may write under
	CertExpires string   `json:"cert_expires"`       // RFC 3339, UTC
	Issuer      bool     `json:"issuer"`             // holds the grid key (the root)
	// RevocationSeq is the newest revocation list's sequence number.
	RevocationSeq uint64 `json:"revocation_seq"`
	// Admitted are the peers admitted now; Refused counts certificates
	// refused, Unshown connections closed for showing none in time, Denied
	// streams reset for a peer not admitted, RecordsRejected name records
	// refused (unsigned, forged, outside their origin's rights), Joins the
	// join and renewal requests served.
	Admitted        int    `json:"admitted"`
	Refused         uint64 `json:"refused"`
	Unshown         uint64 `json:"unshown"`
	Denied          uint64 `json:"denied"`
	RecordsRejected uint64 `json:"records_rejected"`
	Joins           uint64 `json:"joins"`
	LastRefusal     string `json:"last_refusal,omitempty"`
}

// Backend is what the server serves: the node implements it. Names reach
// it already checked with blob.ValidateName (prefixes with
// blob.ValidatePrefix). Errors should wrap the blob sentinels so that
// CodeOf maps them to the right code. The Backend never opens a file for
// a client: the server hands it the bytes of the files clients pass (Put)
// and writes what it reads (Open) into them. Every call's context carries
// the Caller (CallerOf): a Backend that keeps local state per user (who
// put a name here) checks it there.
type Backend interface {
	// Put stores the bytes of r under name. r returns io.EOF (itself, not
	// wrapped) only after the empty DATA frame that ends the upload; only
	// then may the backend make the name visible. If the client aborts, r
	// returns ErrAborted; if the connection closes, fails or stalls first
	// (between frames or in the middle of one), r returns an error
	// wrapping ErrUploadIncomplete. After any error from r the backend
	// must fail and leave no name (and return nothing it read as a blob).
	Put(ctx context.Context, name string, r io.Reader, opts PutOptions) (Info, error)
	// Open returns the blob's info and a reader of its verified bytes, in
	// order; it must yield exactly Info.Size bytes.
	Open(ctx context.Context, name string) (Info, io.ReadCloser, error)
	// Preheat asks the node's children (of the given sites only, if any)
	// to fetch the blob named name now, and returns their answers.
	Preheat(ctx context.Context, name string, sites []string) ([]PreheatResult, error)
	// OpenExtents serves GET_FD: it makes the blob local, verifies every
	// byte, and returns the blob's info and its extents in blob order (no
	// gaps, lengths summing to Info.Size). The files must never change
	// while they exist (mappings of them are handed to clients).
	OpenExtents(ctx context.Context, name string) (Info, ExtentIter, error)
	Stat(ctx context.Context, name string) (Info, error)
	List(ctx context.Context, prefix string) ([]Info, error)
	Remove(ctx context.Context, name string) error
	Status(ctx context.Context) (Status, error)
	// Providers returns who holds the blob named name (or whose ID name
	// is) in full: the nodes that announced it in the DHT, and this node
	// if it does.
	Providers(ctx context.Context, name string) (Providers, error)
}

// FileBackend is a Backend that writes a blob into a regular file itself
// (GET_TO_FD, GET_FILE), e.g. to share the file with its store instead of
// writing the bytes twice. GetToFile calls started (if not nil) with the
// blob's info and a ProgressFunc of the get (the bytes in f so far; nil if
// it cannot tell) before the first byte is written, and returns nil when f
// holds exactly the blob's verified bytes (from offset 0, cut to
// Info.Size); an error from started is returned as it is. The server uses
// it for a regular file not opened O_APPEND, and Open for anything else.
type FileBackend interface {
	GetToFile(ctx context.Context, name string, f *os.File, started func(Info, ProgressFunc) error) (Info, error)
}

// Providers is the answer to PROVIDERS.
type Providers struct {
	ID        string     `json:"id"` // the blob ID
	Providers []Provider `json:"providers"`
}

// Provider is a node that holds a blob in full.
type Provider struct {
	Peer string `json:"peer"`
	// Site and Gateway are what the node told of itself (Known); Gateway:
	// the root or a head node (no parent, or a parent in another site).
	Site    string `json:"site"`
	Gateway bool   `json:"gateway"`
	Known   bool   `json:"known"`
	// Self: the answering daemon itself.
	Self bool `json:"self"`
}

// Extent is a run of blob bytes held by an open, read-only file.
type Extent struct {
	ExtentRange
	File *os.File
}

// ExtentIter yields the extents of a blob in order.
type ExtentIter interface {
	// Next returns the next extent, whose File the caller closes; io.EOF
	// after the last one; any other error ends the iteration.
	Next() (Extent, error)
	// Close releases what the iterator still holds (files of extents not
	// yet returned, work in flight). It is safe to call at any point.
	Close() error
}

// PreheatResult is one child's answer to a PREHEAT: it holds the whole blob
// (OK), or the error says why not.
type PreheatResult struct {
	Child   string  `json:"child"` // peer ID
	Site    string  `json:"site"`
	OK      bool    `json:"ok"`
	Error   string  `json:"error,omitempty"`
	Seconds float64 `json:"seconds"`
}

// Transfer is a blob fetch under way (Status.Transfers).
type Transfer struct {
	Name   string           `json:"name"`
	ID     string           `json:"id"`
	Chunks int              `json:"chunks"`
	Done   int              `json:"done"` // chunks in the store or delivered
	From   []TransferSource `json:"from"`
}

// TransferSource is what one peer delivered to a transfer so far.
type TransferSource struct {
	Peer  string `json:"peer"`
	Kind  string `json:"kind"` // parent, child, sibling, other
	Bytes uint64 `json:"bytes"`
}
