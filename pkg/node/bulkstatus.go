package node

import (
	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/transfer"
)

// bulkStatus is status's account of the bulk path, from the engine's es.
func (n *Node) bulkStatus(es transfer.Status) *rpcbridge.BulkStatus {
	return &rpcbridge.BulkStatus{
		Port: int(n.engine.BulkPort()), ConnsPerPeer: n.cfg.BulkConns,
		Open: es.BulkOpen, Serving: es.BulkServing, Opened: es.BulkOpened, Fallbacks: es.BulkFallbacks,
		Accepted: es.BulkAccepted, Refused: es.BulkRefused,
		TicketsIssued: es.BulkTicketsIssued, TicketsRedeemed: es.BulkTicketsRedeemed,
		TicketsRefused: es.BulkTicketsRefused, RequestsRefused: es.BulkRequestsRefused,
		SentPlain: es.BulkSentPlain, SentSealed: es.BulkSentSealed,
		ReceivedPlain: es.BulkReceivedPlain, ReceivedSealed: es.BulkReceivedSealed,
	}
}
