package gridstore

import (
	"bytes"
	"crypto/ed25519"
	"fmt"
	"os"

	"github.com/omst-project/omst/pkg/grid"
)

// Material is what a member holds: the grid's public key, its own
// certificate (nil if none yet) and the newest revocation list it has seen
// (nil if none).
type Material struct {
	Pub         ed25519.PublicKey
	Cert        []byte
	Revocations []byte
}

// Material reads this node's grid material. The certificate and the list
// are checked against the grid's key (a file that does not verify is an
// error naming it), not against the time. ErrNoGrid (wrapped) if there is
// no grid.pub: the node is open.
func (d Dir) Material() (Material, error) {
	pub, ok, err := d.readPub()
	if err != nil {
		return Material{}, err
	}
	if !ok {
		return Material{}, fmt.Errorf("%s: %w", d.file(pubFile), ErrNoGrid)
	}
	m := Material{Pub: pub}
	if m.Cert, ok, err = d.read(certFile, maxSmallFile); err != nil {
		return Material{}, err
	} else if ok {
		if _, err := grid.DecodeCert(m.Cert, pub); err != nil {
			return Material{}, fmt.Errorf("%s: %w", d.file(certFile), err)
		}
	}
	if m.Revocations, ok, err = d.read(revFile, maxSmallFile); err != nil {
		return Material{}, err
	} else if ok {
		if _, err := grid.DecodeRevocations(m.Revocations, pub); err != nil {
			return Material{}, fmt.Errorf("%s: %w", d.file(revFile), err)
		}
	}
	return m, nil
}

// readPub reads grid.pub and whether it exists.
func (d Dir) readPub() (ed25519.PublicKey, bool, error) {
	b, ok, err := d.read(pubFile, maxSmallFile)
	if err != nil || !ok {
		return nil, ok, err
	}
	if len(b) != ed25519.PublicKeySize {
		return nil, false, fmt.Errorf("%s: %d bytes, want a %d-byte ed25519 public key", d.file(pubFile), len(b), ed25519.PublicKeySize)
	}
	return ed25519.PublicKey(b), true, nil
}

// SaveMember keeps what a node got by joining grid pub: it writes grid.pub
// and member.cert (cert must be a certificate of that grid). It refuses if
// the node already is in another grid (a grid.pub of another key), naming
// both grids. A revocation list of no longer this grid is removed.
func (d Dir) SaveMember(pub ed25519.PublicKey, cert []byte) error {
	if len(pub) != ed25519.PublicKeySize {
		return fmt.Errorf("save membership: a grid key of %d bytes", len(pub))
	}
	if _, err := grid.DecodeCert(cert, pub); err != nil {
		return fmt.Errorf("save membership: %w", err)
	}
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	old, ok, err := d.readPub()
	if err != nil {
		return err
	}
	switch {
	case ok && !old.Equal(pub):
		return fmt.Errorf("%s: this node is a member of %s, not of %s (the new certificate's grid); remove %s to leave it",
			d.file(pubFile), grid.IDOf(old), grid.IDOf(pub), d.path)
	case !ok:
		if b, had, _ := d.read(revFile, maxSmallFile); had {
			if _, err := grid.DecodeRevocations(b, pub); err != nil {
				if err := os.Remove(d.file(revFile)); err != nil {
					return fmt.Errorf("remove a stale revocation list: %w", err)
				}
			}
		}
		if err := d.write(pubFile, pub, 0o600); err != nil {
			return err
		}
	}
	if b, had, _ := d.read(certFile, maxSmallFile); had && bytes.Equal(b, cert) {
		return nil
	}
	return d.write(certFile, cert, 0o600)
}

// SaveRevocations keeps revocation list b if it is newer (a higher Seq)
// than the stored one; an older or equal one is ignored (nil). b must be
// signed by the grid's key (grid.pub); ErrNoGrid (wrapped) without one.
func (d Dir) SaveRevocations(b []byte) error {
	// On an open node, fail before the lock would create the directory.
	if _, ok, err := d.readPub(); err != nil {
		return err
	} else if !ok {
		return fmt.Errorf("save revocations: %s: %w", d.file(pubFile), ErrNoGrid)
	}
	unlock, err := d.lock()
	if err != nil {
		return err
	}
	defer unlock()
	pub, ok, err := d.readPub()
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("save revocations: %s: %w", d.file(pubFile), ErrNoGrid)
	}
	l, err := grid.DecodeRevocations(b, pub)
	if err != nil {
		return fmt.Errorf("save revocations: %w", err)
	}
	// A stored list that does not decode is replaced.
	if old, had, err := d.read(revFile, maxSmallFile); err != nil {
		return err
	} else if had {
		if ol, err := grid.DecodeRevocations(old, pub); err == nil && ol.Seq >= l.Seq {
			return nil
		}
	}
	return d.write(revFile, b, 0o600)
}

// storedRevocations decodes the revocations file with pub (a zero list if
// there is none).
func (d Dir) storedRevocations(pub ed25519.PublicKey) (grid.Revocations, error) {
	b, ok, err := d.read(revFile, maxSmallFile)
	if err != nil || !ok {
		return grid.Revocations{}, err
	}
	l, err := grid.DecodeRevocations(b, pub)
	if err != nil {
		return grid.Revocations{}, fmt.Errorf("%s: %w", d.file(revFile), err)
	}
	return l, nil
}
