package emugrid

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// TestHarnessOffPublicSurface: the library's public packages (pkg/...)
// neither include nor depend on the test harness (this package and
// internal/wanemu) or libp2p's mock network, which only the harness uses;
// before, both lived at pkg/emugrid and pkg/wanemu.
func TestHarnessOffPublicSurface(t *testing.T) {
	_, self, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(self), "..", "..")
	cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "list", "-deps", "-f", "{{.ImportPath}}", "./pkg/...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const mod = "github.com/omst-project/omst/"
	for _, p := range strings.Fields(string(out)) {
		rel, ours := strings.CutPrefix(p, mod)
		switch {
		case ours && (strings.Contains(rel, "emugrid") || strings.Contains(rel, "wanemu")):
			t.Errorf("public surface holds or imports the harness package %s", p)
		case strings.HasPrefix(p, "github.com/libp2p/go-libp2p/p2p/net/mock"):
			t.Errorf("public surface depends on libp2p's mock network (%s)", p)
		}
	}
}
