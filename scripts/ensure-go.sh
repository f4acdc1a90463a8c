#!/usr/bin/env bash
# Prints the path of a `go` command of version >= 1.26, installing one if
# needed: the official toolchain zip from the Go module proxy (the same one
# GOTOOLCHAIN=auto uses), unpacked under ${XDG_CACHE_HOME:-~/.cache}/omst-go.
# All messages go to stderr; stdout is only the path.
set -euo pipefail
want=1.26.8
ok() { # ok GO: is GO a go command of version >= 1.26?
  local v
  v=$("$1" env GOVERSION 2>/dev/null) || return 1
  v=${v#go}
  local major=${v%%.*} rest=${v#*.}
  local minor=${rest%%.*}
  minor=${minor%%[!0-9]*}
  [ "$major" -gt 1 ] || { [ "$major" -eq 1 ] && [ "${minor:-0}" -ge 26 ]; }
}
for g in "${GO:-}" "$(command -v go || true)" /usr/local/go/bin/go; do
  if [ -n "$g" ] && [ -x "$g" ] && ok "$g"; then echo "$g"; exit 0; fi
done
case "$(uname -m)" in
  x86_64) arch=amd64 ;;
  aarch64|arm64) arch=arm64 ;;
  *) echo "ensure-go: no Go >= 1.26 found and no toolchain for $(uname -m); install Go from https://go.dev/dl/" >&2; exit 1 ;;
esac
os=$(uname -s | tr A-Z a-z)
dir="${XDG_CACHE_HOME:-$HOME/.cache}/omst-go"
g="$dir/golang.org/toolchain@v0.0.1-go$want.$os-$arch/bin/go"
if [ -x "$g" ] && ok "$g"; then echo "$g"; exit 0; fi
command -v unzip >/dev/null || { echo "ensure-go: installing unzip" >&2; apt-get install -y -qq unzip >&2 || { apt-get update -qq >&2 && apt-get install -y -qq unzip >&2; }; }
url="${GOPROXY_URL:-https://proxy.golang.org}/golang.org/toolchain/@v/v0.0.1-go$want.$os-$arch.zip"
echo "ensure-go: no Go >= 1.26 found; downloading go$want from $url" >&2
mkdir -p "$dir"
tmp=$(mktemp "$dir/dl.XXXXXX")
trap 'rm -f "$tmp"' EXIT
curl -fsSL --retry 3 -o "$tmp" "$url" >&2
unzip -q -o "$tmp" -d "$dir" >&2
chmod +x "$dir/golang.org/toolchain@v0.0.1-go$want.$os-$arch/bin/"* "$dir/golang.org/toolchain@v0.0.1-go$want.$os-$arch/pkg/tool/"*/* 2>/dev/null || true
ok "$g" || { echo "ensure-go: downloaded toolchain does not run: $g" >&2; exit 1; }
echo "$g"
