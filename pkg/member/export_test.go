package member

import (
	"context"

	"github.com/libp2p/go-libp2p/core/peer"
)

// RenewFor asks p for a renewal of cert for subject, as a member that
// forwards one does, and returns the certificate answered.
func (a *Admission) RenewFor(ctx context.Context, p, subject peer.ID, cert []byte) ([]byte, error) {
	b, err := a.attachment().call(ctx, p, joinRequest{Kind: kindRenew, Subject: subject, Payload: cert})
	if err != nil {
		return nil, err
	}
	rep, err := decodeJoinReply(b)
	if err != nil {
		return nil, err
	}
	return rep.Cert, nil
}

// JoinProtoRequest is the bytes of a redemption of token for subject.
func JoinProtoRequest(subject peer.ID, token string) []byte {
	return encodeJoin(joinRequest{Kind: kindRedeem, Subject: subject, Payload: []byte(token)})
}

// DecodeJoinAnswer returns a join stream's answer as an error (nil: a
// certificate).
func DecodeJoinAnswer(b []byte) error {
	_, err := decodeJoinReply(b)
	return err
}
