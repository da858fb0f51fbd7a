#!/usr/bin/env python3
"""The least average JCT of the few-jobs scenario for each makespan cap, over schedules that
may preempt at any moment: the frontier Hadar's (TTD, JCT) point is read against in
docs/results-gavel.md (thirteenth step).

Few-jobs is four 4-worker jobs arriving together on tests/data/physical-cluster.toml. A
schedule there is a sequence of gang assignments: each job on one "slot", a set of four GPUs
it runs on at one type's rate. The slots (--slots) are the whole gangs each type holds: one on
the six V100s, two on the eight P100s, two on the ten K80s plus a third from the last two K80s
and the two V100s the V100 gang leaves, at the K80 rate (a mixed gang runs at its slowest
type's rate). Mixed gangs at the P100 rate are left out, so the frontier is that of this
class of schedules, not a bound over all of them.

For a completion order, the time splits into four phases, one per job still running; in
each, every running job spends some time on each slot type, at most the phase's length, and
no type hosts more gangs than it has slots. Any such fractional plan splits into whole
assignments (Birkhoff-von Neumann), so it is a schedule with preemption. The LP minimises
the sum of completion times under the cap; the script takes the best of the 24 orders.

Rates are the simulator's: each job alone on four GPUs of one type, steps over its TTD. Needs
python3 with numpy and scipy, and a built hadar:

    cargo build --release -p hadar && docs/few-jobs-frontier.py --cap-h 3.17 --cap-h 3.33

prints one line per cap: the cap, the least average JCT in hours and its completion order.
"""

import argparse
import itertools
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TYPES = ["v100", "p100", "k80"]
WORKERS = 4
MAX_JOBS = 6


def fail(msg):
    print(f"few-jobs-frontier: {msg}", file=sys.stderr)
    sys.exit(2)


try:
    import numpy as np
    from scipy.optimize import linprog
except ImportError as e:
    fail(f"needs numpy and scipy ({e}); pip install numpy scipy")


def trace_jobs(trace):
    """The trace's lines and steps, each job checked to be a 4-worker job with steps."""
    try:
        text = trace.read_text()
    except OSError as e:
        fail(f"cannot read the trace {trace}: {e.strerror}")
    jobs = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        cols = line.split("\t")
        if len(cols) != 10:
            fail(f"{trace}:{n}: {len(cols)} tab-separated columns, Gavel's format has 10")
        try:
            steps, workers = float(cols[5]), int(cols[6])
        except ValueError:
            fail(f"{trace}:{n}: steps {cols[5]!r} and workers {cols[6]!r} must be numbers")
        if steps <= 0 or workers != WORKERS:
            fail(f"{trace}:{n}: the slots are {WORKERS}-GPU gangs, so every job needs "
                 f"{WORKERS} workers and some steps (got {workers} workers, {steps:g} steps)")
        jobs.append((line, steps))
    if not jobs:
        fail(f"{trace}: no jobs")
    if len(jobs) > MAX_JOBS:
        fail(f"{trace}: {len(jobs)} jobs; the script solves one LP per completion order, "
             f"so it takes at most {MAX_JOBS}")
    return jobs


def rate_on(hadar, line, steps, gpu_type):
    """The job's rate (steps/s) alone on four GPUs of `gpu_type`, from the simulator."""
    with tempfile.NamedTemporaryFile("w", suffix=".trace") as one:
        one.write(line + "\n")
        one.flush()
        run = subprocess.run(
            [hadar, "simulate", "--cluster", f"{gpu_type}:{WORKERS}", "--gpus-per-node",
             str(WORKERS), "--trace", one.name, "--policy", "hadar", "--format", "json"],
            capture_output=True, text=True)
    if run.returncode != 0:
        fail(f"{hadar} simulate failed on {gpu_type}: {run.stderr.strip()}")
    return steps / json.loads(run.stdout)["results"][0]["ttd_s"]


def rates_and_steps(hadar, trace):
    """Per job: steps and its rate (steps/s) on four GPUs of each type."""
    return [(steps, [rate_on(hadar, line, steps, t) for t in TYPES])
            for line, steps in trace_jobs(trace)]


def least_jct_sum(jobs, slots, order, cap_s):
    """The LP for one completion order: the least sum of completion times, or None."""
    n_jobs = len(order)
    var = {}
    n = n_jobs  # phase lengths first
    for k in range(n_jobs):
        for j in order[k:]:
            for t in range(len(TYPES)):
                var[(j, t, k)] = n
                n += 1
    a_ub, b_ub = [], []
    for k in range(n_jobs):
        for j in order[k:]:
            row = np.zeros(n)
            row[k] = -1
            for t in range(len(TYPES)):
                row[var[(j, t, k)]] = 1
            a_ub.append(row)
            b_ub.append(0)
        for t in range(len(TYPES)):
            row = np.zeros(n)
            row[k] = -slots[t]
            for j in order[k:]:
                row[var[(j, t, k)]] = 1
            a_ub.append(row)
            b_ub.append(0)
    for pos, j in enumerate(order):
        steps, rates = jobs[j]
        row = np.zeros(n)
        for k in range(pos + 1):
            for t in range(len(TYPES)):
                row[var[(j, t, k)]] = -rates[t]
        a_ub.append(row)
        b_ub.append(-steps)
    row = np.zeros(n)
    row[:n_jobs] = 1
    a_ub.append(row)
    b_ub.append(cap_s)
    cost = np.zeros(n)
    for pos in range(n_jobs):
        cost[: pos + 1] += 1
    res = linprog(cost, A_ub=np.array(a_ub), b_ub=b_ub, bounds=[(0, None)] * n, method="highs")
    return res.fun if res.status == 0 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cap-h", type=float, action="append", required=True,
                    help="makespan cap in hours (repeatable)")
    ap.add_argument("--trace", type=Path, default=ROOT / "tests/data/few-jobs.trace")
    ap.add_argument("--slots", default="1,2,3",
                    help="whole 4-GPU gangs at the V100, P100 and K80 rates (default 1,2,3)")
    ap.add_argument("--hadar", default=str(ROOT / "target/release/hadar"))
    args = ap.parse_args()
    try:
        slots = [int(s) for s in args.slots.split(",")]
    except ValueError:
        slots = []
    if len(slots) != len(TYPES) or min(slots) < 0:
        fail(f"--slots needs three counts of at least 0 (V100,P100,K80), got {args.slots!r}")
    bad = [c for c in args.cap_h if not c > 0]
    if bad:
        fail(f"--cap-h must be a positive number of hours, got {bad[0]}")
    if not Path(args.hadar).exists():
        fail(f"no {args.hadar} (cargo build --release -p hadar, or --hadar)")
    jobs = rates_and_steps(args.hadar, args.trace)
    for cap_h in args.cap_h:
        best = None
        for order in itertools.permutations(range(len(jobs))):
            total = least_jct_sum(jobs, slots, order, cap_h * 3600)
            if total is not None and (best is None or total < best[0]):
                best = (total, order)
        if best is None:
            print(f"cap {cap_h:.2f} h: no schedule ends by then")
        else:
            print(f"cap {cap_h:.2f} h: least average JCT {best[0] / len(jobs) / 3600:.3f} h, "
                  f"completion order {' '.join(map(str, best[1]))}")


if __name__ == "__main__":
    main()
