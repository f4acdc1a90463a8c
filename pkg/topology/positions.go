package topology

import (
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2/unstable"
)

// positions maps the paths of a document's keys, tables and array
// elements to the line where each first appears. A path is the dotted key
// with the index of each array element after its key: "site[1].workers[0]",
// "site[0].head.host", "defaults.port".
type positions struct {
	lines map[string]int
	keys  map[int][]keyStart // by line, in order
}

// keyStart is where a key (each part of a dotted one) is written.
type keyStart struct {
	col  int
	path string
}

// indexPositions walks the document's syntax tree once. It is best effort:
// it stops at a syntax error (which the decoder reports with its own
// position) and is blind to quoted keys with dots or brackets in them
// (which the schema has none of, so they fail as unknown keys first).
func indexPositions(doc []byte) positions {
	pos := positions{lines: map[string]int{}, keys: map[int][]keyStart{}}
	var p unstable.Parser
	p.Reset(doc)
	arrays := map[string]int{} // path of an array of tables -> its tables so far
	cur := ""                  // path of the current table
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table, unstable.ArrayTable:
			cur = ""
			it := e.Key()
			for it.Next() {
				k := it.Node()
				cur = joinPath(cur, string(k.Data))
				last := it.IsLast()
				if last && e.Kind == unstable.ArrayTable {
					arrays[cur]++
					pos.add(cur, &p, k)
				}
				if n := arrays[cur]; n > 0 {
					cur += "[" + strconv.Itoa(n-1) + "]"
				}
				pos.add(cur, &p, k)
				pos.key(cur, &p, k)
			}
		case unstable.KeyValue:
			pos.keyValue(cur, &p, e)
		}
	}
	return pos
}

// keyValue records the key of key-value kv under table path table, and
// what its value holds.
func (pos positions) keyValue(table string, p *unstable.Parser, kv *unstable.Node) {
	path := table
	var line int
	it := kv.Key()
	for it.Next() {
		k := it.Node()
		path = joinPath(path, string(k.Data))
		line = pos.add(path, p, k)
		pos.key(path, p, k)
	}
	pos.value(path, line, p, kv.Value())
}

// value records the elements of an array and the keys of an inline table
// at path, whose key is on line.
func (pos positions) value(path string, line int, p *unstable.Parser, v *unstable.Node) {
	switch v.Kind {
	case unstable.Array:
		i := 0
		it := v.Children()
		for it.Next() {
			el := it.Node()
			if el.Kind == unstable.Comment {
				continue
			}
			ep := path + "[" + strconv.Itoa(i) + "]"
			i++
			l := line
			if el.Kind != unstable.Array { // nested arrays have no range of their own
				l = pos.add(ep, p, el)
			} else if _, ok := pos.lines[ep]; !ok {
				pos.lines[ep] = line
			}
			pos.value(ep, l, p, el)
		}
	case unstable.InlineTable:
		it := v.Children()
		for it.Next() {
			if kv := it.Node(); kv.Kind == unstable.KeyValue {
				pos.keyValue(path, p, kv)
			}
		}
	}
}

// add records path at n's line unless path has a line already, and
// returns the line path has.
func (pos positions) add(path string, p *unstable.Parser, n *unstable.Node) int {
	if l, ok := pos.lines[path]; ok {
		return l
	}
	l := p.Shape(n.Raw).Start.Line
	pos.lines[path] = l
	return l
}

// key records that key node k, whose path is path, starts where it does.
func (pos positions) key(path string, p *unstable.Parser, k *unstable.Node) {
	at := p.Shape(k.Raw).Start
	pos.keys[at.Line] = append(pos.keys[at.Line], keyStart{at.Column, path})
}

// keyAt returns the path of the last key written on line at or before
// column col, or "".
func (pos positions) keyAt(line, col int) string {
	path := ""
	for _, k := range pos.keys[line] {
		if k.col <= col {
			path = k.path
		}
	}
	return path
}

// line returns the line of path, else of its nearest recorded ancestor
// ("site[0].head.host", "site[0].head", "site[0]", "site"), else 1.
func (pos positions) line(path string) int {
	for path != "" {
		if l, ok := pos.lines[path]; ok {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 1
}

// joinPath appends key k to path.
func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// keyOf is path's key without indices: "site[1].workers[0]" is
// "site.workers".
func keyOf(path string) string {
	var b strings.Builder
	skip := false
	for i := 0; i < len(path); i++ {
		switch c := path[i]; {
		case c == '[':
			skip = true
		case c == ']':
			skip = false
		case !skip:
			b.WriteByte(c)
		}
	}
	return b.String()
}
