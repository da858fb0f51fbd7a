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

import numpy as np
from scipy.optimize import linprog

ROOT = Path(__file__).resolve().parent.parent
TYPES = ["v100", "p100", "k80"]


def rates_and_steps(hadar, trace):
    """Per job: steps and its rate (steps/s) on four GPUs of each type, from the simulator."""
    jobs = []
    for line in trace.read_text().splitlines():
        if not line.strip():
            continue
        steps = float(line.split("\t")[5])
        rates = []
        for t in TYPES:
            with tempfile.NamedTemporaryFile("w", suffix=".trace") as one:
                one.write(line + "\n")
                one.flush()
                out = subprocess.run(
                    [hadar, "simulate", "--cluster", f"{t}:4", "--gpus-per-node", "4",
                     "--trace", one.name, "--policy", "hadar", "--format", "json"],
                    check=True, capture_output=True, text=True).stdout
            ttd = json.loads(out)["results"][0]["ttd_s"]
            rates.append(steps / ttd)
        jobs.append((steps, rates))
    return jobs


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
    slots = [int(s) for s in args.slots.split(",")]
    if len(slots) != len(TYPES) or min(slots) < 0:
        sys.exit(f"few-jobs-frontier: --slots needs three counts (V100,P100,K80), got {args.slots!r}")
    if not Path(args.hadar).exists():
        sys.exit(f"few-jobs-frontier: no {args.hadar} (cargo build --release -p hadar, or --hadar)")
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
