package exchange

import "testing"

// A Budget starts full, earns Share per chunk up to Burst, Take spends a
// whole token only when there is one, Spend owes down to -Burst; the zero
// Budget limits nothing.
func TestBudget(t *testing.T) {
	var off Budget
	for range 100 {
		if !off.Take() || !off.Has() {
			t.Fatal("the zero budget refused a copy")
		}
	}
	off.Spend()
	off.Earn(3)
	b := NewBudget(0.25, 2)
	if !b.Take() || !b.Take() || b.Take() || b.Has() {
		t.Fatalf("a budget of 2 gave other than two tokens (%v left)", b.Tokens())
	}
	b.Earn(3)
	if b.Take() {
		t.Fatalf("0.75 tokens taken as one")
	}
	b.Earn(1)
	if !b.Take() {
		t.Fatalf("one token earned (4 x 0.25), none taken")
	}
	b.Earn(100)
	if b.Tokens() != 2 {
		t.Fatalf("earned past the burst: %v", b.Tokens())
	}
	for range 10 {
		b.Spend()
	}
	if b.Tokens() != -2 {
		t.Fatalf("owed past the burst: %v", b.Tokens())
	}
	// A budget set by its fields (Share, Burst) starts full too.
	c := Budget{Share: 1, Burst: 3}
	if c.Tokens() != 3 || !c.Take() {
		t.Fatalf("a Budget{Share, Burst} does not start full: %v", c.Tokens())
	}
}
