#!/usr/bin/env python3
"""The kernel CPU of writing 1 GiB into page cache, with no omst involved
(h-grow, issue 26): ROUNDS files of 1 GiB written one after another, each
after PAUSE seconds, in two memory states, in the order given:

  keep  the files written before stay (the page cache grows: every page
        comes from free memory, as in a series of gets whose blobs stay
        cached after `omst rm`)
  free  the previous file is unlinked just before (its pages are reused,
        as when a get evicts the previous blob)

Prints the writer's system (and user) CPU seconds per GiB per file.

    scripts/pagecache-cost.py DIR [--rounds 4] [--pause 5] keep free keep free

DIR needs ROUNDS GiB free. A measurement, not a test.
"""
import argparse
import os
import resource
import time


def write(path, buf):
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.monotonic()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        for _ in range((1 << 30) // len(buf)):
            os.write(fd, buf)
    finally:
        os.close(fd)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    return r1.ru_stime - r0.ru_stime, r1.ru_utime - r0.ru_utime, time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dir")
    ap.add_argument("modes", nargs="+", choices=["keep", "free"])
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--pause", type=float, default=5)
    a = ap.parse_args()
    buf = os.urandom(1 << 20)
    for mode in a.modes:
        files, sys_s = [], []
        try:
            for i in range(a.rounds):
                if mode == "free" and files:
                    os.unlink(files.pop())
                time.sleep(a.pause)
                p = os.path.join(a.dir, f"pagecache-{mode}-{i}")
                files.append(p)
                s, u, secs = write(p, buf)
                sys_s.append(s)
                print(f"{mode} {i + 1}: sys {s:.2f} s/GiB, user {u:.2f}, {1024 / secs:.0f} MiB/s", flush=True)
        finally:
            for p in files:
                os.unlink(p)
        print(f"{mode}: sys s/GiB {', '.join('%.2f' % s for s in sys_s)}", flush=True)


if __name__ == "__main__":
    main()
