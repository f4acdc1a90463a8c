package node

import (
	"bytes"
	"log/slog"
	"path/filepath"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/omst-project/omst/pkg/grid"
	"github.com/omst-project/omst/pkg/gridstore"
)

// A `--join omst-cert-...` of a later grid admit replaces the kept
// certificate even when it ends sooner (a member downgraded to a reader
// for a shorter life); the kept one stays when it is the newer serial (a
// renewal of the flag's certificate).
func TestInstallCertNewestSerial(t *testing.T) {
	root := gridstore.Open(filepath.Join(t.TempDir(), "root"))
	rootKey, _, _ := crypto.GenerateEd25519Key(nil)
	rootID, _ := peer.IDFromPrivateKey(rootKey)
	now := time.Now()
	if _, _, err := root.Init(rootID, now, 24*time.Hour); err != nil {
		t.Fatal(err)
	}
	key, _, _ := crypto.GenerateEd25519Key(nil)
	self, _ := peer.IDFromPrivateKey(key)
	home := t.TempDir()
	n := &Node{cfg: Config{Home: home}, log: slog.Default(), gdir: gridstore.Open(home)}

	client, err := root.Admit(self, grid.RoleClient, nil, 30*24*time.Hour, now.Add(-20*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := n.installCert(self, client); err != nil {
		t.Fatal(err)
	}
	// Renewed since (the kept certificate is its renewal).
	_, cb, _, _ := grid.ParseCertText(client)
	renewed, err := root.Renew(cb, self, now)
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := root.Material()
	if err := n.gdir.SaveMember(pub.Pub, renewed); err != nil {
		t.Fatal(err)
	}
	if err := n.installCert(self, client); err != nil {
		t.Fatal(err)
	}
	if m, _ := n.gdir.Material(); !bytes.Equal(m.Cert, renewed) {
		t.Fatal("the flag's older certificate replaced its renewal")
	}
	// Admitted again as a reader, for a week: ends before the kept client
	// certificate, and replaces it.
	reader, err := root.Admit(self, grid.RoleReader, nil, 7*24*time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.installCert(self, reader); err != nil {
		t.Fatal(err)
	}
	m, _ := n.gdir.Material()
	if c, err := grid.DecodeCert(m.Cert, pub.Pub); err != nil || c.Role != grid.RoleReader {
		t.Fatalf("kept %+v (%v), want the reader certificate of the later admit", c, err)
	}
}
