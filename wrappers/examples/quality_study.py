#!/usr/bin/env python3
"""The HadarE quality study: model quality of forked training (copies of three speeds,
consolidated every round) against one job, for the numpy MLP (digits_mlp.py, inner plain
SGD) and the PyTorch MLP (digits_torch.py, inner AdamW through the hadar_fork helper), on
scikit-learn's digits, over several seeds.

Per round, copy k does budgets[k] steps (120/80/40: GPUs of three speeds) from the round's
start; the copies are consolidated with the real `hadar average` binary, either as their
steps-weighted mean or with an outer Nesterov step (--outer nesterov --outer-lr LR
--outer-momentum MU, the velocity kept in a momentum-state file derived round by round, as
the daemon does). Round 0 has no start checkpoint on disk (copies build the initial model
themselves), so it is consolidated as the plain mean, as under `hadar serve`. Compared with:

  one job, same wall time:   one copy on the fastest GPU, rounds x max(budgets) steps;
  one job, same total steps: rounds x sum(budgets) steps.

Copies run in this process (the fork runner's process start-up, a second or more with
torch, would only slow the study down; tests/fork_runner.rs and tests/fork_slurm.rs run the
same programs through it). Prints a Markdown table: mean and sample standard deviation of
held-out accuracy and loss over the seeds.

    quality_study.py [--rounds R] [--budgets 120,80,40] [--seeds 0,1,2]
                     [--sweep LR:MU,...] [--reset-sweep LR:MU,...] [--models numpy,torch]
                     [--hadar PATH] [--json FILE]

With --equivalent-steps, instead: how many steps one job needs to reach the held-out loss
of forked training (plain mean and the default outer step), the seeds' mean loss of one job
measured every 100 steps up to the copies' total and interpolated linearly; that over the
copies' summed steps is the share of them forked training is worth (HadarE's progress
efficiency, `[hadare] progress_efficiency`, `hadar simulate --fork-efficiency`).
"""

import argparse
import importlib.util
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "src"))


def load(name):
    spec = importlib.util.spec_from_file_location(name, os.path.join(HERE, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


class NumpyModel:
    """digits_mlp.py's model and plain SGD step (lr 0.05, batch 16, hidden 32)."""

    name = "numpy MLP (inner SGD)"

    def __init__(self):
        self.m = load("digits_mlp")
        self.xt, self.xv, self.yt, self.yv = self.m.data()

    def copy(self, seed, start, out, steps, rnd, index, inner_from, inner_state="keep"):
        # Plain SGD has no inner state: keep and reset are the same here.
        import numpy as np
        from safetensors.numpy import save_file

        model = self.m.load_model(start) if start else self.m.fresh_model(seed, 32)
        rng = np.random.default_rng([seed, rnd, index])
        for _ in range(steps):
            b = rng.integers(0, len(self.yt), size=16)
            self.m.sgd_step(model, self.xt[b], self.yt[b], 0.05)
        save_file(model, out)

    def evaluate(self, path):
        return self.m.evaluate(self.m.load_model(path), self.xv, self.yv)


class TorchModel:
    """digits_torch.py's model, inner AdamW (lr 1e-3, batch 16, hidden 64), inner state
    kept across rounds per copy index, run through hadar_fork.ForkLoop."""

    name = "PyTorch MLP (inner AdamW)"

    def __init__(self):
        import torch

        torch.set_num_threads(1)
        self.torch = torch
        self.m = load("digits_torch")
        self.xt, self.xv, self.yt, self.yv = self.m.data()

    def copy(self, seed, start, out, steps, rnd, index, inner_from, inner_state="keep"):
        from hadar_fork import ForkEnv, ForkLoop

        torch = self.torch
        env = ForkEnv(index=index, copies=3, round=rnd, checkpoint_out=out, steps_file=out + ".steps",
                      steps_done=0, start_checkpoint=start, step_budget=steps,
                      inner_state_out=out + ".inner", inner_state_from=inner_from)
        model = self.m.build(seed, 64)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
        g = torch.Generator().manual_seed(env.seed(seed))
        with ForkLoop(model, opt, env=env, log=None, inner_state=inner_state) as loop:
            while not loop.should_stop():
                b = torch.randint(0, len(self.yt), (16,), generator=g)
                opt.zero_grad()
                torch.nn.functional.cross_entropy(model(self.xt[b]), self.yt[b]).backward()
                opt.step()
                loop.step()

    def evaluate(self, path):
        from safetensors.torch import load_file

        model = self.m.build(0, 64)
        model.load_state_dict(load_file(path))
        return self.m.evaluate(model, self.xv, self.yv)


def hadare(model, hadar, work, seed, rounds, budgets, outer, inner_state="keep"):
    """Forked training; `outer` is None (mean) or (LR, MU). Returns the last checkpoint."""
    start = velocity = None
    inner = [None] * len(budgets)
    for r in range(rounds):
        inputs = []
        for k, b in enumerate(budgets):
            out = os.path.join(work, f"r{r}-c{k}.safetensors")
            model.copy(seed, start, out, b, r, k, inner[k], inner_state)
            inputs.append(f"{out}:{b}")
            inner[k] = out + ".inner"
        merged = os.path.join(work, f"m{r}.safetensors")
        cmd = [hadar, "average", "--out", merged]
        if outer is not None and start is not None:
            v = os.path.join(work, f"v{r}.safetensors")
            cmd += ["--outer", "nesterov", "--start", start, "--outer-lr", str(outer[0]),
                    "--outer-momentum", str(outer[1]), "--momentum-state", v]
            if velocity:
                cmd += ["--momentum-from", velocity]
            velocity = v
        subprocess.run(cmd + inputs, check=True, stdout=subprocess.DEVNULL)
        start = merged
    return start


def one_job(model, work, seed, steps, name):
    out = os.path.join(work, f"{name}.safetensors")
    model.copy(seed, None, out, steps, 0, 0, None)
    return out


def equivalent_steps(model, hadar, seeds, rounds, budgets):
    """Per consolidation (mean, the default outer step): its mean held-out loss, and the
    steps one job needs for the same mean loss, interpolated on a grid of 100 steps."""
    total = rounds * sum(budgets)
    forked = {}
    for label, outer in (("mean", None), ("nesterov:1:0.5", (1.0, 0.5))):
        losses = []
        for seed in seeds:
            with tempfile.TemporaryDirectory() as work:
                losses.append(model.evaluate(hadare(model, hadar, work, seed, rounds, budgets, outer))[1])
        forked[label] = statistics.mean(losses)
    curve = []
    for steps in range(100, total + 1, 100):
        losses = []
        for seed in seeds:
            with tempfile.TemporaryDirectory() as work:
                losses.append(model.evaluate(one_job(model, work, seed, steps, "one"))[1])
        curve.append((steps, statistics.mean(losses)))
    out = {}
    for label, loss in forked.items():
        need = None
        for (s0, l0), (s1, l1) in zip(curve, curve[1:]):
            if l0 >= loss >= l1 and l0 != l1:
                need = s0 + (l0 - loss) / (l0 - l1) * (s1 - s0)
                break
        if need is None:
            need = curve[0][0] if loss >= curve[0][1] else float(total)
        out[label] = (loss, need, need / total)
    return out, curve


def find_hadar(given):
    if given:
        return given
    for c in ("release", "debug"):
        p = os.path.join(HERE, "..", "..", "target", c, "hadar")
        if os.access(p, os.X_OK):
            return p
    p = shutil.which("hadar")
    if not p:
        sys.exit("quality_study.py: no hadar binary; build it (cargo build) or pass --hadar")
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--budgets", default="120,80,40")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--sweep", default="0.7:0.9,1:0.5,1.5:0,2:0,2:0.5,3:0",
                    help="outer Nesterov LR:MU pairs")
    ap.add_argument("--reset-sweep", default="1:0.5",
                    help="LR:MU pairs also run with the inner optimizer state reset every round (PyTorch only)")
    ap.add_argument("--models", default="numpy,torch")
    ap.add_argument("--hadar")
    ap.add_argument("--json", help="also write every run's numbers to this file")
    ap.add_argument("--equivalent-steps", action="store_true",
                    help="measure the steps one job needs for forked training's loss instead")
    a = ap.parse_args()
    hadar = find_hadar(a.hadar)
    budgets = [int(b) for b in a.budgets.split(",")]
    seeds = [int(s) for s in a.seeds.split(",")]
    models = {"numpy": NumpyModel, "torch": TorchModel}
    if a.equivalent_steps:
        print(f"{a.rounds} rounds, copies with budgets {a.budgets} steps a round "
              f"({a.rounds * sum(budgets)} in all), seeds {a.seeds}\n")
        print("| model | consolidation | forked loss | one job's steps for it | share of the copies' steps |")
        print("|---|---|---|---|---|")
        for mname in a.models.split(","):
            model = models[mname]()
            out, curve = equivalent_steps(model, hadar, seeds, a.rounds, budgets)
            print(f"{model.name}: one job's mean loss by steps {[(s, round(l, 4)) for s, l in curve]}",
                  file=sys.stderr, flush=True)
            for label, (loss, need, share) in out.items():
                print(f"| {model.name} | {label} | {loss:.4f} | {need:.0f} | {share:.3f} |", flush=True)
        return
    sweep = [tuple(float(x) for x in p.split(":")) for p in a.sweep.split(",") if p]
    variants = [("one job, fastest GPU (same wall time)", "time", None), ("HadarE, mean", "fork", None)]
    variants += [(f"HadarE, Nesterov LR {lr:g} MU {mu:g}", "fork", (lr, mu)) for lr, mu in sweep]
    if a.reset_sweep:
        variants += [(f"HadarE, Nesterov LR {lr:g} MU {mu:g}, inner state reset", "fork-reset", (lr, mu))
                     for lr, mu in (tuple(float(x) for x in p.split(":")) for p in a.reset_sweep.split(","))]
    variants += [("one job, all steps (same total steps)", "steps", None)]
    models = {"numpy": NumpyModel, "torch": TorchModel}
    results = {}
    began = time.time()
    for mname in a.models.split(","):
        model = models[mname]()
        for label, kind, outer in variants:
            runs = []
            for seed in seeds:
                with tempfile.TemporaryDirectory() as work:
                    if kind == "time":
                        path = one_job(model, work, seed, a.rounds * max(budgets), "time")
                    elif kind == "steps":
                        path = one_job(model, work, seed, a.rounds * sum(budgets), "steps")
                    elif kind == "fork-reset":
                        if mname == "numpy":
                            break  # no inner state to reset
                        path = hadare(model, hadar, work, seed, a.rounds, budgets, outer, "reset")
                    else:
                        path = hadare(model, hadar, work, seed, a.rounds, budgets, outer)
                    runs.append(model.evaluate(path))
            if not runs:
                continue
            results[(model.name, label)] = runs
            print(f"{model.name:28} {label:40} acc {[round(x[0], 4) for x in runs]} "
                  f"loss {[round(x[1], 4) for x in runs]}", file=sys.stderr, flush=True)
    sd = lambda v: statistics.stdev(v) if len(v) > 1 else 0.0
    print(f"\n{a.rounds} rounds, copies with budgets {a.budgets} steps a round, seeds {a.seeds} "
          f"({time.time() - began:.0f} s)\n")
    print("| model | training | held-out accuracy (mean ± sd) | held-out loss (mean ± sd) |")
    print("|---|---|---|---|")
    for (mname, label), runs in results.items():
        acc = [r[0] for r in runs]
        loss = [r[1] for r in runs]
        print(f"| {mname} | {label} | {statistics.mean(acc):.4f} ± {sd(acc):.4f} | "
              f"{statistics.mean(loss):.4f} ± {sd(loss):.4f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"model": m, "training": l, "runs": r} for (m, l), r in results.items()], f, indent=1)


if __name__ == "__main__":
    main()
