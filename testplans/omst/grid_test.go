package main

import (
	"strings"
	"testing"

	"github.com/testground/sdk-go/runtime"
)

func TestGridPrefixesCoverResults(t *testing.T) {
	topics := map[string]bool{}
	for s := 0; s < 3; s++ {
		if !topics[headTokenTopic(s)] {
			topics[headTokenTopic(s)] = true
		} else {
			t.Fatalf("head token topic %s twice", headTokenTopic(s))
		}
		for i := 0; i < 12; i++ {
			name := resultName(s, i)
			if !strings.HasPrefix(name, workerPrefix(s, i)) || !strings.HasPrefix(name, headPrefix(s)) {
				t.Errorf("%s: not under worker prefix %q or head prefix %q", name, workerPrefix(s, i), headPrefix(s))
			}
			if strings.HasPrefix(name, headPrefix(s+1)) {
				t.Errorf("%s under another site's prefix %q", name, headPrefix(s+1))
			}
			if topics[workerTokenTopic(s, i)] {
				t.Fatalf("worker token topic %s twice", workerTokenTopic(s, i))
			}
			topics[workerTokenTopic(s, i)] = true
		}
	}
}

func TestGridParam(t *testing.T) {
	load := func(params map[string]string) (*config, error) {
		return loadConfig(&runtime.RunEnv{RunParams: runtime.RunParams{TestCase: "broadcast", TestInstanceParams: params}})
	}
	c, err := load(map[string]string{})
	if err != nil || c.grid {
		t.Fatalf("default: grid %v, err %v; want false, nil", c != nil && c.grid, err)
	}
	if c, err = load(map[string]string{"grid": "true"}); err != nil || !c.grid {
		t.Fatalf("grid=true: %v", err)
	}
	if c.tokenTTL() < c.startupTimeout+c.timeout {
		t.Errorf("token TTL %s shorter than the run", c.tokenTTL())
	}
	if _, err = load(map[string]string{"grid": "true", "topology": "flat"}); err == nil {
		t.Error("grid=true topology=flat: no error")
	}
	if _, err = load(map[string]string{"grid": "maybe"}); err == nil {
		t.Error("grid=maybe: no error")
	}
}
