"""A PyTorch Lightning callback that runs ``Trainer.fit`` as one copy of a forked (HadarE)
job round:

    from hadar_fork.lightning import HadarForkCallback
    trainer = lightning.Trainer(max_steps=-1, callbacks=[HadarForkCallback()])
    trainer.fit(model, datamodule)   # starts from the round's checkpoint, stops at the
                                     # budget or deadline, saves, writes the steps file

Steps are optimiser updates (``trainer.global_step``), so gradient accumulation counts one
step per update. Lightning is imported only if installed; without it the callback is a plain
object with the same hooks (its tests drive it both ways).
"""

import time
from typing import Optional

from .env import ForkEnv
from .loop import ForkLoop

try:  # Lightning 2.x, then the older package name
    from lightning.pytorch import Callback as _Base
except ImportError:  # pragma: no cover - depends on what is installed
    try:
        from pytorch_lightning import Callback as _Base
    except ImportError:
        _Base = object


class HadarForkCallback(_Base):
    """Loads the round's start checkpoint at fit start, stops the trainer at the step budget
    or before the deadline, and saves the copy's checkpoint and steps at fit end."""

    def __init__(self, inner_state: str = "keep", env: Optional[ForkEnv] = None,
                 save_margin_s: float = 5.0, clock=time.time):
        super().__init__()
        self._args = dict(inner_state=inner_state, env=env, save_margin_s=save_margin_s, clock=clock)
        self.loop: Optional[ForkLoop] = None
        self._counted = 0

    def on_fit_start(self, trainer, pl_module):
        optimizers = getattr(trainer, "optimizers", None) or [None]
        self.loop = ForkLoop(pl_module, optimizers[0], **self._args).start()
        self._counted = trainer.global_step

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
        if self.loop.should_stop():
            trainer.should_stop = True
            return -1  # Lightning skips the rest of the epoch
        return None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        while self._counted < trainer.global_step:
            self.loop.step()
            self._counted += 1
        if self.loop.should_stop():
            trainer.should_stop = True

    def on_fit_end(self, trainer, pl_module):
        self.loop.finish()
