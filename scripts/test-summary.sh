#!/bin/sh
# The last line of make test: "make test: all passed", followed by the
# parts that skipped themselves or some of their cases here, one
# "part: reason" line each in the file $1 (OMST_SKIPS, see the Makefile):
#   make test: all passed (skipped: wan-small: iptables not found in PATH ...)
skips=${1:-}
if [ -n "$skips" ] && [ -s "$skips" ]; then
	echo "make test: all passed (skipped: $(sed -e ':a' -e 'N' -e '$!ba' -e 's/\n/; /g' "$skips"))"
else
	echo "make test: all passed"
fi
