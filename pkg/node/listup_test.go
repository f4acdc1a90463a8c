package node

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/tree"
)

// TestGetManyPrefixFromRoot: a worker's GET_MANY by prefix (real root,
// head and worker daemons, the worker's socket) brings the names only the
// root holds (its own puts: never announced below it) with their bytes,
// merged with the worker's own; with a head that speaks names 1.2.0 (no
// LIST: an older daemon) the worker gets its own names only, no error.
func TestGetManyPrefixFromRoot(t *testing.T) {
	for _, old := range []bool{false, true} {
		t.Run(fmt.Sprintf("old head %v", old), func(t *testing.T) {
			dir := t.TempDir()
			root := startNode(t, filepath.Join(dir, "root"), "", "")
			head := startNode(t, filepath.Join(dir, "head"), root.Addrs()[0], "a")
			if old {
				head.host.RemoveStreamHandler(tree.ProtoNames)
			}
			w := startNode(t, filepath.Join(dir, "w"), head.Addrs()[0], "a")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			data := func(name string) []byte { return bytes.Repeat([]byte(name+";"), 300) }
			want := map[string]bool{}
			for i := range 30 {
				name := fmt.Sprintf("job/in/i%02d", i)
				if _, err := root.Put(ctx, name, bytes.NewReader(data(name)), rpcbridge.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				if !old {
					want[name] = true
				}
			}
			for i := range 3 {
				name := fmt.Sprintf("job/in/w%d", i)
				if _, err := w.Put(ctx, name, bytes.NewReader(data(name)), rpcbridge.PutOptions{}); err != nil {
					t.Fatal(err)
				}
				want[name] = true
			}
			if _, err := root.Put(ctx, "job/other", bytes.NewReader([]byte("not under the prefix")), rpcbridge.PutOptions{}); err != nil {
				t.Fatal(err)
			}
			c, err := rpcbridge.Dial(SocketPath(filepath.Join(dir, "w")))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			got := map[string]bool{}
			sum, err := c.GetMany(ctx, rpcbridge.ManyRequest{Prefix: "job/in/", ByPrefix: true}, func(e rpcbridge.ManyEntry, r io.Reader) error {
				if e.Err != nil {
					return fmt.Errorf("%s: %w", e.Name, e.Err)
				}
				b, err := io.ReadAll(r)
				if err != nil {
					return err
				}
				if !bytes.Equal(b, data(e.Name)) {
					return fmt.Errorf("%s: wrong bytes", e.Name)
				}
				got[e.Name] = true
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for n := range got {
				names = append(names, n)
			}
			sort.Strings(names)
			if sum.OK != len(want) || sum.Failed != 0 || len(got) != len(want) {
				t.Fatalf("summary %+v, got %v; want the %d names %v", sum, names, len(want), want)
			}
			for n := range want {
				if !got[n] {
					t.Fatalf("%s missing from %v", n, names)
				}
			}
		})
	}
}
