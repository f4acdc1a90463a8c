package grid

import (
	"bytes"
	"testing"
)

// ParseCertText never panics; what it accepts is a certificate of the key
// it carries that encodes back to the same text form's contents.
func FuzzParseCertText(f *testing.F) {
	b, _ := fuzzKey.Issue(Cert{Peer: "12D3KooWtest", Role: RoleHead, Prefixes: []string{"a/"}, NotBefore: 1, NotAfter: 2, Serial: 3})
	f.Add(EncodeCertText(fuzzKey.Public(), b))
	f.Add(CertTextPrefix)
	f.Add(CertTextPrefix + "AAAA")
	f.Add(" " + TokenPrefix + "x\n")
	f.Fuzz(func(t *testing.T, s string) {
		pub, cert, c, err := ParseCertText(s)
		if err != nil {
			return
		}
		body, err := c.encodeBody()
		if err != nil || !bytes.Equal(body, cert[:len(cert)-2-sigLen]) {
			t.Fatalf("accepted a certificate that does not encode back: %v", err)
		}
		pub2, cert2, c2, err := ParseCertText(EncodeCertText(pub, cert))
		if err != nil || !pub2.Equal(pub) || !bytes.Equal(cert2, cert) || c2.Serial != c.Serial || c2.Peer != c.Peer {
			t.Fatalf("the text form of an accepted certificate does not parse back: %v", err)
		}
	})
}
