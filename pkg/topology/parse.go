package topology

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// MaxFileSize bounds the topology files ParseFile reads.
const MaxFileSize = 4 << 20

// The file's shape, as the decoder fills it. A nil pointer or slice is a
// key the file leaves out; every table rejects keys it does not list.
type (
	rawFile struct {
		Defaults rawSettings `toml:"defaults"`
		Root     *rawHost    `toml:"root"`
		Site     []rawSite   `toml:"site"`
	}
	rawSettings struct {
		SSHUser        *string  `toml:"ssh_user"`
		SSHPort        *int64   `toml:"ssh_port"`
		SSHKey         *string  `toml:"ssh_key"`
		SSHJump        *string  `toml:"ssh_jump"`
		Dir            *string  `toml:"dir"`
		CacheSize      any      `toml:"cache_size"` // "20G" or bytes
		ChunkSize      any      `toml:"chunk_size"` // "1M" or bytes
		Port           *int64   `toml:"port"`
		Listen         []string `toml:"listen"`
		RelayMode      *string  `toml:"relay_mode"`
		DaemonArgs     []string `toml:"daemon_args"`
		FallbackToRoot *bool    `toml:"fallback_to_root"`
		TrustedLAN     *bool    `toml:"trusted_lan"`
		BulkSendfile   *bool    `toml:"bulk_sendfile"`
	}
	rawHost struct {
		Host    *string `toml:"host"`
		Address *string `toml:"address"`
		rawSettings
	}
	rawSite struct {
		Name     *string     `toml:"name"`
		Defaults rawSettings `toml:"defaults"`
		Head     *rawHost    `toml:"head"`
		Workers  []string    `toml:"workers"`
		Worker   []rawHost   `toml:"worker"`
	}
)

// ParseFile reads the topology file at path and parses it with Parse;
// its errors carry path as their File. An error reading the file is
// returned as it is (not an ErrorList).
func ParseFile(path string) (*Topology, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(io.LimitReader(f, MaxFileSize+1)); err != nil {
		return nil, err
	}
	if b.Len() > MaxFileSize {
		return nil, ErrorList{{File: path, Line: 1, Msg: fmt.Sprintf("larger than %d bytes: not a topology file", MaxFileSize)}}
	}
	t, err := Parse(b.Bytes())
	var l ErrorList
	if errors.As(err, &l) {
		return nil, l.withFile(path)
	}
	return t, err
}

// Parse decodes a topology document (TOML), validates it and resolves
// every host's settings. It returns either a Topology with at least the
// root in it, or an ErrorList with every error it found, each with its line
// and key: syntax errors, unknown keys and values of the wrong type (then
// nothing else is checked), else missing or empty tables and keys,
// malformed host ranges, hosts declared twice (also through overlapping
// ranges), site names given twice, and bad values (sizes, ports, relay
// modes, listen addresses, ssh settings, daemon flags the topology sets
// itself).
func Parse(doc []byte) (*Topology, error) {
	var f rawFile
	pos := indexPositions(doc)
	if err := toml.NewDecoder(bytes.NewReader(doc)).DisallowUnknownFields().Decode(&f); err != nil {
		return nil, decodeErrors(err, pos)
	}
	r := &resolver{pos: pos, hosts: map[string]declared{}, sites: map[string]int{}}
	t := r.resolve(&f)
	if len(r.errs) > 0 {
		return nil, r.errs.sorted()
	}
	return t, nil
}

// decodeErrors turns the decoder's error into an ErrorList. The key of
// each error is the last key written on its line up to its column, as
// the document's positions have it (the decoder's own key path loses the
// tables of inline tables), else the decoder's.
func decodeErrors(err error, pos positions) ErrorList {
	keyOfError := func(e *toml.DecodeError) (int, []string) {
		line, col := e.Position()
		if p := pos.keyAt(line, col); p != "" {
			return max(line, 1), strings.Split(keyOf(p), ".")
		}
		return max(line, 1), e.Key()
	}
	var se *toml.StrictMissingError
	if errors.As(err, &se) {
		var l ErrorList
		for i := range se.Errors {
			line, key := keyOfError(&se.Errors[i])
			l = append(l, &Error{Line: line, Key: strings.Join(key, "."), Msg: unknownKey(key)})
		}
		return l.sorted()
	}
	var de *toml.DecodeError
	if errors.As(err, &de) {
		line, key := keyOfError(de)
		return ErrorList{{Line: line, Key: strings.Join(key, "."), Msg: decodeMessage(key, de.Error())}}
	}
	return ErrorList{{Line: 1, Msg: strings.TrimPrefix(err.Error(), "toml: ")}}
}

// The keys each table of the schema has, by the table's key path.
var (
	settingKeys = []string{"ssh_user", "ssh_port", "ssh_key", "ssh_jump", "dir", "cache_size", "chunk_size",
		"port", "listen", "relay_mode", "daemon_args", "fallback_to_root", "trusted_lan", "bulk_sendfile"}
	hostKeys  = append([]string{"host", "address"}, settingKeys...)
	tableKeys = map[string][]string{
		"":              {"defaults", "root", "site"},
		"defaults":      settingKeys,
		"root":          hostKeys,
		"site":          {"name", "defaults", "head", "workers", "worker"},
		"site.defaults": settingKeys,
		"site.head":     hostKeys,
		"site.worker":   hostKeys,
	}
)

// unknownKey explains an unknown key, suggesting the nearest known one.
func unknownKey(key []string) string {
	if len(key) == 0 {
		return "unknown key"
	}
	last := key[len(key)-1]
	switch last {
	case "parent", "parents", "fallback", "fallbacks":
		return "unknown key: the tree follows the file's structure (a head's parent is the root, a worker's its site's head; fallback_to_root adds the root as a worker's fallback), so parents are not written"
	}
	table := strings.Join(key[:len(key)-1], ".")
	known, ok := tableKeys[table]
	if !ok {
		return "unknown key"
	}
	if strings.HasPrefix(table, "site.") && slices.Contains(tableKeys["site"], last) {
		return fmt.Sprintf("unknown key in [%s]: a site's %s goes right after its [[site]] line, before its [site.*] tables", table, last)
	}
	if table == "" && slices.Contains(tableKeys["site"], last) {
		return fmt.Sprintf("unknown key: a site's %s goes after its [[site]] line", last)
	}
	if s := nearest(last, known); s != "" {
		return fmt.Sprintf("unknown key (did you mean %s?)", s)
	}
	return "unknown key (this table has " + strings.Join(known, ", ") + ")"
}

// nearest returns the word of known closest to w, if it is close: within
// a few edits, or the only one w begins ("relay" for relay_mode).
func nearest(w string, known []string) string {
	w = strings.ToLower(w)
	best, bestD := "", len(w)/3+2
	var prefixed []string
	for _, k := range known {
		if d := editDistance(w, k); d < bestD {
			best, bestD = k, d
		}
		if len(w) >= 3 && strings.HasPrefix(k, w) {
			prefixed = append(prefixed, k)
		}
	}
	if best == "" && len(prefixed) == 1 {
		return prefixed[0]
	}
	return best
}

// editDistance is the Levenshtein distance of a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			c := prev[j-1]
			if a[i-1] != b[j-1] {
				c++
			}
			cur[j] = min(c, prev[j]+1, cur[j-1]+1)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// wants says what each key's value must be, for type errors.
var wants = map[string]string{
	"defaults": "a table ([defaults])", "root": `a table ([root] with host = "...")`,
	"site": "tables ([[site]], one per site)", "name": "a string", "head": `a table ([site.head] with host = "...")`,
	"workers": `a list of strings (workers = ["node[01-64]"])`, "worker": `tables ([[site.worker]] with host = "...")`,
	"host": "a string", "address": "a string", "ssh_user": "a string", "ssh_key": "a string", "ssh_jump": "a string",
	"dir": "a string", "relay_mode": "a string", "ssh_port": "an integer", "port": "an integer",
	"listen": "a list of strings", "daemon_args": "a list of strings", "fallback_to_root": "true or false", "trusted_lan": "true or false",
	"bulk_sendfile": "true or false",
}

var typeErrorRE = regexp.MustCompile(`^toml: cannot decode TOML (\w+(?: \w+)?) into `)

// decodeMessage rewrites the decoder's message msg about key for people:
// a type error says what the key wants instead of naming Go types.
func decodeMessage(key []string, msg string) string {
	if m := typeErrorRE.FindStringSubmatch(msg); m != nil && len(key) > 0 {
		if want, ok := wants[key[len(key)-1]]; ok {
			return fmt.Sprintf("want %s, not %s", want, article(m[1]))
		}
		return "a " + m[1] + " does not belong here"
	}
	return strings.TrimPrefix(msg, "toml: ")
}

// article prefixes a TOML type name with "a" or "an".
func article(w string) string {
	if w != "" && strings.ContainsRune("aeiou", rune(w[0])) {
		return "an " + w
	}
	return "a " + w
}
