package tree

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/blob"
)

// Listing by prefix up the tree (names 1.3.0, LIST and LISTED). A node
// knows its own names, its subtree's and those it looked up; the root knows
// every name announced. List asks the parent for the records under a
// prefix, a page (at most MaxListRecords records and MaxListBytes) at a
// time, each page continuing after the last name of the one before; a
// relay answers a page with its own records merged with its parent's page,
// so the answer comes from the whole path up to the root.

// listPageRecords is how many records a node asks for in one LIST (a
// variable so that tests can page with fewer).
var listPageRecords = MaxListRecords

// maxListTotal bounds the records List gathers from the parent in one call.
const maxListTotal = 1 << 20

// ErrListTooLong marks a listing cut at maxListTotal records.
var ErrListTooLong = errors.New("listing too long")

// List returns the records whose names start with prefix that this node
// holds, merged with those its parent lists (and so every node up to the
// root), sorted by name, the newer of two records of one name. The
// parent's records are checked (CheckRecord: a refused one is dropped and
// counted as a peer error) and kept here as a lookup's are (a namespace
// rule here withdrawing one drops it). A parent that cannot be reached, or
// speaks names 1.2.0 or older (no LIST), leaves the local records only,
// with no error (logged); records it listed before failing are kept.
func (t *Tree) List(ctx context.Context, prefix string) ([]blob.Record, error) {
	if err := blob.ValidatePrefix(prefix); err != nil {
		return nil, err
	}
	local, err := t.localList(prefix, "")
	if err != nil {
		return nil, err
	}
	if len(t.parents) == 0 {
		return local, nil
	}
	var remote []blob.Record
	q := listQuery{Prefix: prefix, Limit: listPageRecords}
	for {
		page, last, more, err := t.listUp(ctx, q)
		if err != nil {
			if errors.Is(err, errOldNames) {
				t.log.Debug("list: the parent cannot list; local names only", "prefix", prefix, "err", err)
			} else {
				t.log.Warn("list: the parent did not answer; local names only", "prefix", prefix,
					"listed", len(remote), "err", err)
			}
			break
		}
		remote = append(remote, page...)
		if !more {
			break
		}
		if len(remote) >= maxListTotal {
			return nil, fmt.Errorf("list %q: %w: more than %d records", prefix, ErrListTooLong, maxListTotal)
		}
		q.After = last
	}
	return mergeRecords(local, t.keepListed(remote, local)), nil
}

// localList returns this node's records under prefix whose names sort
// after after, sorted by name.
func (t *Tree) localList(prefix, after string) ([]blob.Record, error) {
	recs, err := t.store.List(prefix)
	if err != nil {
		return nil, fmt.Errorf("list %q: local store: %w", prefix, err)
	}
	slices.SortFunc(recs, func(a, b blob.Record) int { return strings.Compare(a.Name, b.Name) })
	if after != "" {
		i, found := slices.BinarySearchFunc(recs, after, func(r blob.Record, n string) int { return strings.Compare(r.Name, n) })
		if found {
			i++
		}
		recs = recs[i:]
	}
	return recs, nil
}

// listUp asks the current parent for the page q and, if it cannot be
// reached, each fallback parent in turn. The page is checked
// (checkListPage); records CheckRecord refuses are dropped. last is the
// page's last name, refused or not (the next page's After).
func (t *Tree) listUp(ctx context.Context, q listQuery) (page []blob.Record, last string, more bool, err error) {
	var first error
	for _, p := range t.parentIDs() {
		rep, err := t.namesCall(ctx, p, namesRequest{Type: msgList, List: q})
		if err == nil {
			return t.checkedPage(p, q, rep)
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, blob.ErrUnreachable) || ctx.Err() != nil {
			break
		}
	}
	return nil, "", false, first
}

// checkedPage checks p's reply to the LIST q.
func (t *Tree) checkedPage(p peer.ID, q listQuery, rep namesReply) ([]blob.Record, string, bool, error) {
	if rep.Type != msgListed {
		err := malformed("reply 0x%02x to LIST", rep.Type)
		t.notePeerError(p, "list", err)
		return nil, "", false, fmt.Errorf("%s: %w", t.Describe(p), err)
	}
	if err := checkListPage(q, rep.Listed, rep.More); err != nil {
		t.notePeerError(p, "list", err)
		return nil, "", false, fmt.Errorf("%s: %w", t.Describe(p), err)
	}
	last := q.After
	if len(rep.Listed) > 0 {
		last = rep.Listed[len(rep.Listed)-1].Name
	}
	out := rep.Listed[:0:0]
	for _, r := range rep.Listed {
		if err := t.checkRecord(r); err != nil {
			t.notePeerError(p, "list", err)
			continue
		}
		out = append(out, r)
	}
	return out, last, rep.More, nil
}

// checkListPage reports whether recs, more answer the LIST q: at most its
// limit, every name under its prefix, after its After, strictly ascending,
// and more only with records (a page that continues must advance).
func checkListPage(q listQuery, recs []blob.Record, more bool) error {
	if len(recs) > q.Limit {
		return malformed("LISTED: %d records for a LIST of %d", len(recs), q.Limit)
	}
	if more && len(recs) == 0 {
		return malformed("LISTED: no records, and more to come")
	}
	prev := q.After
	for i, r := range recs {
		if !strings.HasPrefix(r.Name, q.Prefix) {
			return malformed("LISTED: record %d, %q, is not under %q", i, r.Name, q.Prefix)
		}
		if (i > 0 || prev != "") && r.Name <= prev {
			return malformed("LISTED: record %d, %q, does not sort after %q", i, r.Name, prev)
		}
		prev = r.Name
	}
	return nil
}

// keepListed stores the parent's records that are newer than the local
// ones of their names (local: sorted by name), as a lookup keeps its
// answer, and returns those remote records to merge: a record a
// namespace rule here withdraws is dropped.
func (t *Tree) keepListed(remote, local []blob.Record) []blob.Record {
	out := remote[:0:0]
	for _, r := range remote {
		i, found := slices.BinarySearchFunc(local, r.Name, func(l blob.Record, n string) int { return strings.Compare(l.Name, n) })
		if found && !r.Newer(local[i]) {
			continue // the local one stands
		}
		if _, err := t.store.PutRecordFrom(r, ""); errors.Is(err, blob.ErrNotFound) {
			continue
		} else if err != nil {
			t.log.Warn("list: store record from parent", "name", r.Name, "err", err)
		}
		t.learnOrigin(r)
		out = append(out, r)
	}
	return out
}

// mergeRecords merges a and b, each sorted by name, into one sorted list
// with one record per name, the newer of two.
func mergeRecords(a, b []blob.Record) []blob.Record {
	out := make([]blob.Record, 0, len(a)+len(b))
	i, j := 0, 0
	for i < len(a) && j < len(b) {
		switch c := strings.Compare(a[i].Name, b[j].Name); {
		case c < 0:
			out = append(out, a[i])
			i++
		case c > 0:
			out = append(out, b[j])
			j++
		default:
			if b[j].Newer(a[i]) {
				out = append(out, b[j])
			} else {
				out = append(out, a[i])
			}
			i, j = i+1, j+1
		}
	}
	out = append(out, a[i:]...)
	return append(out, b[j:]...)
}

// pageOf makes the LISTED page a relay answers: its local records (sorted,
// after the LIST's name) merged with its parent's page (remote, those of
// its records this node kept; last, the page's last name; remoteMore: the
// parent has records after it), cut to limit records and MaxListBytes.
// Local records past the parent's last name, when the parent has more,
// wait for a later page (the parent's names between would be skipped
// otherwise). more says the prefix has records after the page.
func pageOf(local, remote []blob.Record, last string, remoteMore bool, limit int) ([]blob.Record, bool) {
	more := remoteMore
	if remoteMore {
		cut, _ := slices.BinarySearchFunc(local, last, func(r blob.Record, n string) int { return strings.Compare(r.Name, n) })
		for cut < len(local) && local[cut].Name == last {
			cut++
		}
		local = local[:cut]
	}
	merged := mergeRecords(local, remote)
	size := listedSize
	for i, r := range merged {
		size += listedEntry(r)
		if i == limit || size > MaxListBytes {
			return merged[:i], true
		}
	}
	return merged, more
}

// serveList answers a LIST from p: this node's page, its records merged
// with its parent's page (the parent not answering: its own only).
func (t *Tree) serveList(ctx context.Context, p peer.ID, q listQuery) []byte {
	local, err := t.localList(q.Prefix, q.After)
	if err != nil {
		return errorFrame(err)
	}
	var remote []blob.Record
	var remoteLast string
	var remoteMore bool
	if len(t.parents) > 0 {
		// The parent's part gets half the request timeout, so that this
		// node answers its own records in time when the parent is slow.
		pctx, cancel := context.WithTimeout(ctx, t.cfg.RequestTimeout/2)
		pq := q
		for {
			remote, remoteLast, remoteMore, err = t.listUp(pctx, pq)
			if err != nil {
				t.log.Debug("list for a child: the parent did not answer; local names only", "child", p, "prefix", q.Prefix, "err", err)
				break
			}
			remote = t.keepListed(remote, local)
			// A page of the parent's that leaves nothing here (its
			// records all refused or withdrawn) would be an empty page
			// with more to come: take the parent's next.
			if !remoteMore || len(remote) > 0 || (len(local) > 0 && local[0].Name <= remoteLast) {
				break
			}
			pq.After = remoteLast
		}
		cancel()
	}
	if !remoteMore && len(local) > q.Limit {
		// Only what can be sent is merged: the rest is the next page's.
		local = local[:q.Limit+1]
	}
	page, more := pageOf(local, remote, remoteLast, remoteMore, q.Limit)
	return encodeListed(page, more)
}
