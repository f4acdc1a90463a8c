package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/batchfetch"
	"github.com/omst-project/omst/pkg/blob"
	"github.com/omst-project/omst/pkg/rpcbridge"
)

// TestGetManyGather: issue 27's gather with real nodes: a root, two
// sites' heads, a worker under each. Each worker puts 40 results of 16
// KiB and one of 100 KiB; once the heads hold them (they copy their
// children's puts), one GET_MANY at the root brings all 82, every byte
// right, the 80 small ones inline in one batch per head (counted); the
// big ones the ordinary way. With site b's head not speaking the batch
// protocol (an older daemon), its results come the ordinary way and
// a's still inline. With heads that have not copied their workers' results
// (NoReplicate: as just after the puts), each head pulls them from its
// worker in one batch of its own, and all 80 still come inline.
func TestGetManyGather(t *testing.T) {
	for _, c := range []struct {
		name        string
		oldB, fresh bool
	}{{"heads hold", false, false}, {"b old", true, false}, {"heads pull", false, true}} {
		oldB, fresh := c.oldB, c.fresh
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			root := startNode(t, filepath.Join(dir, "root"), "", "")
			head := func(home, site string) *Node {
				if !fresh {
					return startNode(t, home, root.Addrs()[0], site)
				}
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				n, err := Start(ctx, Config{Home: home, Listen: []string{"/ip4/127.0.0.1/tcp/0"}, Parent: root.Addrs()[0],
					Site: site, NoReplicate: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { n.Close() })
				return n
			}
			ha := head(filepath.Join(dir, "ha"), "a")
			hb := head(filepath.Join(dir, "hb"), "b")
			wa := startNode(t, filepath.Join(dir, "wa"), ha.Addrs()[0], "a")
			wb := startNode(t, filepath.Join(dir, "wb"), hb.Addrs()[0], "b")
			if oldB {
				hb.host.RemoveStreamHandler(batchfetch.Proto)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			want := map[string][]byte{}
			var ids []cid.Cid
			for _, w := range []struct {
				n    *Node
				site string
			}{{wa, "a"}, {wb, "b"}} {
				for i := range 41 {
					size := 16 << 10
					if i == 40 {
						size = 100 << 10
					}
					b := bytes.Repeat([]byte(fmt.Sprintf("%s/%d;", w.site, i)), size)[:size]
					name := fmt.Sprintf("job/%s/r%d", w.site, i)
					var id cid.Cid
					for {
						_, pid, err := func() (rpcbridge.Info, cid.Cid, error) {
							info, err := w.n.Put(ctx, name, bytes.NewReader(b), rpcbridge.PutOptions{})
							if err != nil {
								return info, cid.Cid{}, err
							}
							id, err := cid.Decode(info.ID)
							return info, id, err
						}()
						if err == nil {
							id = pid
							break
						}
						if ctx.Err() != nil {
							t.Fatal(err)
						}
						time.Sleep(100 * time.Millisecond) // not joined yet
					}
					want[name], ids = b, append(ids, id)
				}
			}
			// The root knows every name, and the heads hold their sites'
			// (none with NoReplicate).
			for {
				recs, _ := root.store.List("job/")
				held := 0
				for i, id := range ids {
					if (i < 41 && ha.store.HasBlob(id)) || (i >= 41 && hb.store.HasBlob(id)) {
						held++
					}
				}
				if len(recs) == 82 && (held == 82 || fresh && held == 0) {
					break
				}
				if ctx.Err() != nil {
					t.Fatalf("root lists %d names, heads hold %d blobs", len(recs), held)
				}
				time.Sleep(50 * time.Millisecond)
			}
			c, err := rpcbridge.Dial(SocketPath(filepath.Join(dir, "root")))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got := map[string][]byte{}
			sum, err := c.GetMany(ctx, rpcbridge.ManyRequest{Prefix: "job/", ByPrefix: true}, func(e rpcbridge.ManyEntry, r io.Reader) error {
				if e.Err != nil {
					return fmt.Errorf("%s: %w", e.Name, e.Err)
				}
				b, err := io.ReadAll(r)
				got[e.Name] = b
				return err
			})
			if err != nil || sum.OK != 82 {
				t.Fatalf("%+v %v", sum, err)
			}
			for name, b := range want {
				if !bytes.Equal(got[name], b) {
					t.Fatalf("%s: %d bytes differ", name, len(got[name]))
				}
			}
			wantInline := uint64(80)
			if oldB {
				wantInline = 40
			}
			if n := root.batchInline.Load(); n != wantInline {
				t.Fatalf("%d blobs came inline, want %d", n, wantInline)
			}
		})
	}
}

// TestPlanSmall: only small blobs not held here, with a source, each
// once, grouped by their first source.
func TestPlanSmall(t *testing.T) {
	id := func(i int) cid.Cid { return blob.ManifestCID([]byte{byte(i)}) }
	recs := []blob.Record{
		{Name: "a", ID: id(1), Size: 100},
		{Name: "b", ID: id(2), Size: batchfetch.InlineMax + 1}, // too big
		{Name: "c", ID: id(3), Size: 10},                       // held
		{Name: "d", ID: id(4), Size: 10},                       // no source
		{Name: "e", ID: id(1), Size: 100},                      // same blob as a
		{Name: "f", ID: id(5), Size: batchfetch.InlineMax},
	}
	g := planSmall(recs, func(c cid.Cid) bool { return c.Equals(id(3)) }, func(c cid.Cid) (peer.ID, bool) {
		switch {
		case c.Equals(id(4)):
			return "", false
		case c.Equals(id(5)):
			return "p2", true
		}
		return "p1", true
	})
	if len(g) != 2 || len(g["p1"]) != 1 || !g["p1"][0].Equals(id(1)) || len(g["p2"]) != 1 {
		t.Fatalf("%v", g)
	}
}
