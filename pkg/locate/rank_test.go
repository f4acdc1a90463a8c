package locate

import (
	"slices"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/transfer"
)

// Peer IDs for the tables: only their text matters to the decisions.
const (
	me     peer.ID = "me"
	root   peer.ID = "root"
	headA  peer.ID = "headA"
	headC  peer.ID = "headC"
	wA1    peer.ID = "wA1"
	wB2    peer.ID = "wB2"
	child  peer.ID = "child"
	stray  peer.ID = "stray"
	asker  peer.ID = "asker"
	parent peer.ID = "parent"
)

func src(id peer.ID, k transfer.SourceKind) transfer.Source { return transfer.Source{ID: id, Kind: k} }

func ids(srcs []transfer.Source) []peer.ID {
	var out []peer.ID
	for _, s := range srcs {
		out = append(out, s.ID)
	}
	return out
}

func TestShouldSearch(t *testing.T) {
	head := Self{ID: me, Site: "b", Gateway: true}
	worker := Self{ID: me, Site: "b"}
	viaRoot := []transfer.Source{src(root, transfer.KindParent)}
	for _, tc := range []struct {
		name   string
		self   Self
		given  []transfer.Source
		origin string
		force  bool
		want   bool
	}{
		{"no tree source", worker, nil, "", false, true},
		{"forced after the sources failed", worker, viaRoot, root.String(), true, true},
		{"came up through a child", head, []transfer.Source{src(child, transfer.KindChild), src(root, transfer.KindParent)}, wA1.String(), false, false},
		{"a worker leaves it to its head", worker, []transfer.Source{src(parent, transfer.KindParent)}, wA1.String(), false, false},
		{"the parent made the put", head, viaRoot, root.String(), false, false},
		{"a fallback made the put", head, []transfer.Source{src(parent, transfer.KindParent), src(root, transfer.KindParent)}, root.String(), false, false},
		{"a head, put at another site", head, viaRoot, wA1.String(), false, true},
		{"a head, origin unknown (get by ID)", head, viaRoot, "", false, true},
		{"this node made the put", head, viaRoot, me.String(), false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := ShouldSearch(tc.self, tc.given, tc.origin, tc.force); got != tc.want {
				t.Fatalf("ShouldSearch = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestRank(t *testing.T) {
	head := Self{ID: me, Site: "b", Gateway: true}
	worker := Self{ID: me, Site: "b"}
	flat := Self{ID: me, Site: "", Gateway: true}
	found := []Peer{
		{ID: wA1, Site: "a", Known: true},
		{ID: stray},
		{ID: headA, Site: "a", Gateway: true, Known: true},
		{ID: wB2, Site: "b", Known: true},
		{ID: root, Site: "", Gateway: true, Known: true},
		{ID: me, Site: "b", Known: true},
		{ID: asker, Site: "b", Known: true},
		{ID: headC, Site: "c", Gateway: true, Known: true},
	}
	for _, tc := range []struct {
		name  string
		self  Self
		given []transfer.Source
		found []Peer
		want  []peer.ID
		kinds map[peer.ID]transfer.SourceKind
	}{
		{
			name:  "a head: same site, other heads, the parent, the rest",
			self:  head,
			given: []transfer.Source{src(root, transfer.KindParent)},
			found: found,
			want:  []peer.ID{wB2, headA, headC, root, wA1, stray},
			kinds: map[peer.ID]transfer.SourceKind{wB2: transfer.KindSibling, headA: transfer.KindOther, root: transfer.KindParent},
		},
		{
			name:  "a worker: same site, its parent, other heads, the rest",
			self:  worker,
			given: []transfer.Source{src(parent, transfer.KindParent)},
			found: found,
			want:  []peer.ID{wB2, parent, headA, root, headC, wA1, stray},
		},
		{
			name:  "the child it came up through stays first",
			self:  head,
			given: []transfer.Source{src(child, transfer.KindChild), src(root, transfer.KindParent)},
			found: found,
			want:  []peer.ID{child, wB2, headA, headC, root, wA1, stray},
		},
		{
			name:  "flat: one site, found order",
			self:  flat,
			found: []Peer{{ID: wA1, Gateway: true, Known: true}, {ID: stray}, {ID: headA, Site: "x", Gateway: true, Known: true}, {ID: wB2, Gateway: true, Known: true}},
			want:  []peer.ID{wA1, wB2, headA, stray},
		},
		{
			name:  "nothing found: the tree's sources as they were",
			self:  head,
			given: []transfer.Source{src(parent, transfer.KindParent), src(root, transfer.KindParent)},
			want:  []peer.ID{parent, root},
		},
		{
			name: "nothing at all",
			self: worker,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Rank(tc.self, tc.given, tc.found, asker)
			if !slices.Equal(ids(got), tc.want) {
				t.Fatalf("Rank = %v, want %v", ids(got), tc.want)
			}
			for _, s := range got {
				if k, ok := tc.kinds[s.ID]; ok && s.Kind != k {
					t.Errorf("%s ranked as %v, want %v", s.ID, s.Kind, k)
				}
			}
		})
	}
}
