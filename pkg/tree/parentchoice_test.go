package tree

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestParentChoiceScripts replays testdata/keeper/*.txt: each command line
// is applied to a ParentChoice and its output must equal the "> " line
// that follows it. Commands:
//
//	new parents=N good-after=D retry=D   a fresh choice
//	ended up=D jitter=F                  SessionEnded
//	earlier I                            EarlierReachable
//	probe                                ProbeEvery
//	refused jitter=F                     SessionRefused
//	candidates                           Probe
func TestParentChoiceScripts(t *testing.T) {
	files, err := filepath.Glob("testdata/keeper/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) { runKeeperScript(t, f) })
	}
}

func runKeeperScript(t *testing.T, path string) {
	fh, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	var pc *ParentChoice
	var got string
	pending := false // a command's output awaits its "> " line
	sc := bufio.NewScanner(fh)
	for line := 1; sc.Scan(); line++ {
		l := strings.TrimSpace(sc.Text())
		switch {
		case l == "" || strings.HasPrefix(l, "#"):
			continue
		case strings.HasPrefix(l, ">"):
			if !pending {
				t.Fatalf("%s:%d: expected output without a command", path, line)
			}
			if want := strings.TrimSpace(l[1:]); got != want {
				t.Errorf("%s:%d: got %q, want %q", path, line, got, want)
			}
			pending = false
			continue
		}
		if pending {
			t.Fatalf("%s:%d: the command before has no expected output", path, line)
		}
		cmd, args := parseKeeperCmd(l)
		if pc == nil && cmd != "new" {
			t.Fatalf("%s:%d: %s before new", path, line, cmd)
		}
		switch cmd {
		case "new":
			pc = NewParentChoice(args.int(t, "parents"), args.dur(t, "good-after"), args.dur(t, "retry"))
			got = fmt.Sprintf("parent %d", pc.Current())
		case "ended":
			got = pc.SessionEnded(args.dur(t, "up"), args.float(t, "jitter")).String()
		case "earlier":
			got = pc.EarlierReachable(args.int(t, "i")).String()
		case "probe":
			got = "every " + pc.ProbeEvery().String()
		case "refused":
			got = pc.SessionRefused(args.float(t, "jitter")).String()
		case "candidates":
			got = fmt.Sprint(pc.Probe())
		default:
			t.Fatalf("%s:%d: unknown command %q", path, line, cmd)
		}
		pending = true
	}
	if pending {
		t.Fatalf("%s: the last command has no expected output", path)
	}
}

type keeperArgs map[string]string

// parseKeeperCmd splits "cmd k=v ..." (a bare value is argument "i").
func parseKeeperCmd(l string) (string, keeperArgs) {
	fields := strings.Fields(l)
	args := keeperArgs{}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(f, "=")
		if !ok {
			k, v = "i", f
		}
		args[k] = v
	}
	return fields[0], args
}

func (a keeperArgs) dur(t *testing.T, k string) time.Duration {
	d, err := time.ParseDuration(a[k])
	if err != nil {
		t.Fatalf("argument %s: %v", k, err)
	}
	return d
}

func (a keeperArgs) int(t *testing.T, k string) int {
	n, err := strconv.Atoi(a[k])
	if err != nil {
		t.Fatalf("argument %s: %v", k, err)
	}
	return n
}

func (a keeperArgs) float(t *testing.T, k string) float64 {
	f, err := strconv.ParseFloat(a[k], 64)
	if err != nil {
		t.Fatalf("argument %s: %v", k, err)
	}
	return f
}
