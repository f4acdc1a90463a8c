package gridops

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/omst-project/omst/pkg/rpcbridge"
	"github.com/omst-project/omst/pkg/topology"
)

// The remote side is plain POSIX sh, with only what every Unix has (mkdir,
// cat, mv, rm, tr, date, uname, kill; ps where there is no /proc) and one
// of sha256sum, shasum or openssl for the binary's hash. A script goes to
// `sh -s` on its standard input (ScriptCommand), so that the login shell,
// whatever it is (csh takes no newline inside quotes), only runs sh; the
// copy, whose standard input is the binary, is one line (CopyCommand).
// Scripts print what they found and did as lines starting with Marker,
// which the parsers below read; everything else on standard output is
// ignored, and errors go to standard error. Commands in scripts read
// nothing from standard input (it is the script).

// ScriptCommand is the remote command that runs a script sent on its
// standard input.
const ScriptCommand = "sh -s"

// Marker starts every line a remote script reports on.
const Marker = "@@omst "

// configEOF ends the here-document that carries a configuration file.
const configEOF = "@@OMST-CONFIG-EOF@@"

// GridMarker is the file grid up leaves in DIR (the copy and the apply
// write it): `grid down --purge` removes a DIR only if it holds one, or,
// for a DIR an older grid up made, both bin/omst and home/config.toml.
const GridMarker = ".omst-grid-up"

// dirCheck defines, on one line (CopyCommand's line takes it too), the
// shell functions that keep grid up and down out of directories other
// users control:
//
//   - refuse MSG: "omst: MSG" on standard error; returns 1.
//   - dirok PATH own|up: PATH is a directory (not a symlink); "own" (DIR,
//     DIR/bin, DIR/home): owned by the ssh user and writable by no one
//     else (neither group nor other write); "up" (every directory above
//     DIR): owned by the ssh user or root, and not writable by others
//     unless sticky (as /tmp).
//   - dirsafe: DIR, its bin and home, and every directory above DIR are
//     dirok (of a DIR not made yet, every existing directory above it);
//     then D, B and H name DIR's physical path (symlinks resolved, so
//     that a link swapped later does not move the rest of the script).
//
// Modes and owners come from `ls -ldn` (POSIX): its first fields are the
// mode and the numeric owner, whatever the name.
const dirCheck = `refuse() { echo "omst: $*" >&2; return 1; }; ` +
	`dirok() { set -- "$1" "$2" $(ls -ldn "$1" 2>/dev/null); ` +
	`[ $# -ge 5 ] || { refuse "cannot read $1"; return 1; }; ` +
	`case "$3" in d*) ;; *) refuse "$1 is not a directory"; return 1 ;; esac; ` +
	`if [ "$2" = own ]; then ` +
	`[ "$5" = "$U" ] || { refuse "$1 is owned by uid $5, not by the ssh user (uid $U): refusing to use it"; return 1; }; ` +
	`case "$3" in ?????w*|????????w*) refuse "$1 is writable by other users ($3): refusing to use it (chmod go-w $1)"; return 1 ;; esac; ` +
	`else ` +
	`[ "$5" = "$U" ] || [ "$5" = 0 ] || { refuse "$1, above the omst directory, is owned by uid $5, neither root nor the ssh user (uid $U): refusing to use it"; return 1; }; ` +
	`case "$3" in ?????????[tT]*) ;; ?????w*|????????w*) refuse "$1, above the omst directory, is writable by other users and not sticky ($3): refusing to use it"; return 1 ;; esac; ` +
	`fi; }; ` +
	`dirsafe() { U=$(id -u) || return 1; dp=$D; ` +
	`while [ ! -e "$dp" ] && [ ! -L "$dp" ]; do dp=$(dirname "$dp"); done; ` +
	`DR=$(cd "$dp" 2>/dev/null && pwd -P) || { refuse "cannot enter $dp"; return 1; }; ` +
	`if [ "$dp" = "$D" ]; then dirok "$DR" own || return 1; ` +
	`for dd in "${DR%/}/bin" "${DR%/}/home"; do if [ -e "$dd" ] || [ -L "$dd" ]; then dirok "$dd" own || return 1; fi; done; ` +
	`else dirok "$DR" up || return 1; fi; ` +
	`dq=$DR; while [ "$dq" != / ]; do dq=${dq%/*}; [ -n "$dq" ] || dq=/; dirok "$dq" up || return 1; done; ` +
	`if [ "$dp" = "$D" ]; then D=$DR; B=$D/bin/omst; H=$D/home; fi; }; `

// prelude sets D, B and H (the host's directory, binary and home) and O
// (DIR as configured), defines dirCheck's functions, lockpid (the pid in HOME/lock), isdaemon PID (a live, not
// zombie, omst daemon: its command line has omst and daemon) and stopd T
// (SIGTERM to the home's daemon, SIGKILL after T seconds).
func prelude(h *topology.Host) string {
	return fmt.Sprintf(`D=%s; B=%s; H=%s; O=$D
%s
lockpid() {
  p=$(cat "$H/lock" 2>/dev/null) || p=
  case "$p" in ''|*[!0-9]*) p= ;; esac
  echo "$p"
}
isdaemon() {
  if [ -d /proc/self ]; then
    [ -r "/proc/$1/cmdline" ] || return 1
    c=$(tr '\000' ' ' < "/proc/$1/cmdline" 2>/dev/null) || return 1
  else
    kill -0 "$1" 2>/dev/null || return 1
    case "$(ps -o stat= -p "$1" 2>/dev/null)" in ''|Z*) return 1 ;; esac
    c=$(ps -o args= -p "$1" 2>/dev/null)
  fi
  case "$c" in *omst*daemon*) return 0 ;; esac
  return 1
}
pause() { sleep 0.1 2>/dev/null || sleep 1; }
stopd() {
  p=$(lockpid)
  if [ -z "$p" ] || ! isdaemon "$p"; then echo "%sstop none"; return 0; fi
  kill -TERM "$p" 2>/dev/null
  end=$(( $(date +%%s) + $1 ))
  while isdaemon "$p"; do
    if [ "$(date +%%s)" -ge "$end" ]; then
      kill -KILL "$p" 2>/dev/null
      n=0
      while isdaemon "$p" && [ $n -lt 50 ]; do pause; n=$((n+1)); done
      if isdaemon "$p"; then echo "omst daemon pid $p survived SIGKILL" >&2; return 1; fi
      echo "%sstop killed $p"; return 0
    fi
    pause
  done
  echo "%sstop stopped $p"
}
statusd() {
  if command -v timeout >/dev/null 2>&1; then t="timeout 30"; else t=; fi
  if out=$($t "$B" --home "$H" status --json 2>&1 </dev/null); then
    printf '%sstatus-begin\n%%s\n%sstatus-end\n' "$out"
  else
    echo "%sstatus-error $(printf '%%s' "$out" | tail -n 1)"
  fi
}
binhash() {
  s=$(sha256sum "$B" 2>/dev/null || shasum -a 256 "$B" 2>/dev/null || openssl dgst -sha256 -r "$B" 2>/dev/null) || s=
  echo "%sbinary ${s%%%% *}"
}
`, Quote(h.Dir), Quote(h.Bin()), Quote(h.Home()), dirCheck, Marker, Marker, Marker, Marker, Marker, Marker, Marker)
}

// ProbeScript looks at host h without changing anything: the platform, the
// binary's hash, the configuration, membership files, the daemon's pid and
// its status. It refuses (on standard error, exit status 1) a DIR that
// another user controls (dirCheck) before it reads or runs anything there.
func ProbeScript(h *topology.Host) string {
	return prelude(h) + `dirsafe || exit 1
echo "` + Marker + `uname $(uname -s) $(uname -m)"
[ -f "$B" ] && binhash
[ -f "$H/grid/member.cert" ] && echo "` + Marker + `cert"
[ -f "$H/grid/grid.key" ] && echo "` + Marker + `gridkey"
p=$(lockpid)
[ -n "$p" ] && isdaemon "$p" && echo "` + Marker + `pid $p"
if [ -f "$H/config.toml" ]; then
  echo "` + Marker + `config-begin"; cat "$H/config.toml"; echo; echo "` + Marker + `config-end"
fi
[ -x "$B" ] && statusd
echo "` + Marker + `end"
`
}

// markerLine writes GridMarker into DIR unless it is there.
const markerLine = `[ -f "$D/` + GridMarker + `" ] || echo "omst grid up installed omst here; grid down --purge removes it" > "$D/` + GridMarker + `" || exit 1; `

// CopyCommand is the remote command (one line, for any login shell) that
// installs the binary arriving on its standard input as DIR/bin/omst
// (through a temporary file and a rename, so that a running daemon keeps
// its own), leaves GridMarker in DIR, and reports the binary's hash. It
// refuses a DIR that another user controls (dirCheck), checked once DIR
// and DIR/bin exist.
func CopyCommand(h *topology.Host) string {
	line := fmt.Sprintf(`D=%s; B=%s; H=%s; `, Quote(h.Dir), Quote(h.Bin()), Quote(h.Home())) + dirCheck +
		`umask 022; mkdir -p "$D/bin" || exit 1; dirsafe || exit 1; ` + markerLine + `t="$D/bin/.omst.new.$$"; ` +
		`{ cat > "$t" && chmod 755 "$t" && mv -f "$t" "$B"; } || { rm -f "$t"; exit 1; }; ` +
		`s=$(sha256sum "$B" 2>/dev/null || shasum -a 256 "$B" 2>/dev/null || openssl dgst -sha256 -r "$B" 2>/dev/null) || s=; ` +
		`echo "` + Marker + `binary ${s%% *}"; echo "` + Marker + `end"`
	return "sh -c " + Quote(line)
}

// ApplyScript does what a says on host h: writes config as
// HOME/config.toml, stops the daemon (SIGKILL after stopWait), starts it
// detached (waiting at most startWait for it to answer), and prints its
// status. It refuses a DIR that another user controls (dirCheck), checked
// once DIR and HOME exist, and leaves GridMarker in DIR.
func ApplyScript(h *topology.Host, a Action, config string, stopWait, startWait time.Duration) string {
	var b strings.Builder
	b.WriteString(prelude(h))
	b.WriteString("umask 022; mkdir -p \"$H\" || exit 1\ndirsafe || exit 1\nchmod 700 \"$H\" || exit 1\n" + markerLine + "\n")
	if a.WriteConfig {
		if !strings.HasSuffix(config, "\n") {
			config += "\n"
		}
		fmt.Fprintf(&b, "umask 077\ncat > \"$H/.config.toml.new\" <<'%s'\n%s%s\nmv -f \"$H/.config.toml.new\" \"$H/config.toml\" || exit 1\n",
			configEOF, config, configEOF)
	}
	if a.Stop {
		fmt.Fprintf(&b, "stopd %d || exit 1\n", seconds(stopWait))
	}
	if a.Start {
		fmt.Fprintf(&b, "\"$B\" --home \"$H\" daemon --detach --detach-timeout %ds </dev/null >/dev/null || exit 1\n", seconds(startWait))
	}
	b.WriteString("statusd\necho \"" + Marker + "end\"\n")
	return b.String()
}

// purgeCheck defines purgeok, run after dirsafe (D is then DIR's physical
// path): DIR (as configured: O) has no ".." component, and, if it exists,
// is neither / nor the ssh user's home directory nor above it, and looks
// like a directory grid up made (GridMarker in it, or both bin/omst and
// home/config.toml, as an older grid up left them).
const purgeCheck = `purgeok() {
  case "/$O/" in */../*) refuse "dir $O has a .. component: refusing to purge it"; return 1 ;; esac
  [ -d "$D" ] || return 0
  [ "$D" != / ] || { refuse "dir $O is /: refusing to purge it"; return 1; }
  hp=$(cd "$HOME" 2>/dev/null && pwd -P) || hp=
  case "$hp/" in "$D"/*) refuse "dir $O is $D, the ssh user's home directory ($hp) or above it: refusing to purge it"; return 1 ;; esac
  [ -f "$D/` + GridMarker + `" ] && return 0
  [ -f "$B" ] && [ -f "$H/config.toml" ] && return 0
  refuse "dir $O ($D) does not look like a directory omst grid up made (no ` + GridMarker + `, no bin/omst with home/config.toml): refusing to purge it"
}
`

// CheckPurgeDir refuses, before anything runs, a DIR that `grid down
// --purge` must never remove from: empty, /, "." (the ssh user's home
// directory itself), or with a ".." component. The remote script checks
// again, on the resolved path (purgeCheck).
func CheckPurgeDir(dir string) error {
	clean := path.Clean(dir)
	switch {
	case dir == "":
		return errors.New("dir is empty")
	case clean == "/":
		return fmt.Errorf("dir %q is /", dir)
	case clean == ".":
		return fmt.Errorf("dir %q is the ssh user's home directory itself", dir)
	case slices.Contains(strings.Split(dir, "/"), ".."):
		return fmt.Errorf("dir %q has a .. component", dir)
	}
	return nil
}

// DownScript stops host h's daemon (SIGKILL after stopWait) and, with
// purge, removes what omst put in DIR: the binary, the home and
// GridMarker, then DIR itself if nothing else is left in it. A home
// holding the grid key (the root of a closed grid) keeps it and its
// identity: HOME/grid and HOME/identity.key stay (and the marker), so that
// the grid outlives a purge. It refuses, before it stops anything, a DIR
// another user controls (dirCheck) and, with purge, a DIR purgeCheck
// refuses.
func DownScript(h *topology.Host, purge bool, stopWait time.Duration) string {
	s := prelude(h) + "dirsafe || exit 1\n"
	if purge {
		s += purgeCheck + "purgeok || exit 1\n"
	}
	s += fmt.Sprintf("stopd %d || exit 1\n", seconds(stopWait))
	if purge {
		s += `if [ -d "$D" ]; then
  rm -f "$B" "$D/bin/.omst.new."*; rmdir "$D/bin" 2>/dev/null
  if [ -f "$H/grid/grid.key" ]; then
    for f in "$H"/* "$H"/.[!.]* "$H"/..?*; do
      case "$f" in "$H/grid"|"$H/identity.key") ;; *) rm -rf "$f" ;; esac
    done
    echo "` + Marker + `purge kept-grid"
  else
    rm -rf "$H"; rm -f "$D/` + GridMarker + `"; rmdir "$D" 2>/dev/null
    if [ -d "$D" ]; then echo "` + Marker + `purge left"; else echo "` + Marker + `purge removed"; fi
  fi
else
  echo "` + Marker + `purge absent"
fi
`
	}
	return s + "echo \"" + Marker + "end\"\n"
}

func seconds(d time.Duration) int { return max(1, int((d+time.Second-1)/time.Second)) }

// TokenScript issues the join tokens reqs asks for with root's binary and
// home (`omst grid token`, each valid ttl), one after the other; ParseTokens
// reads its output.
func TokenScript(root *topology.Host, reqs []TokenRequest, ttl time.Duration) string {
	var b strings.Builder
	b.WriteString(prelude(root))
	for i, r := range reqs {
		fmt.Fprintf(&b, "echo \"%stoken-begin %d\"\n\"$B\" --home \"$H\" -q grid token --role %s --prefix %s --ttl %ds 2>&1 </dev/null\necho \"%stoken-end $?\"\n",
			Marker, i, Quote(r.Role), Quote(r.Prefix), seconds(ttl), Marker)
	}
	b.WriteString("echo \"" + Marker + "end\"\n")
	return b.String()
}

// ParseTokens reads TokenScript's output: the token of each request, or
// why it failed, in order.
func ParseTokens(out string, n int) (tokens []string, errs []error, err error) {
	if !strings.Contains(out, Marker+"end") {
		return nil, nil, fmt.Errorf("the token script stopped early")
	}
	tokens, errs = make([]string, n), make([]error, n)
	for i := range errs {
		errs[i] = fmt.Errorf("no token issued")
	}
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); i++ {
		rest, ok := strings.CutPrefix(lines[i], Marker+"token-begin ")
		if !ok {
			continue
		}
		k, perr := strconv.Atoi(rest)
		if perr != nil || k < 0 || k >= n {
			continue
		}
		var body []string
		for i++; i < len(lines) && !strings.HasPrefix(lines[i], Marker+"token-end "); i++ {
			if l := strings.TrimSpace(lines[i]); l != "" {
				body = append(body, l)
			}
		}
		if i == len(lines) {
			break
		}
		code := strings.TrimPrefix(lines[i], Marker+"token-end ")
		switch {
		case code != "0":
			errs[k] = fmt.Errorf("omst grid token on the root (exit %s): %s", code, strings.Join(body, " / "))
		case len(body) == 0:
			errs[k] = fmt.Errorf("omst grid token on the root printed nothing")
		default:
			tokens[k], errs[k] = body[len(body)-1], nil
		}
	}
	return tokens, errs, nil
}

// Report is what a remote script printed on its marker lines.
type Report struct {
	Observation
	// Stop is "none", "stopped" or "killed" (stopd), "" if not run.
	Stop string
	// Purge is "removed", "left", "kept-grid" or "absent" (DownScript).
	Purge string
}

// ParseReport reads the marker lines of a probe, copy, apply or down
// script's output. It fails if the script did not reach its end.
func ParseReport(out string) (Report, error) {
	var r Report
	complete := false
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); i++ {
		rest, ok := strings.CutPrefix(lines[i], Marker)
		if !ok {
			continue
		}
		key, val, _ := strings.Cut(rest, " ")
		switch key {
		case "uname":
			r.OS, r.Machine, _ = strings.Cut(val, " ")
		case "binary":
			r.HasBinary = true
			if f := strings.Fields(val); len(f) > 0 {
				r.BinSHA256 = strings.ToLower(f[0])
			}
			if len(r.BinSHA256) != 64 {
				r.BinSHA256 = ""
			}
		case "cert":
			r.HasCert = true
		case "gridkey":
			r.HasGridKey = true
		case "pid":
			r.Pid, _ = strconv.Atoi(val)
		case "stop":
			r.Stop, _, _ = strings.Cut(val, " ")
		case "purge":
			r.Purge = val
		case "config-begin":
			body, next, found := section(lines, i+1, Marker+"config-end")
			if !found {
				return r, fmt.Errorf("the configuration file's end is missing")
			}
			// The script adds a newline after the file's last byte, which
			// the line that ends the section took.
			r.HasConfig, r.Config = true, body
			i = next
		case "status-begin":
			body, next, found := section(lines, i+1, Marker+"status-end")
			if !found {
				return r, fmt.Errorf("the status's end is missing")
			}
			i = next
			var st rpcbridge.Status
			j := strings.IndexByte(body, '{')
			if j < 0 {
				r.StatusErr = "omst status printed no JSON"
				break
			}
			if err := json.Unmarshal([]byte(body[j:]), &st); err != nil {
				r.StatusErr = "omst status: " + err.Error()
				break
			}
			r.Status = &st
		case "status-error":
			r.StatusErr = val
		case "end":
			complete = true
		}
	}
	if !complete {
		return r, fmt.Errorf("the remote script stopped early")
	}
	return r, nil
}

// section returns the lines from start up to the line end (exclusive)
// joined with newlines, and end's index.
func section(lines []string, start int, end string) (string, int, bool) {
	for j := start; j < len(lines); j++ {
		if lines[j] == end {
			return strings.Join(lines[start:j], "\n"), j, true
		}
	}
	return "", len(lines), false
}
