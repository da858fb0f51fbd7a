#!/usr/bin/env python3
"""A lower bound on the average JCT of any schedule of a Gavel trace that ends by a given
time: the room the JCT aim of docs/results-gavel.md has under a makespan cap.

The bound is a time-indexed fluid LP. Time from 0 to the cap is cut into equal intervals (about
--interval-s long);
y[j, t, k] is the share of interval k in which job j runs as a gang of its workers on GPUs of
type t. A job runs at most once at a time (sum over t of y <= 1), no type gives out more
than its GPUs, no job runs before it arrives, and every job does all its steps. A gang that
mixes types runs at its slowest type's rate, so it is never better than splitting its time
between the types it mixes, which the LP allows: every schedule the simulator can play maps
to a feasible point.

For each job, its completion C >= M + p/2, where M is the work-weighted mean time of its
steps and p its time alone at its fastest rate (its steps are spread at most that fast),
and M >= sum over k of (share of its steps in interval k) x (start of interval k). Also
C >= arrival + p. The LP minimises the sum of these lower bounds, so its optimum, less the
arrivals, bounds the average JCT from below. It is loose: the fluid schedule time-shares
gangs freely and ignores rounds and restarts.

Needs python3 with numpy and scipy (HiGHS). Rates are read as the simulator reads them
(sidecar/formats/src/throughputs.rs): the isolated ("null") rate, the largest smaller
measured worker count scaled linearly when a count is not listed, 0 meaning cannot run.

    docs/jct-bound.py --trace data/gavel/traces/static_multigpu_40jobs_seed10.trace \\
        --cluster v100:16,p100:16,k80:16 --cap-s 15144 --cap-s 30000

prints one JSON object per cap: {"cap_s", "intervals", "jct_lower_bound_s"}.
"""

import argparse
import json
import sys
import tomllib
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

ROOT = Path(__file__).resolve().parent.parent


def fail(msg):
    print(f"jct-bound: {msg}", file=sys.stderr)
    sys.exit(2)


def gpu_counts(spec):
    """GPUs per type from `v100:4,p100:4` or from a cluster TOML's [[node]] tables."""
    path = Path(spec)
    if path.suffix == ".toml":
        try:
            nodes = tomllib.loads(path.read_text())["node"]
        except (OSError, KeyError, tomllib.TOMLDecodeError) as e:
            fail(f"{spec}: not a cluster file with [[node]] tables ({e})")
        counts = {}
        for node in nodes:
            for t, n in node.get("gpus", {}).items():
                counts[t.lower()] = counts.get(t.lower(), 0) + int(n)
        return counts
    counts = {}
    for part in spec.split(","):
        name, _, n = part.partition(":")
        if not name or not n.isdigit():
            fail(f"--cluster {spec!r}: expected TYPE:COUNT[,TYPE:COUNT...] or a .toml file")
        counts[name.lower()] = counts.get(name.lower(), 0) + int(n)
    return counts


def rate(table, job_type, workers):
    """Steps/s of a gang of `workers` on one GPU type's table, 0 when it cannot run."""
    key = f"('{job_type}', {workers})"
    if key in table:
        return float(table[key]["null"])
    prefix = f"('{job_type}', "
    smaller = [int(k[len(prefix):-1]) for k in table if k.startswith(prefix)]
    smaller = [w for w in smaller if w < workers]
    if not smaller:
        return 0.0
    w = max(smaller)
    return float(table[f"{prefix}{w})"]["null"]) * workers / w


def read_jobs(trace, throughputs, types):
    jobs = []
    for n, line in enumerate(Path(trace).read_text().splitlines(), 1):
        if not line.strip():
            continue
        f = line.split("\t")
        if len(f) != 10:
            fail(f"{trace}:{n}: expected 10 tab-separated columns, found {len(f)}")
        try:
            job_type, steps, workers, arrival = f[0], float(f[5]), int(f[6]), float(f[9])
        except ValueError as e:
            fail(f"{trace}:{n}: steps (column 6), workers (7) and arrival (10) must be numbers: {e}")
        if not (steps > 0 and workers > 0 and arrival >= 0):
            fail(f"{trace}:{n}: steps and workers must be positive and the arrival not negative")
        rates = [rate(throughputs[t], job_type, workers) for t in types]
        if max(rates) <= 0:
            fail(f"{trace}:{n}: {job_type} with {workers} workers runs on none of {types}")
        jobs.append((steps, workers, arrival, rates))
    return jobs


def bound(jobs, capacity, cap_s, interval_s):
    """The LP's lower bound on the average JCT, and the intervals used; None when the jobs
    cannot all end by cap_s."""
    n, types = len(jobs), len(capacity)
    K = max(1, int(np.ceil(cap_s / interval_s - 1e-9)))
    dt = cap_s / K
    starts = np.arange(K) * dt
    nvar = n * types * K + n  # y[j, t, k], then z[j] (job j's completion bound)

    def y(j, t, k):
        return (j * types + t) * K + k

    cost = np.zeros(nvar)
    cost[n * types * K :] = 1.0
    upper = np.zeros(nvar)
    upper[n * types * K :] = np.inf
    lower = np.zeros(nvar)
    eq = ([], [], [])
    le = ([], [], [])
    le_rhs = []
    row = 0
    for j, (steps, workers, arrival, rates) in enumerate(jobs):
        p = steps / max(rates)
        lower[n * types * K + j] = arrival + p
        # z_j >= sum_k f_jk s_k + p/2, i.e. sum_k f_jk s_k - z_j <= -p/2.
        for t in range(types):
            if rates[t] <= 0:
                continue
            for k in range(K):
                # Share of interval k after the arrival: a relaxation, not a restriction.
                room = min(1.0, max(0.0, (starts[k] + dt - arrival) / dt))
                if room <= 0:
                    continue
                v = y(j, t, k)
                upper[v] = room
                eq[0].append(j)
                eq[1].append(v)
                eq[2].append(rates[t] * dt)
                le[0].append(row)
                le[1].append(v)
                le[2].append(rates[t] * dt / steps * starts[k])
        le[0].append(row)
        le[1].append(n * types * K + j)
        le[2].append(-1.0)
        le_rhs.append(-p / 2)
        row += 1
    for j in range(n):
        for k in range(K):
            for t in range(types):
                le[0].append(row)
                le[1].append(y(j, t, k))
                le[2].append(1.0)
            le_rhs.append(1.0)
            row += 1
    for t in range(types):
        for k in range(K):
            for j, (_, workers, _, _) in enumerate(jobs):
                le[0].append(row)
                le[1].append(y(j, t, k))
                le[2].append(float(workers))
            le_rhs.append(float(capacity[t]))
            row += 1
    a_eq = sp.csr_matrix((eq[2], (eq[0], eq[1])), shape=(n, nvar))
    a_le = sp.csr_matrix((le[2], (le[0], le[1])), shape=(row, nvar))
    b_eq = [steps for steps, _, _, _ in jobs]
    res = linprog(cost, A_ub=a_le, b_ub=le_rhs, A_eq=a_eq, b_eq=b_eq,
                  bounds=np.column_stack([lower, upper]), method="highs")
    if res.status == 2:
        return None, K
    if res.status != 0:
        fail(f"the LP for cap {cap_s:.0f} s was not solved: {res.message}")
    return (res.fun - sum(a for _, _, a, _ in jobs)) / n, K


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trace", required=True, help="a trace in Gavel's 10-column format")
    ap.add_argument("--cluster", required=True,
                    help="GPUs per type, v100:4,p100:4,k80:4, or a cluster .toml")
    ap.add_argument("--throughputs", default=str(ROOT / "data/gavel/simulation_throughputs.json"),
                    help="Gavel's throughput table [default: data/gavel/simulation_throughputs.json]")
    ap.add_argument("--cap-s", type=float, action="append", required=True,
                    help="makespan cap in seconds (repeat for several)")
    ap.add_argument("--interval-s", type=float, default=120.0,
                    help="length of the LP's time intervals; shorter is tighter and slower "
                         "[default: 120]")
    args = ap.parse_args()
    if not args.interval_s > 0:
        fail(f"--interval-s {args.interval_s}: must be positive")
    counts = gpu_counts(args.cluster)
    try:
        throughputs = json.loads(Path(args.throughputs).read_text())
    except (OSError, json.JSONDecodeError) as e:
        fail(f"{args.throughputs}: {e}")
    types = sorted(counts)
    missing = [t for t in types if t not in throughputs]
    if missing:
        fail(f"{args.throughputs} has no rates for GPU type(s) {', '.join(missing)}")
    try:
        jobs = read_jobs(args.trace, throughputs, types)
    except OSError as e:
        fail(f"{args.trace}: {e}")
    for cap in args.cap_s:
        if not cap > 0:
            fail(f"--cap-s {cap}: must be positive")
        lb, intervals = bound(jobs, [counts[t] for t in types], cap, args.interval_s)
        print(json.dumps({"cap_s": cap, "intervals": intervals, "jct_lower_bound_s": lb}))


if __name__ == "__main__":
    main()
