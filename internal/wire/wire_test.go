package wire

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
)

func TestReadN(t *testing.T) {
	for _, n := range []int{0, 10, 1 << 20, 3<<20 + 5} {
		src := bytes.Repeat([]byte{7}, n)
		b, err := ReadN(bytes.NewReader(src), n)
		if err != nil || !bytes.Equal(b, src) {
			t.Fatalf("ReadN(%d): %d bytes, %v", n, len(b), err)
		}
		if n > 0 {
			if _, err := ReadN(bytes.NewReader(src[:n-1]), n); !errors.Is(err, io.ErrUnexpectedEOF) {
				t.Fatalf("short ReadN(%d): %v", n, err)
			}
		}
	}
}

func TestDecodeCID(t *testing.T) {
	h, _ := mh.Sum([]byte("x"), mh.SHA2_256, -1)
	id := cid.NewCidV1(cid.Raw, h)
	if got, err := DecodeCID(id.Bytes()); err != nil || !got.Equals(id) {
		t.Fatalf("DecodeCID: %v %v", got, err)
	}
	for name, b := range map[string][]byte{
		"trailing": append(id.Bytes(), 0),
		"garbage":  {0xff, 0xff},
		"too long": make([]byte, MaxCIDLen+1),
	} {
		if _, err := DecodeCID(b); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

func TestTruncUTF8(t *testing.T) {
	s := strings.Repeat("é", 10) // 2 bytes each
	for n := 0; n <= 21; n++ {
		got := TruncUTF8(s, n)
		if len(got) > n || !utf8.ValidString(got) || len(got) < min(n, len(s))-1 {
			t.Errorf("TruncUTF8(%d) = %q", n, got)
		}
	}
}
