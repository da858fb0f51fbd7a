"""A PyTorch training loop as one copy of a forked (HadarE) job.

    from hadar_fork import ForkLoop

    model = build_model()                 # deterministic: seed before building
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with ForkLoop(model, opt) as loop:    # loads the start checkpoint (and inner state)
        g = torch.Generator().manual_seed(loop.env.seed(1234))
        for x, y in batches(g):
            if loop.should_stop():        # step budget reached, or the deadline is near
                break
            ...one optimiser step...
            loop.step()
    # on leaving the block: weights saved atomically, then the steps file

Under ``torchrun --standalone --nproc-per-node=N`` (one copy on N GPUs) every rank runs the
loop; all ranks load the start, agree on when to stop, and rank 0 alone writes the files.
"""

import os
import sys
import time
from typing import Callable, Optional

from .env import BudgetSpent, ForkEnv, ForkError, write_atomically, write_steps

#: What to do with the inner optimizer's state (Adam's moments, SGD's momentum buffers)
#: between rounds: ``keep`` saves it beside the copy's checkpoint and the next round's copy
#: of the same index loads it; ``reset`` starts every round with a fresh optimizer.
INNER_STATE_MODES = ("keep", "reset")


def _dist():
    """torch.distributed when a process group is up (torchrun), else None."""
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


class ForkLoop:
    """Runs one copy's round: see the module's documentation."""

    def __init__(
        self,
        model,
        optimizer=None,
        *,
        inner_state: str = "keep",
        env: Optional[ForkEnv] = None,
        save_margin_s: float = 5.0,
        clock: Callable[[], float] = time.time,
        log=sys.stderr,
    ):
        if inner_state not in INNER_STATE_MODES:
            raise ValueError(f"inner_state={inner_state!r}: expected one of {', '.join(INNER_STATE_MODES)}")
        self.model = model
        self.optimizer = optimizer
        self.inner_state = inner_state
        self.env = env if env is not None else ForkEnv.from_environ()
        self.save_margin_s = save_margin_s
        self.clock = clock
        self.log = log
        self.steps = 0
        self._last = None
        self._step_s = 0.0
        self._stopped = False
        self._started = False

    # -- the round -------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        d = _dist()
        return d.get_rank() if d else 0

    @property
    def steps_total_before(self) -> int:
        """Steps done by all copies in earlier rounds (for learning-rate schedules)."""
        return self.env.steps_done

    def start(self) -> "ForkLoop":
        """Checks the round can do a step, loads the start checkpoint into the model (round 0
        has none: the model must be built deterministically) and, in ``keep`` mode, this copy
        index's inner optimizer state from the previous round when there is one."""
        self.env.check_not_spent(self.clock(), self.save_margin_s)
        if self.env.start_checkpoint:
            from safetensors.torch import load_file

            state = load_file(self.env.start_checkpoint)
            missing, unexpected = self._load_weights(state)
            if missing or unexpected:
                raise ForkError(
                    f"{self.env.start_checkpoint}: does not fit the model "
                    f"(missing {sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]})"
                )
        if self.optimizer is not None and self.inner_state == "keep":
            src = self.env.inner_state_from
            if src and os.path.isfile(src):
                import torch

                self.optimizer.load_state_dict(torch.load(src, map_location="cpu", weights_only=True))
                self._say(f"inner optimizer state from {src}")
            elif self.env.start_checkpoint:
                self._say("no inner optimizer state from the previous round; starting it fresh")
        self._started = True
        self._last = self.clock()
        return self

    def should_stop(self) -> bool:
        """True when the budget is used up or the deadline is too near for another step and
        the save. Under torchrun, every rank gets the same answer (the stop is agreed)."""
        if self._stopped:
            return True
        stop = self.env.step_budget is not None and self.steps >= self.env.step_budget
        if not stop and self.env.deadline is not None:
            # Another step (estimated by the slowest so far) and the save must fit.
            stop = self.clock() + self._step_s + self.save_margin_s >= self.env.deadline
        d = _dist()
        if d is not None:
            import torch

            flag = torch.tensor([1 if stop else 0], dtype=torch.int32)
            d.all_reduce(flag, op=d.ReduceOp.MAX)
            stop = bool(flag.item())
        self._stopped = stop
        return stop

    def step(self) -> None:
        """Counts one optimiser update."""
        if not self._started:
            raise ForkError("ForkLoop.step() before start(): the start checkpoint was not loaded")
        if self.env.step_budget is not None and self.steps >= self.env.step_budget:
            raise BudgetSpent(
                f"step {self.steps + 1} is past HADAR_STEP_BUDGET={self.env.step_budget}; "
                "call should_stop() before each step"
            )
        self.steps += 1
        now = self.clock()
        if self._last is not None:
            self._step_s = max(self._step_s, now - self._last)
        self._last = now

    def finish(self) -> int:
        """Saves the weights (safetensors, atomically), the inner optimizer state in
        ``keep`` mode, and then the steps file; returns the steps done. Rank 0 writes; the
        other ranks wait for it."""
        if self.rank == 0:
            from safetensors.torch import save_file

            state = {k: v.detach().cpu().contiguous() for k, v in self._weights().items()}
            meta = {
                "hadar_round": str(self.env.round),
                "hadar_fork_index": str(self.env.index),
                "hadar_steps_this_round": str(self.steps),
            }
            write_atomically(self.env.checkpoint_out, lambda p: save_file(state, p, metadata=meta))
            if self.optimizer is not None and self.inner_state == "keep" and self.env.inner_state_out:
                import torch

                opt_state = self.optimizer.state_dict()
                write_atomically(self.env.inner_state_out, lambda p: torch.save(opt_state, p))
            write_steps(self.env, self.steps)
        d = _dist()
        if d is not None:
            d.barrier()
        return self.steps

    # -- context manager -------------------------------------------------------------------

    def __enter__(self) -> "ForkLoop":
        return self.start()

    def __exit__(self, exc_type, exc, tb) -> bool:
        if exc_type is None:
            self.finish()
        return False  # a failed round writes nothing: the runner reports the failure

    # -- internals -------------------------------------------------------------------------

    def _module(self):
        # A DistributedDataParallel wrapper keeps the model as .module; checkpoints hold the
        # plain model's names so that every copy (1 GPU or N) writes the same tensors.
        return getattr(self.model, "module", self.model)

    def _weights(self):
        return self._module().state_dict()

    def _load_weights(self, state):
        result = self._module().load_state_dict(state, strict=False)
        return result.missing_keys, result.unexpected_keys

    def _say(self, msg: str) -> None:
        if self.rank == 0 and self.log is not None:
            print(f"hadar_fork: copy {self.env.index} round {self.env.round}: {msg}", file=self.log)
