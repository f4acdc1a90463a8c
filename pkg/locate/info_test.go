package locate

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/omst-project/omst/internal/wire"
)

func TestInfoRoundTrip(t *testing.T) {
	for _, in := range []Info{{}, {Site: "siteA", Gateway: true}, {Site: strings.Repeat("s", MaxSite)}} {
		b, err := EncodeInfo(in)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodeInfo(b)
		if err != nil || got != in {
			t.Fatalf("DecodeInfo(EncodeInfo(%+v)) = %+v, %v", in, got, err)
		}
	}
	if _, err := EncodeInfo(Info{Site: strings.Repeat("s", MaxSite+1)}); err == nil {
		t.Fatal("EncodeInfo took a site label over the limit")
	}
}

func TestDecodeInfoRejects(t *testing.T) {
	good, _ := EncodeInfo(Info{Site: "ab", Gateway: true})
	for name, b := range map[string][]byte{
		"empty":            nil,
		"short":            good[:3],
		"truncated site":   good[:len(good)-1],
		"trailing bytes":   append(bytes.Clone(good), 0),
		"version 2":        append([]byte{2}, good[1:]...),
		"unknown flag":     {1, 0x02, 0, 0},
		"site over limit":  {1, 0, 0x01, 0x01},
		"length says more": {1, 0, 0, 5, 'a'},
	} {
		if _, err := DecodeInfo(b); !errors.Is(err, wire.ErrMalformed) {
			t.Errorf("%s: DecodeInfo = %v, want a malformed-message error", name, err)
		}
	}
}

func FuzzDecodeInfo(f *testing.F) {
	good, _ := EncodeInfo(Info{Site: "siteA", Gateway: true})
	f.Add(good)
	f.Add([]byte{1, 0, 0, 0})
	f.Add([]byte{1, 3, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		in, err := DecodeInfo(b)
		if err != nil {
			return
		}
		again, err := EncodeInfo(in)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("a decoded INFO does not encode back to its bytes: %x -> %+v -> %x, %v", b, in, again, err)
		}
	})
}
