package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// ConfigFile is the daemon's configuration file in its home. Its keys are
// the daemon's flag names (without the dashes); a flag given on the
// command line wins over the file, the file over the flag's default.
const ConfigFile = "config.toml"

// notInConfig are daemon flags a configuration file may not set.
var notInConfig = map[string]bool{"config": true, "help": true, "home": true}

// withConfigFile makes daemon read HOME/config.toml (or --config FILE)
// before it runs.
func withConfigFile(g *globals, daemon *cobra.Command) *cobra.Command {
	daemon.Flags().String("config", "", "configuration file (TOML; keys are these flags' names, e.g. site = \"a\", parent = [\"/ip4/...\"];\n"+
		"flags given here win over it; default HOME/"+ConfigFile+" when it exists; see omst config show)")
	daemon.PreRunE = func(cmd *cobra.Command, _ []string) error {
		set, err := applyConfig(cmd.Flags(), configPath(g, cmd.Flags()))
		if cmd.Annotations == nil {
			cmd.Annotations = map[string]string{}
		}
		cmd.Annotations[fromFileAnnotation] = strings.Join(set, ",") // for writeRunningSettings
		return err
	}
	return daemon
}

// configPath is --config, else HOME/config.toml.
func configPath(g *globals, fs *pflag.FlagSet) string {
	if p, _ := fs.GetString("config"); p != "" {
		return p
	}
	return filepath.Join(g.homeDir(), ConfigFile)
}

// applyConfig sets every flag of fs that the command line did not set and
// the file at path does, and returns the names it set. A missing file is
// no error unless it was named with --config; an unknown key, a key that
// may not be set there or a value of the wrong type is, naming the file,
// the line and the key.
func applyConfig(flags *pflag.FlagSet, path string) ([]string, error) {
	doc, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) && !flags.Changed("config") {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("configuration: %w", err)
	}
	var m map[string]any
	if err := toml.Unmarshal(doc, &m); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, _ := de.Position()
			return nil, usageError{fmt.Errorf("%s:%d: %s", path, row, de.Error())}
		}
		return nil, usageError{fmt.Errorf("%s: %w", path, err)}
	}
	var set []string
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		at := fmt.Sprintf("%s:%d", path, keyLine(doc, k))
		f := flags.Lookup(k)
		if f == nil || notInConfig[k] {
			return nil, usageError{fmt.Errorf("%s: unknown key %q (the keys are `omst daemon` flag names: %s)", at, k, strings.Join(configKeys(flags), ", "))}
		}
		if flags.Changed(k) {
			continue // the command line wins
		}
		vals, err := configValues(f, m[k])
		if err != nil {
			return nil, usageError{fmt.Errorf("%s: %s: %w", at, k, err)}
		}
		for _, v := range vals {
			if err := f.Value.Set(v); err != nil {
				return nil, usageError{fmt.Errorf("%s: %s = %q: %w", at, k, v, err)}
			}
		}
		f.Changed = true
		set = append(set, k)
	}
	return set, nil
}

// configValues turns a TOML value into the strings f.Value.Set takes: an
// array for a repeatable flag, a scalar of the flag's type otherwise.
func configValues(f *pflag.Flag, v any) ([]string, error) {
	typ := f.Value.Type()
	repeatable := strings.HasSuffix(typ, "Array") || strings.HasSuffix(typ, "Slice")
	if arr, ok := v.([]any); ok {
		if !repeatable {
			return nil, fmt.Errorf("a list, but it takes one value (%s)", typ)
		}
		var out []string
		for _, x := range arr {
			s, err := scalar(x)
			if err != nil {
				return nil, err
			}
			out = append(out, s)
		}
		return out, nil
	}
	s, err := scalar(v)
	if err != nil {
		return nil, err
	}
	switch typ {
	case "bool":
		if _, ok := v.(bool); !ok {
			return nil, fmt.Errorf("want true or false, not %q", s)
		}
	case "int":
		if _, ok := v.(int64); !ok {
			return nil, fmt.Errorf("want an integer, not %q", s)
		}
	}
	return []string{s}, nil
}

func scalar(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case bool:
		return strconv.FormatBool(x), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case time.Duration:
		return x.String(), nil
	}
	return "", fmt.Errorf("a value of type %T: want a string, number, boolean or a list of strings", v)
}

// keyLine returns the line of key's first assignment in doc (1 when not
// found, e.g. a quoted key).
func keyLine(doc []byte, key string) int {
	for i, line := range bytes.Split(doc, []byte("\n")) {
		t := strings.TrimSpace(string(line))
		for _, k := range []string{key, `"` + key + `"`} {
			if rest, ok := strings.CutPrefix(t, k); ok && strings.HasPrefix(strings.TrimSpace(rest), "=") {
				return i + 1
			}
		}
	}
	return 1
}

// configKeys lists the keys a configuration file may set.
func configKeys(fs *pflag.FlagSet) []string {
	var out []string
	fs.VisitAll(func(f *pflag.Flag) {
		if !notInConfig[f.Name] {
			out = append(out, f.Name)
		}
	})
	return out
}

// fromFileAnnotation is the daemon command's annotation listing the flags
// its configuration file set (comma-separated).
const fromFileAnnotation = "omst-config-from-file"

// runningSettingsPath is where the daemon of pid, running on home, keeps
// its settings for omst config show (removed when it stops; named by pid
// so that a second daemon refused on the home never touches the first's).
func runningSettingsPath(home string, pid int) string {
	return filepath.Join(home, fmt.Sprintf("settings.%d.json", pid))
}

// writeRunningSettings writes the settings of the daemon command cmd (its
// flags, after the configuration file was applied) to home as JSON
// {key: {value, source}}, source "flag", "file" or "default", mode 0600;
// stop removes the file. It must be called by the daemon holding the
// home's lock: it removes the files of daemons killed before their stop.
func writeRunningSettings(home string, cmd *cobra.Command) (stop func(), err error) {
	fromFile := strings.Split(cmd.Annotations[fromFileAnnotation], ",")
	out := map[string]configEntry{}
	for _, k := range configKeys(cmd.Flags()) {
		f := cmd.Flags().Lookup(k)
		src := "default"
		switch {
		case slices.Contains(fromFile, k):
			src = "file"
		case f.Changed:
			src = "flag"
		}
		out[k] = configEntry{Value: flagValue(f), Source: src}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, err
	}
	path := runningSettingsPath(home, os.Getpid())
	// Only the daemon holding the home's lock gets here: another's
	// settings file is a killed daemon's, stale.
	old, _ := filepath.Glob(filepath.Join(home, "settings.*.json"))
	for _, f := range old {
		if f != path {
			os.Remove(f)
		}
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return nil, err
	}
	return func() { os.Remove(path) }, nil
}

// runningSettings returns the settings of the daemon running on g's home
// and its pid, if one answers on the socket and left its settings; ok is
// false otherwise.
func runningSettings(g *globals) (map[string]configEntry, int, bool) {
	b, err := os.ReadFile(filepath.Join(g.homeDir(), "lock"))
	if err != nil {
		return nil, 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return nil, 0, false
	}
	doc, err := os.ReadFile(runningSettingsPath(g.homeDir(), pid))
	if err != nil {
		return nil, 0, false
	}
	cl, err := g.dial() // the daemon of that pid answers, not a stale file's
	if err != nil {
		return nil, 0, false
	}
	cl.Close()
	var m map[string]configEntry
	if err := json.Unmarshal(doc, &m); err != nil {
		return nil, 0, false
	}
	return m, pid, true
}

// configCmd is `omst config show`.
func configCmd(g *globals) *cobra.Command {
	c := &cobra.Command{Use: "config", Short: "The daemon's configuration file (HOME/" + ConfigFile + ")", Args: cobra.NoArgs}
	var asJSON, fromFile bool
	show := &cobra.Command{
		Use:   "show [--config FILE]",
		Short: "Print the daemon configuration in effect: every setting, its value and where it comes from (file or default)",
		Long: "Print the settings of the daemon running on this home: its flags over the configuration\n" +
			"file as it was when it started over the defaults. With no daemon running, or with --file or\n" +
			"--config, the settings `omst daemon` would run with: the file's values over the defaults (flags\n" +
			"given to `omst daemon` itself win over both). The output is a valid configuration file: keys\n" +
			"are the daemon's flag names.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if p, _ := cmd.Flags().GetString("config"); p == "" && !fromFile {
				if m, pid, ok := runningSettings(g); ok {
					return printEntries(cmd, m, fmt.Sprintf("# omst daemon settings of the daemon running on %s (pid %d); --file: what %s gives", g.homeDir(), pid, ConfigFile), asJSON)
				}
			}
			d := withConfigFile(g, daemonCmd(g))
			if p, _ := cmd.Flags().GetString("config"); p != "" {
				if err := d.Flags().Set("config", p); err != nil {
					return err
				}
			}
			path := configPath(g, d.Flags())
			set, err := applyConfig(d.Flags(), path)
			if err != nil {
				return err
			}
			return printConfig(cmd, d.Flags(), path, set, asJSON)
		},
	}
	show.Flags().String("config", "", "configuration file (default HOME/"+ConfigFile+")")
	show.Flags().BoolVar(&asJSON, "json", false, "JSON: {key: {value, source}}, source flag, file or default")
	show.Flags().BoolVar(&fromFile, "file", false, "what the configuration file gives (as the next start would use), not the running daemon's settings")
	c.AddCommand(show)
	return c
}

type configEntry struct {
	Value  any    `json:"value"`
	Source string `json:"source"` // "flag" (a running daemon's command line), "file" or "default"
}

func printConfig(cmd *cobra.Command, fs *pflag.FlagSet, path string, set []string, asJSON bool) error {
	out := map[string]configEntry{}
	for _, k := range configKeys(fs) {
		f := fs.Lookup(k)
		src := "default"
		if slices.Contains(set, k) {
			src = "file"
		}
		out[k] = configEntry{Value: flagValue(f), Source: src}
	}
	return printEntries(cmd, out, fmt.Sprintf("# omst daemon configuration in effect (file: %s)", path), asJSON)
}

// printEntries prints the settings m under the comment line header, as
// TOML (each not a default marked with where it comes from), or as JSON.
func printEntries(cmd *cobra.Command, m map[string]configEntry, header string, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(cmd.OutOrStdout())
		enc.SetIndent("", "  ")
		return enc.Encode(m)
	}
	w := cmd.OutOrStdout()
	fmt.Fprintln(w, header)
	for _, k := range slices.Sorted(maps.Keys(m)) {
		e := m[k]
		b, err := toml.Marshal(map[string]any{k: e.Value})
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "%s", strings.TrimRight(string(b), "\n"))
		switch e.Source {
		case "file":
			fmt.Fprint(w, "  # from the file")
		case "flag":
			fmt.Fprint(w, "  # from the command line")
		}
		fmt.Fprintln(w)
	}
	return nil
}

// flagValue is f's value as a TOML/JSON value of its type.
func flagValue(f *pflag.Flag) any {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		v := sv.GetSlice()
		if v == nil {
			v = []string{}
		}
		return v
	}
	switch f.Value.Type() {
	case "bool":
		b, _ := strconv.ParseBool(f.Value.String())
		return b
	case "int":
		n, _ := strconv.ParseInt(f.Value.String(), 10, 64)
		return n
	}
	return f.Value.String()
}
