#!/usr/bin/env python3
"""Writes the held-out traces of docs/results-gavel.md: workloads drawn like Gavel's six dev
traces (data/gavel/traces/) but from other seeds, to check that what Hadar was tuned to on
those 13 runs holds on runs it was never measured on.

    python3 docs/heldout-traces.py            # writes data/heldout/*.trace (deterministic)
    python3 docs/heldout-traces.py --seeds 4,5,6 --out /tmp/heldout   # a further set

The distributions are the ones the dev traces show (read off them; see the held-out section
of docs/results-gavel.md):

* job type: uniform over the 26 types of Gavel's throughput table;
* duration (alone on V100s with its workers): 1, 2, 3 or 4 hours, uniformly;
* workers, in the multi-GPU traces: 1 (70%), 2 (10%) or 4 (20%); a 2- or 4-worker job whose
  type has no multi-GPU measurement takes a type drawn from those that have one;
* total steps: duration x the type's V100 throughput at its worker count (as Gavel's
  generator sets them);
* arrivals: all at 0 (static), or a Poisson process with a 900 s mean gap from 0 (the
  `poisson_lam900` traces).

Each line keeps Gavel's 10 tab-separated fields; the command and working directory of a type
are taken from a dev trace line of that type. Only Python's standard library is needed, and
`random.Random(seed)` gives the same draws on every CPython 3.
"""

import argparse
import ast
import json
import random
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GAVEL = ROOT / "data" / "gavel"
OUT = ROOT / "data" / "heldout"
SEEDS = (1, 2, 3)
# (file name stem, jobs, multi-GPU, Poisson arrivals)
KINDS = (
    ("static_{n}jobs", False, False),
    ("static_multigpu_{n}jobs", True, False),
    ("poisson_lam900_multigpu_{n}jobs", True, True),
)
JOB_COUNTS = (40, 120)
MEAN_GAP_S = 900.0


def load_table():
    table = json.loads((GAVEL / "simulation_throughputs.json").read_text())
    v100 = {}
    for key, entry in table["v100"].items():
        # Keys are Python tuples written out: "('ResNet-18 (batch size 32)', 2)".
        name, workers = ast.literal_eval(key)
        v100[(name, workers)] = entry["null"]
    return v100


def load_templates():
    """The command, working directory, steps flag and data flag of each job type."""
    templates = {}
    for trace in sorted((GAVEL / "traces").glob("*.trace")):
        for line in trace.read_text().splitlines():
            fields = line.split("\t")
            templates.setdefault(fields[0], fields[1:5])
    return templates


def draw_job(rng, single_types, multi_types, multi_gpu):
    job_type = rng.choice(single_types)
    hours = rng.choice((1, 2, 3, 4))
    workers = 1
    if multi_gpu:
        r = rng.random()
        workers = 1 if r < 0.7 else (2 if r < 0.8 else 4)
        if workers > 1 and job_type not in multi_types:
            job_type = rng.choice(multi_types)
    return job_type, hours, workers


def write_trace(path, seed, jobs, multi_gpu, poisson, v100, templates):
    single_types = sorted(name for name, w in v100 if w == 1)
    multi_types = sorted({name for name, w in v100 if w > 1})
    rng = random.Random(seed)
    arrival = 0.0
    lines = []
    for i in range(jobs):
        job_type, hours, workers = draw_job(rng, single_types, multi_types, multi_gpu)
        if poisson and i > 0:
            arrival += round(rng.expovariate(1.0 / MEAN_GAP_S))
        steps = round(hours * 3600 * v100[(job_type, workers)])
        command, workdir, steps_flag, needs_data = templates[job_type]
        lines.append(
            "\t".join(
                [
                    job_type,
                    command,
                    workdir,
                    steps_flag,
                    needs_data,
                    str(steps),
                    str(workers),
                    "1",
                    "-1.000000",
                    str(int(arrival)),
                ]
            )
        )
    path.write_text("\n".join(lines) + "\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--seeds",
        default=",".join(str(s) for s in SEEDS),
        help="comma-separated seeds, one trace of each kind per seed (default: %(default)s)",
    )
    parser.add_argument(
        "--out", type=Path, default=OUT, help="directory to write into (default: data/heldout)"
    )
    args = parser.parse_args()
    try:
        seeds = [int(s) for s in args.seeds.split(",")]
    except ValueError:
        sys.exit(f"--seeds: expected comma-separated integers, got {args.seeds!r}")
    v100 = load_table()
    templates = load_templates()
    missing = sorted({name for name, _ in v100} - set(templates))
    if missing:
        sys.exit(f"no dev trace line gives the command of: {', '.join(missing)}")
    try:
        args.out.mkdir(parents=True, exist_ok=True)
        for stem, multi_gpu, poisson in KINDS:
            for jobs in JOB_COUNTS:
                for seed in seeds:
                    path = args.out / f"{stem.format(n=jobs)}_seed{seed}.trace"
                    write_trace(path, seed, jobs, multi_gpu, poisson, v100, templates)
                    print(path)
    except OSError as e:
        sys.exit(f"--out {args.out}: cannot write the traces: {e}")


if __name__ == "__main__":
    main()
