package bytesize

import "testing"

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"1G": 1 << 30, "64M": 64 << 20, "16MiB": 16 << 20, "1024": 1024, "1k": 1 << 10,
		"1.5TB": 3 << 39, " 2 KiB ": 2048, "0": 0, "7B": 7,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"lots", "", "-1K", "NaN", "Inf", "1e30", "K", "1X"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
		}
	}
}

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1 KiB", 1536: "1.5 KiB", 64 << 20: "64 MiB", 3 << 29: "1.5 GiB",
		1<<20 - 1: "1 MiB", 1<<20 - 60<<10: "964 KiB", 1<<30 - 1: "1 GiB", 11 << 20 / 10: "1.1 MiB",
	} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}

func TestFormatFixed(t *testing.T) {
	for n, want := range map[int64]string{
		0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 12 << 20: "12.0 MiB", 1<<20 - 1: "1.0 MiB", 3 << 29: "1.5 GiB",
	} {
		if got := FormatFixed(n); got != want {
			t.Errorf("FormatFixed(%d) = %q, want %q", n, got, want)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"1G", "1.5TB", "lots", "-1", "9999999999T"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := Parse(s)
		if err == nil && (n < 0 || n > 1<<62) {
			t.Fatalf("Parse(%q) = %d outside [0, 2^62]", s, n)
		}
	})
}
