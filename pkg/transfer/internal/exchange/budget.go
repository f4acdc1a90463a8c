package exchange

// This file holds the budgets of second copies as plain code: how many
// hedges a node may send, and how many second copies of chunks a relay
// may send into its site, both earned by the first copies delivered, so
// that their rate follows the rate measured at the node instead of a
// constant.
//
// A hedge storm (docs/benchmarks.md, "Sites of 16 and 32") is late
// chunks making more late chunks: with the CPU saturated every sibling is
// slow, every worker hedges most of its window, the relay serves the
// hedges past their grace, and its port and CPU then carry a copy per
// worker (2 x 32 at a quarter of the rates: the head sent 5-12 copies of
// the blob into its site). With the budgets, second copies stay a share of
// the first copies however slow the siblings are: a worker sends at most
// HedgeShare hedges per chunk it received (and its burst), and gives up
// on late siblings as often; a relay given a CopyShare serves at most that
// many second copies (hedges; plain GET_DIRECTs spend it too) per chunk it
// sent into its site.

// Budget is a token bucket earned by deliveries: Earn adds Share per
// chunk delivered, up to Burst; Take spends one for a second copy when one
// is there; Spend spends one whatever is there (a copy that cannot be
// refused), down to -Burst. The zero Budget is disabled: Take always
// succeeds. Not safe for concurrent use.
type Budget struct {
	Share  float64 // tokens earned per chunk delivered (> 0 enables the budget)
	Burst  float64 // the most tokens kept (and owed); the budget starts full
	tokens float64
	begun  bool
}

// NewBudget returns a full budget earning share per chunk, holding at most
// burst; share <= 0 disables it.
func NewBudget(share, burst float64) Budget {
	return Budget{Share: share, Burst: burst, tokens: burst, begun: true}
}

// Enabled reports whether the budget limits anything.
func (b *Budget) Enabled() bool { return b.Share > 0 }

// Earn credits n chunks delivered.
func (b *Budget) Earn(n int) {
	if !b.Enabled() {
		return
	}
	b.start()
	b.tokens = min(b.tokens+b.Share*float64(n), b.Burst)
}

// Take spends a token if one is there and reports whether it did; with the
// budget disabled it always does.
func (b *Budget) Take() bool {
	if !b.Enabled() {
		return true
	}
	b.start()
	if b.tokens < 1 {
		return false
	}
	b.tokens--
	return true
}

// Has reports whether a token is there (Take would succeed) without
// spending it.
func (b *Budget) Has() bool {
	if !b.Enabled() {
		return true
	}
	b.start()
	return b.tokens >= 1
}

// Spend spends a token whatever is there, owing at most Burst: a second
// copy that is sent anyway (a GET_DIRECT after a sibling failed) delays
// the next ones.
func (b *Budget) Spend() {
	if !b.Enabled() {
		return
	}
	b.start()
	b.tokens = max(b.tokens-1, -b.Burst)
}

// Tokens returns the tokens there now (for tests and status).
func (b *Budget) Tokens() float64 {
	if b.Enabled() {
		b.start()
	}
	return b.tokens
}

func (b *Budget) start() {
	if !b.begun {
		b.tokens, b.begun = b.Burst, true
	}
}

// The budgets' defaults. A worker sends one hedge, and apart from them
// gives up on a late sibling (a plain GET_DIRECT), per HedgeShare chunks
// it received, while the sibling is working (Hedger.paced). Measured
// (docs/benchmarks.md, "Hedge storms"): in runs without a storm nearly
// every hedge was declined or lost to the sibling (2 x 16 at full rate:
// 524 hedges, the head 1.00 copies), and in a storm the head's copies were
// all GET_DIRECTs after give-ups for lateness (2 x 32 at a quarter of the
// rates: 460 GET_DIRECTs, 25 copies of the blob into two sites, 1 hedge
// served): second copies asked because every sibling was slow on a
// saturated CPU, not because one was stuck. One in eight chunks keeps a
// second copy ready for a stuck sibling now and then; the bursts let the
// first chunks of a blob, before anything was earned, be hedged. A relay's
// budget (ServeConfig.CopyShare) is off by default; CopyBurst is its
// burst when set.
const (
	CopyBurst  = 4
	HedgeShare = 0.125
	HedgeBurst = 4
)
