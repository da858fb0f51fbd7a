#!/usr/bin/env python3
"""A real training program that follows hadar's fork-runner contract (wrappers/README.md).

It trains a one-hidden-layer MLP (numpy only) by minibatch SGD on scikit-learn's bundled
handwritten-digits dataset (1,797 8x8 images, 10 classes; shipped inside the package, so
nothing is downloaded), saves safetensors checkpoints, and reports accuracy on a held-out
split (30%, stratified, fixed).

    digits_mlp.py train [--seed S] [--hidden H] [--batch B] [--lr LR]
        Run under hadar-fork-run: reads HADAR_* from the environment, starts from
        HADAR_START_CHECKPOINT (or a fresh model from --seed when absent), does at most
        HADAR_STEP_BUDGET steps and stops before HADAR_DEADLINE, writes its checkpoint to
        HADAR_CHECKPOINT_OUT and its step count to HADAR_STEPS_FILE.
    digits_mlp.py evaluate CHECKPOINT
        Prints {"accuracy": ..., "loss": ..., "test_samples": ...} as one JSON line.

Every copy of a round starts from the same model; copies differ only in the minibatches
they draw, which are seeded by (seed, round, fork index) so that a run is reproducible.
"""

import argparse
import json
import os
import sys
import time

import numpy as np
from safetensors.numpy import load_file, save_file
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

TENSORS = ("hidden.weight", "hidden.bias", "output.weight", "output.bias")


def data():
    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    return train_test_split(x, y, test_size=0.3, random_state=0, stratify=y)


def fresh_model(seed, hidden):
    """Glorot-uniform weights, zero biases; the same for every copy given the seed."""
    rng = np.random.default_rng(seed)
    def glorot(fan_in, fan_out):
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        return rng.uniform(-limit, limit, size=(fan_out, fan_in)).astype(np.float32)
    return {
        "hidden.weight": glorot(64, hidden),
        "hidden.bias": np.zeros(hidden, dtype=np.float32),
        "output.weight": glorot(hidden, 10),
        "output.bias": np.zeros(10, dtype=np.float32),
    }


def forward(m, x):
    h = np.maximum(x @ m["hidden.weight"].T + m["hidden.bias"], 0.0)
    logits = h @ m["output.weight"].T + m["output.bias"]
    logits = logits - logits.max(axis=1, keepdims=True)
    p = np.exp(logits)
    p /= p.sum(axis=1, keepdims=True)
    return h, p


def sgd_step(m, x, y, lr):
    h, p = forward(m, x)
    n = x.shape[0]
    d_logits = p.copy()
    d_logits[np.arange(n), y] -= 1.0
    d_logits /= n
    d_h = (d_logits @ m["output.weight"]) * (h > 0)
    m["output.weight"] -= lr * (d_logits.T @ h)
    m["output.bias"] -= lr * d_logits.sum(axis=0)
    m["hidden.weight"] -= lr * (d_h.T @ x)
    m["hidden.bias"] -= lr * d_h.sum(axis=0)


def evaluate(m, x, y):
    _, p = forward(m, x)
    acc = float((p.argmax(axis=1) == y).mean())
    loss = float(-np.log(np.clip(p[np.arange(len(y)), y], 1e-12, None)).mean())
    return acc, loss


def load_model(path):
    t = load_file(path)
    missing = [n for n in TENSORS if n not in t]
    if missing:
        sys.exit(f"digits_mlp: {path}: missing tensors {', '.join(missing)}")
    return {n: t[n].astype(np.float32) for n in TENSORS}


def env_int(name, default=None):
    v = os.environ.get(name)
    if v is None or v == "":
        if default is None:
            sys.exit(f"digits_mlp: {name} is not set; run me under hadar-fork-run (see wrappers/README.md)")
        return default
    try:
        return int(v)
    except ValueError:
        sys.exit(f"digits_mlp: {name}={v!r} is not an integer")


def write_atomically(path, write):
    tmp = f"{path}.tmp.{os.getpid()}"
    write(tmp)
    with open(tmp, "rb+") as f:
        os.fsync(f.fileno())
    os.replace(tmp, path)


def train(args):
    index = env_int("HADAR_FORK_INDEX")
    rnd = env_int("HADAR_ROUND")
    budget = env_int("HADAR_STEP_BUDGET", -1)
    deadline = env_int("HADAR_DEADLINE", -1)
    done_before = env_int("HADAR_STEPS_DONE", 0)
    out = os.environ.get("HADAR_CHECKPOINT_OUT") or sys.exit("digits_mlp: HADAR_CHECKPOINT_OUT is not set")
    steps_file = os.environ.get("HADAR_STEPS_FILE") or sys.exit("digits_mlp: HADAR_STEPS_FILE is not set")
    if budget < 0 and deadline < 0:
        sys.exit("digits_mlp: neither HADAR_STEP_BUDGET nor HADAR_DEADLINE is set; nothing bounds the round")

    x_train, x_test, y_train, y_test = data()
    start = os.environ.get("HADAR_START_CHECKPOINT")
    model = load_model(start) if start else fresh_model(args.seed, args.hidden)
    rng = np.random.default_rng([args.seed, rnd, index])

    steps = 0
    while budget < 0 or steps < budget:
        if deadline >= 0 and time.time() >= deadline:
            break
        batch = rng.integers(0, len(y_train), size=args.batch)
        sgd_step(model, x_train[batch], y_train[batch], args.lr)
        steps += 1

    meta = {"steps_this_round": str(steps), "steps_before_round": str(done_before), "round": str(rnd), "fork_index": str(index)}
    write_atomically(out, lambda p: save_file(model, p, metadata=meta))
    write_atomically(steps_file, lambda p: open(p, "w").write(f"{steps}\n"))
    acc, loss = evaluate(model, x_test, y_test)
    print(f"digits_mlp: copy {index} round {rnd}: {steps} steps, held-out accuracy {acc:.4f}, loss {loss:.4f}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train one copy for one round (under hadar-fork-run)")
    t.add_argument("--seed", type=int, default=0, help="model initialisation and minibatch seed")
    t.add_argument("--hidden", type=int, default=32, help="hidden units")
    t.add_argument("--batch", type=int, default=16, help="minibatch size")
    t.add_argument("--lr", type=float, default=0.05, help="SGD learning rate")
    e = sub.add_parser("evaluate", help="print a checkpoint's held-out accuracy as JSON")
    e.add_argument("checkpoint")
    args = ap.parse_args()
    if args.command == "train":
        train(args)
    else:
        _, x_test, _, y_test = data()
        acc, loss = evaluate(load_model(args.checkpoint), x_test, y_test)
        print(json.dumps({"accuracy": acc, "loss": loss, "test_samples": int(len(y_test))}))


if __name__ == "__main__":
    main()
