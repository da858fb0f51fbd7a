"""hadar_fork: run a training program as one copy of a forked (HadarE) hadar job.

``hadar-fork-run`` (and ``hadar serve``, through it) gives each copy its round in
``HADAR_*`` environment variables: the consolidated checkpoint to start from, a step budget
and a deadline, where to write its checkpoint and its step count. This package reads them
(:class:`ForkEnv`), runs a plain PyTorch loop around them (:class:`ForkLoop`) or a Lightning
``Trainer`` (:class:`hadar_fork.lightning.HadarForkCallback`), and writes the results the way
the contract asks (atomically, steps last). See wrappers/README.md.
"""

from .env import BudgetSpent, ForkEnv, ForkError, MissingCheckpoint, write_atomically, write_steps

__all__ = [
    "BudgetSpent",
    "ForkEnv",
    "ForkError",
    "ForkLoop",
    "MissingCheckpoint",
    "write_atomically",
    "write_steps",
]


def __getattr__(name):
    # ForkLoop needs torch; importing the package for ForkEnv alone must not.
    if name == "ForkLoop":
        from .loop import ForkLoop

        return ForkLoop
    raise AttributeError(name)
