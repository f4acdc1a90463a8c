package faultinject

import (
	"strings"
	"testing"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mode
	}{{"", None}, {"corrupt-serve", CorruptServe}, {"notfound-serve", NotFoundServe}, {"silent-serve", SilentServe}, {"busy-relay", BusyRelay}, {"redirect-relay", RedirectRelay}} {
		got, err := Parse(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		if tc.want != None && got.String() != tc.in {
			t.Errorf("%v.String() = %q, want %q", got, got.String(), tc.in)
		}
	}
	for _, bad := range []string{"corrupt", "CORRUPT-SERVE", " corrupt-serve", "none"} {
		_, err := Parse(bad)
		if err == nil || !strings.Contains(err.Error(), "unknown fault") || !strings.Contains(err.Error(), "corrupt-serve") {
			t.Errorf("Parse(%q): %v; want an error naming the value and listing the faults", bad, err)
		}
	}
}
