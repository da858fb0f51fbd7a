#!/usr/bin/env python3
"""A real PyTorch training program for hadar's forked (HadarE) jobs, through the hadar_fork
helper (wrappers/python).

It trains a two-hidden-layer MLP (PyTorch, CPU) on scikit-learn's bundled handwritten-digits
dataset (1,797 8x8 images, 10 classes; shipped inside scikit-learn, nothing is downloaded),
with the same held-out split as digits_mlp.py (30%, stratified, fixed).

    digits_torch.py train [--seed S] [--hidden H] [--batch B] [--lr LR]
                          [--inner adamw|sgd] [--inner-state keep|reset] [--step-seconds S]
        Run under hadar-fork-run (or inside a forked job's batch script): starts from
        HADAR_START_CHECKPOINT (or a fresh model from --seed in round 0), trains at most
        HADAR_STEP_BUDGET steps and stops before HADAR_DEADLINE, saves its weights and its
        step count. Under `torchrun --standalone --nproc-per-node=N` (one copy on N GPUs or
        N CPU processes) the ranks train with DistributedDataParallel (gloo on CPU), each on
        its own minibatches; rank 0 saves. --step-seconds paces every step to take at least
        S seconds, standing in for a slower GPU (the test cluster's copies use it so that a
        job takes several rounds).
    digits_torch.py evaluate CHECKPOINT
        Prints {"accuracy": ..., "loss": ..., "test_samples": ...} as one JSON line.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
import torch
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

try:
    import hadar_fork
except ImportError:  # run from the repository without installing the helper
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python", "src"))
    import hadar_fork
from hadar_fork import ForkLoop


def data():
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    xt, xv, yt, yv = train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)
    return torch.from_numpy(xt), torch.from_numpy(xv), torch.from_numpy(yt), torch.from_numpy(yv)


def build(seed, hidden):
    """The same initial weights in every copy: seeded by --seed only, never the fork index."""
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Linear(64, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10),
    )


def evaluate(model, x, y):
    with torch.no_grad():
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits, y).item()
        acc = (logits.argmax(dim=1) == y).float().mean().item()
    return acc, loss


def train(args):
    torch.set_num_threads(1)  # small model: one thread is fastest and leaves cores to the others
    distributed = "RANK" in os.environ and int(os.environ.get("WORLD_SIZE", "1")) > 1
    if distributed:
        torch.distributed.init_process_group("gloo")
    x_train, x_test, y_train, y_test = data()
    model = build(args.seed, args.hidden)
    if args.inner == "adamw":
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.0)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    loop = ForkLoop(model, opt, inner_state=args.inner_state)
    loop.start()  # load before wrapping: DDP broadcasts rank 0's weights at construction
    net = torch.nn.parallel.DistributedDataParallel(model) if distributed else model
    rank = torch.distributed.get_rank() if distributed else 0
    g = torch.Generator().manual_seed(loop.env.seed(args.seed) + 7919 * rank)
    while not loop.should_stop():
        began = time.monotonic()
        batch = torch.randint(0, len(y_train), (args.batch,), generator=g)
        opt.zero_grad()
        torch.nn.functional.cross_entropy(net(x_train[batch]), y_train[batch]).backward()
        opt.step()
        time.sleep(max(0.0, args.step_seconds - (time.monotonic() - began)))
        loop.step()
    steps = loop.finish()
    if rank == 0:
        acc, loss = evaluate(model, x_test, y_test)
        print(f"digits_torch: copy {loop.env.index} round {loop.env.round}: {steps} steps, "
              f"held-out accuracy {acc:.4f}, loss {loss:.4f}")
    if distributed:
        torch.distributed.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train one copy for one round (under hadar-fork-run)")
    t.add_argument("--seed", type=int, default=0, help="model initialisation and minibatch seed")
    t.add_argument("--hidden", type=int, default=64, help="hidden units per layer")
    t.add_argument("--batch", type=int, default=16, help="minibatch size")
    t.add_argument("--lr", type=float, default=1e-3, help="inner learning rate")
    t.add_argument("--inner", choices=("adamw", "sgd"), default="adamw", help="inner optimizer")
    t.add_argument("--inner-state", choices=hadar_fork.loop.INNER_STATE_MODES, default="keep",
                   help="keep the inner optimizer's state across rounds, or reset it every round")
    t.add_argument("--step-seconds", type=float, default=0.0,
                   help="make every step take at least this long (a slower GPU, for tests)")
    e = sub.add_parser("evaluate", help="print a checkpoint's held-out accuracy as JSON")
    e.add_argument("checkpoint")
    e.add_argument("--hidden", type=int, default=64)
    args = ap.parse_args()
    if args.command == "train":
        try:
            train(args)
        except hadar_fork.ForkError as err:
            sys.exit(f"digits_torch: {err}")
    else:
        from safetensors.torch import load_file

        _, x_test, _, y_test = data()
        model = build(0, args.hidden)
        model.load_state_dict(load_file(args.checkpoint))
        acc, loss = evaluate(model, x_test, y_test)
        print(json.dumps({"accuracy": acc, "loss": loss, "test_samples": int(len(y_test))}))


if __name__ == "__main__":
    main()
