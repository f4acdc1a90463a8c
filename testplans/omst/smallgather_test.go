package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/testground/sdk-go/runtime"
)

// TestSmallBytes: a small object's bytes are its name's and the seed's
// alone, exactly size long.
func TestSmallBytes(t *testing.T) {
	a := smallBytes(1, "sgres/s0/w0/00000", 16<<10)
	if len(a) != 16<<10 || !bytes.Equal(a, smallBytes(1, "sgres/s0/w0/00000", 16<<10)) {
		t.Fatal("not deterministic or not the size")
	}
	if bytes.Equal(a, smallBytes(1, "sgres/s0/w0/00001", 16<<10)) || bytes.Equal(a, smallBytes(2, "sgres/s0/w0/00000", 16<<10)) {
		t.Fatal("two names or seeds with the same bytes")
	}
	if len(smallBytes(1, "x", 1)) != 1 || len(smallBytes(1, "x", 33)) != 33 {
		t.Fatal("odd sizes")
	}
}

// TestLoadSmallParams: the case's defaults (128 objects of 16 KiB per
// worker) and bad values named.
func TestLoadSmallParams(t *testing.T) {
	env := func(kv map[string]string) *runtime.RunEnv {
		return &runtime.RunEnv{RunParams: runtime.RunParams{TestCase: "smallgather", TestInstanceParams: kv}}
	}
	c, err := loadConfig(env(nil))
	if err != nil || c.smallCount != 128 || c.smallSize != 16<<10 {
		t.Fatalf("defaults: %+v %v", c, err)
	}
	for _, kv := range []map[string]string{{"small_count": "0"}, {"small_size": "0"}} {
		if _, err := loadConfig(env(kv)); err == nil || !strings.Contains(err.Error(), "small_count") {
			t.Errorf("%v: %v", kv, err)
		}
	}
}
