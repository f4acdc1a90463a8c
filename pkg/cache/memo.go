package cache

import (
	"container/list"
	"sync"
)

// memo is a small LRU map of immutable values (content-addressed, so an
// entry can never be stale) bounded by a total cost. It spares the small-get
// path a Badger transaction per manifest and four syscalls per small chunk.
type memo[K comparable, V any] struct {
	mu    sync.Mutex
	max   int // total cost bound
	cost  int
	items map[K]*list.Element
	order *list.List // of *memoItem[K, V]; front = most recently used
}

type memoItem[K comparable, V any] struct {
	key  K
	val  V
	cost int
}

func newMemo[K comparable, V any](maxCost int) *memo[K, V] {
	return &memo[K, V]{max: maxCost, items: map[K]*list.Element{}, order: list.New()}
}

func (m *memo[K, V]) get(k K) (V, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[k]; ok {
		m.order.MoveToFront(e)
		return e.Value.(*memoItem[K, V]).val, true
	}
	var zero V
	return zero, false
}

// put adds k (cost > max is not kept), evicting the least recently used.
func (m *memo[K, V]) put(k K, v V, cost int) {
	if cost > m.max {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[k]; ok {
		m.order.MoveToFront(e)
		return
	}
	m.items[k] = m.order.PushFront(&memoItem[K, V]{key: k, val: v, cost: cost})
	m.cost += cost
	for m.cost > m.max {
		old := m.order.Remove(m.order.Back()).(*memoItem[K, V])
		delete(m.items, old.key)
		m.cost -= old.cost
	}
}

func (m *memo[K, V]) remove(k K) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.items[k]; ok {
		it := m.order.Remove(e).(*memoItem[K, V])
		delete(m.items, k)
		m.cost -= it.cost
	}
}
