package topology

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestExpandHosts(t *testing.T) {
	seq := func(format string, lo, hi int) []string {
		var out []string
		for i := lo; i <= hi; i++ {
			out = append(out, fmt.Sprintf(format, i))
		}
		return out
	}
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"node07", []string{"node07"}},
		{"head.example.org", []string{"head.example.org"}},
		{"fe80::1", []string{"fe80::1"}},
		{"node[01-64]", seq("node%02d", 1, 64)},
		{"node[1-3]", []string{"node1", "node2", "node3"}},
		{"node[8-10]", []string{"node8", "node9", "node10"}},
		{"node[08-10]", []string{"node08", "node09", "node10"}},
		{"node[098-100]", []string{"node098", "node099", "node100"}},
		{"node[98-100]", []string{"node98", "node99", "node100"}},
		{"10.0.1.[10-20]", seq("10.0.1.%d", 10, 20)},
		{"n[5-5]", []string{"n5"}},
		{"n[0]", []string{"n0"}},
		{"n[01-02,07,10-11].site", []string{"n01.site", "n02.site", "n07.site", "n10.site", "n11.site"}},
		{"rack[1-2]-n[1-3]", []string{"rack1-n1", "rack1-n2", "rack1-n3", "rack2-n1", "rack2-n2", "rack2-n3"}},
		{"[1-2]x", []string{"1x", "2x"}},
		{"n[1-2,2]", []string{"n1", "n2", "n2"}}, // duplicates are the caller's to find
		{"n[0-65535]", seq("n%d", 0, 65535)},     // exactly MaxExpand
	} {
		got, err := ExpandHosts(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ExpandHosts(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
}

func TestExpandHostsErrors(t *testing.T) {
	for _, tc := range []struct {
		in, want string // want: in the error
	}{
		{"", "empty"},
		{"node[64-01]", "runs backwards"},
		{"node[1-]", "upper bound"},
		{"node[-5]", "lower bound"},
		{"node[a-c]", `"a" is not a number`},
		{"node[1-c]", `"c" is not a number`},
		{"node[1-2", "'[' without its ']'"},
		{"node[1-[2]]", "'[' without its ']'"},
		{"node]1", "']' without '['"},
		{"node[]", "empty brackets"},
		{"node[1,,2]", "empty item"},
		{"node[1-2-3]", `"2-3" is not a number`},
		{"node[1-064]", "widths differ"},
		{"node[ 1]", `" 1" is not a number`},
		{"node[0-65536]", "more than 65536"},
		{"a[0-999]b[0-999]", "more than 65536"},
		{"n[1234567890]", "more than 9 digits"},
		{"node 1", "character ' '"},
		{"omst@node1", "ssh_user"},
		{"a,b", "separate strings"},
		{"-oProxyCommand=x", "starts with '-'"},
		{"[1-2]-x", ""}, // fine: starts with a digit
		{".node", "starts with '.'"},
		{strings.Repeat("a", 254), "longer than 253"},
		{"n[1-2]" + strings.Repeat("a", 252), "longer than 253"},
	} {
		_, err := ExpandHosts(tc.in)
		if tc.want == "" {
			if err != nil {
				t.Errorf("ExpandHosts(%q): %v", tc.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ExpandHosts(%q) error %v; want one with %q", tc.in, err, tc.want)
		}
	}
}

func TestParseJump(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []Hop
	}{
		{"", []Hop{}},
		{"bastion", []Hop{{Host: "bastion"}}},
		{"admin@gw.example.org:2222,head", []Hop{{User: "admin", Host: "gw.example.org", Port: 2222}, {Host: "head"}}},
		{"[fe80::1]:22", []Hop{{Host: "fe80::1", Port: 22}}},
		{"u@fe80::1", []Hop{{User: "u", Host: "fe80::1"}}},
	} {
		got, err := ParseJump(tc.in)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseJump(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
		// String is ParseJump's inverse.
		if s := (SSH{Jump: got}).JumpSpec(); s != tc.in && tc.in != "u@fe80::1" {
			t.Errorf("JumpSpec of ParseJump(%q) = %q", tc.in, s)
		}
	}
	for _, in := range []string{"a,,b", "@h", "u@", "h:", "h:0", "h:70000", "h:x", "[fe80::1", "[fe80::1]x", "-x", "a b", "n[1-2]"} {
		if got, err := ParseJump(in); err == nil {
			t.Errorf("ParseJump(%q) = %v, want an error", in, got)
		}
	}
}

// FuzzExpandHosts checks that the expander never panics, stays within
// MaxExpand, and that what it returns are valid host names that a pattern
// without brackets returns as is.
func FuzzExpandHosts(f *testing.F) {
	for _, s := range []string{"node[01-64]", "10.0.1.[10-20]", "rack[1-2]-n[01-03,07]", "node[64-01]", "node[1-]",
		"n[a-c]", "x", "", "[", "]", "[0-65535]", "n[000-1]", "a[1-9][1-9][1-9][1-9][1-9]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		hosts, err := ExpandHosts(p)
		if err != nil {
			if hosts != nil {
				t.Fatalf("%q: error %v with hosts", p, err)
			}
			return
		}
		if len(hosts) == 0 || len(hosts) > MaxExpand {
			t.Fatalf("%q: %d hosts", p, len(hosts))
		}
		for _, h := range hosts {
			if err := ValidateHost(h); err != nil {
				t.Fatalf("%q expands to an invalid host: %v", p, err)
			}
		}
		if !strings.ContainsAny(p, "[]") && (len(hosts) != 1 || hosts[0] != p) {
			t.Fatalf("%q: %v", p, hosts)
		}
	})
}
