#!/usr/bin/env python3
"""Read the put phase of testplan runs of the rmprefix case (bin/omst-wan
run ... -case rmprefix -out OUT): each worker records the wall times of its
first put and of its last put's return, the root the wall time at which it
lists every name. Prints, per OUT directory, the put phase (first put to
the last put's return) and the time from the last put's return to the
root's listing (negative: the root listed them before the worker's client
saw its last reply).

    scripts/put-phase.py OUT [OUT...]
"""
import glob
import json
import os
import re
import sys


def put_phase(out):
    firsts, lasts, root = [], [], None
    for path in glob.glob(os.path.join(out, "*", "stdout.log")):
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                try:
                    msg = json.loads(line)["event"]["message_event"]["message"]
                except (ValueError, KeyError, TypeError):
                    continue
                m = re.search(r"first put at (\d+), last put returned at (\d+)", msg)
                if m:
                    firsts.append(int(m[1]))
                    lasts.append(int(m[2]))
                m = re.search(r"root lists \d+ names .* at (\d+) \(unix ns\)", msg)
                if m:
                    root = int(m[1])
    if not lasts or root is None:
        return None
    return (max(lasts) - min(firsts)) / 1e9, (root - max(lasts)) / 1e9, len(lasts)


def main(argv):
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    rc = 0
    for out in argv:
        r = put_phase(out)
        if r is None:
            print(f"{out}: incomplete (no put phase or no root listing in */stdout.log)")
            rc = 1
            continue
        phase, lag, workers = r
        print(f"{out}: {workers} workers, put phase {phase:.3f} s, the root lists all {lag:+.3f} s after the last put returned")
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
