"""The fork environment that ``hadar-fork-run`` gives one copy of one round (see the contract
in wrappers/README.md), read and checked once, and the atomic file writes a copy must do."""

import os
import time
from dataclasses import dataclass
from typing import Callable, Mapping, Optional


class ForkError(Exception):
    """A copy cannot run as the fork contract says; the message names the variable or file."""


class MissingCheckpoint(ForkError):
    """A checkpoint that the environment promises is not there."""


class BudgetSpent(ForkError):
    """The round has nothing left to do: no steps in the budget, or the deadline has passed."""


@dataclass(frozen=True)
class ForkEnv:
    """One copy's view of its round."""

    index: int
    copies: int
    round: int
    checkpoint_out: str
    steps_file: str
    steps_done: int
    start_checkpoint: Optional[str] = None
    step_budget: Optional[int] = None
    deadline: Optional[float] = None
    inner_state_out: Optional[str] = None
    inner_state_from: Optional[str] = None
    gpu_type: Optional[str] = None
    gpus: Optional[int] = None

    @classmethod
    def from_environ(cls, environ: Optional[Mapping[str, str]] = None) -> "ForkEnv":
        """Reads ``HADAR_*`` from ``environ`` (default ``os.environ``). Raises
        :class:`ForkError` naming the variable when one is missing or malformed, and
        :class:`MissingCheckpoint` when ``HADAR_START_CHECKPOINT`` names no file."""
        env = os.environ if environ is None else environ

        def text(name: str, required: bool) -> Optional[str]:
            v = env.get(name)
            if v is None or v == "":
                if required:
                    raise ForkError(
                        f"{name} is not set: run this program under hadar-fork-run "
                        "(see wrappers/README.md, 'The fork-runner contract')"
                    )
                return None
            return v

        def count(name: str, required: bool) -> Optional[int]:
            v = text(name, required)
            if v is None:
                return None
            if not v.isdigit():
                raise ForkError(f"{name}={v[:40]!r} is not a non-negative integer")
            return int(v)

        index = count("HADAR_FORK_INDEX", True)
        copies = count("HADAR_FORK_COPIES", True)
        if copies < 1 or index >= copies:
            raise ForkError(f"HADAR_FORK_INDEX={index} is not below HADAR_FORK_COPIES={copies}")
        budget = count("HADAR_STEP_BUDGET", False)
        deadline = count("HADAR_DEADLINE", False)
        if budget is None and deadline is None:
            raise ForkError("neither HADAR_STEP_BUDGET nor HADAR_DEADLINE is set: nothing bounds the round")
        start = text("HADAR_START_CHECKPOINT", False)
        if start is not None and not os.path.isfile(start):
            raise MissingCheckpoint(
                f"HADAR_START_CHECKPOINT={start} does not exist: the round's start checkpoint is "
                "missing (is the spool on a file system every node shares?)"
            )
        return cls(
            index=index,
            copies=copies,
            round=count("HADAR_ROUND", True),
            checkpoint_out=text("HADAR_CHECKPOINT_OUT", True),
            steps_file=text("HADAR_STEPS_FILE", True),
            steps_done=count("HADAR_STEPS_DONE", False) or 0,
            start_checkpoint=start,
            step_budget=budget,
            deadline=None if deadline is None else float(deadline),
            inner_state_out=text("HADAR_INNER_STATE_OUT", False),
            inner_state_from=text("HADAR_INNER_STATE_FROM", False),
            gpu_type=text("HADAR_GPU_TYPE", False),
            gpus=count("HADAR_GPUS", False),
        )

    def check_not_spent(self, now: Optional[float] = None, margin_s: float = 0.0) -> None:
        """Raises :class:`BudgetSpent` when the round cannot do a single step."""
        if self.step_budget == 0:
            raise BudgetSpent(f"HADAR_STEP_BUDGET is 0: copy {self.index} of round {self.round} has no steps to do")
        now = time.time() if now is None else now
        if self.deadline is not None and now + margin_s >= self.deadline:
            raise BudgetSpent(
                f"HADAR_DEADLINE={int(self.deadline)} has passed (now {now:.0f}, "
                f"{margin_s:.0f} s kept to save): copy {self.index} of round {self.round} has no time left"
            )

    def seed(self, base: int) -> int:
        """A data-order seed for this copy and round: copies see different minibatches,
        and a run is reproducible. ``base`` is the program's own seed."""
        return (base * 1_000_003 + self.round * 1_009 + self.index) % (2**63)


def write_atomically(path: str, write: Callable[[str], None]) -> None:
    """Calls ``write(tmp)`` for a temporary name in ``path``'s directory, syncs it and renames
    it over ``path``: a crash leaves the old file or the new one, never a partial file."""
    tmp = f"{path}.tmp.{os.getpid()}"
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    try:
        d = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY)
        try:
            os.fsync(d)
        finally:
            os.close(d)
    except OSError:
        pass  # some file systems cannot sync a directory; the rename is done either way


def write_steps(env: ForkEnv, steps: int) -> None:
    """Writes the steps done this round to ``HADAR_STEPS_FILE`` (last, after the checkpoint:
    the runner counts a round only when both are there)."""
    if env.step_budget is not None and steps > env.step_budget:
        raise BudgetSpent(f"{steps} steps done but HADAR_STEP_BUDGET is {env.step_budget}")

    def put(tmp: str) -> None:
        with open(tmp, "w") as f:
            f.write(f"{steps}\n")

    write_atomically(env.steps_file, put)
