package node

import "testing"

func TestSlowStartWarning(t *testing.T) {
	if w := slowStartWarning("1"); len(w) != 1 {
		t.Fatalf("slow start after idle on: %v", w)
	}
	for _, v := range []string{"0", ""} {
		if w := slowStartWarning(v); w != nil {
			t.Fatalf("value %q: %v", v, w)
		}
	}
}
