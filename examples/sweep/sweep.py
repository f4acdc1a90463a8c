#!/usr/bin/env python3
"""A parameter sweep on a process pool, with omst carrying the data.

The master puts one shared input array into omst once. Each task gets it by
name (straight into a numpy array with get_into), computes a small result
for its parameter, puts the result under sweep/<run>/result/<i> and returns
only that name. The master then reads every result by name and checks it
against a reference it computes itself, and prints a summary.

The daemon is the one at $OMST_SOCKET (else $OMST_HOME/omst.sock, else
~/.omst/omst.sock); run.sh starts a throwaway one. Exit status: 0 if every
result matched, 1 if not, 2 on a usage or setup error.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
import time
import uuid
from typing import List, Tuple

try:
    import omst
except ImportError:  # run from a checkout without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bindings", "python"))
    import omst

import numpy as np

BINS = 256


def compute(x: "np.ndarray", param: float) -> "np.ndarray":
    """The work of one task: statistics of sin(param * x).

    Returns float64[BINS + 2]: a histogram of the values over [-1, 1] and
    their mean and standard deviation. Deterministic for a given input.
    """
    y = np.sin(param * x)
    hist, _ = np.histogram(y, bins=BINS, range=(-1.0, 1.0))
    return np.concatenate([hist.astype(np.float64), [y.mean(), y.std()]])


def params(n: int) -> List[float]:
    """The swept parameter values."""
    return [0.25 + 0.5 * i for i in range(n)]


def task(job: Tuple[str, int, float, Tuple[int, ...], str]) -> str:
    """Run in a worker: fetch the input by name, compute, publish the result.

    Uses omst's default client, which every worker process opens for itself.
    Returns the result's name, nothing else.
    """
    input_name, i, param, shape, dtype = job
    x = np.empty(shape, dtype=dtype)
    omst.get_into(input_name, x)
    name = f"{input_name.rsplit('/', 1)[0]}/result/{i}"
    omst.put(name, compute(x, param))
    return name


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mib", type=int, default=64, help="size of the shared input in MiB (default 64)")
    ap.add_argument("--tasks", type=int, default=16, help="number of parameter values (default 16)")
    ap.add_argument("--workers", type=int, default=min(4, os.cpu_count() or 1), help="pool processes (default min(4, CPUs))")
    ap.add_argument("--run", default=None, help="run id used in the names (default: random)")
    ap.add_argument("--keep", action="store_true", help="keep the run's blobs in omst afterwards")
    args = ap.parse_args()
    if args.mib < 1 or args.tasks < 1 or args.workers < 1:
        ap.error("--mib, --tasks and --workers must be positive")

    run = args.run or time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
    prefix = f"sweep/{run}"
    input_name = f"{prefix}/input"
    try:
        omst.validate_name(input_name)
    except omst.InvalidName as e:
        print(f"sweep: bad --run: {e}", file=sys.stderr)
        return 2

    try:
        client = omst.default_client()
    except omst.DaemonUnavailable as e:
        print(f"sweep: {e}; start one (see README.md) or set OMST_SOCKET", file=sys.stderr)
        return 2

    x = np.random.default_rng(42).standard_normal((args.mib << 20) // 8)
    t0 = time.perf_counter()
    cid = client.put(input_name, x)
    t_put = time.perf_counter() - t0
    print(f"run {run}: put {input_name} ({x.nbytes >> 20} MiB, {cid}) in {t_put:.2f} s")

    ps = params(args.tasks)
    jobs = [(input_name, i, p, x.shape, x.dtype.str) for i, p in enumerate(ps)]
    t0 = time.perf_counter()
    with multiprocessing.Pool(args.workers) as pool:
        names = pool.map(task, jobs)
    t_pool = time.perf_counter() - t0
    print(f"{args.tasks} tasks on {args.workers} workers in {t_pool:.2f} s")

    listed = {i.name for i in client.ls(f"{prefix}/result/")}
    bad: List[str] = []
    for i, (name, p) in enumerate(zip(names, ps)):
        want = compute(x, p)
        got = np.frombuffer(client.get(name), dtype=np.float64)
        if name not in listed or got.shape != want.shape or not np.array_equal(got, want):
            bad.append(name)
        elif i < 3 or i == len(ps) - 1:
            print(f"  param {p:6.2f}: mean {got[-2]:+.6f} std {got[-1]:.6f}  ({name})")
    print(f"checked {len(names)} results against the local reference: {len(names) - len(bad)} ok, {len(bad)} wrong")
    for name in bad:
        print(f"  WRONG {name}", file=sys.stderr)

    if not args.keep:
        for info in client.ls(prefix + "/"):
            client.rm(info.name)
    client.close()
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
