"""Unit tests of the hadar_fork helper: the fork environment, the plain loop (budget, deadline,
atomic saves, inner optimizer state kept or reset), the Lightning callback driving a real
lightning.Trainer and a stand-in one, and one copy on two processes through torchrun
--standalone (CPU, gloo)."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from hadar_fork import BudgetSpent, ForkEnv, ForkError, ForkLoop, MissingCheckpoint
from hadar_fork.lightning import HadarForkCallback

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))


def contract(tmp_path, **over):
    env = {
        "HADAR_FORK_INDEX": "1",
        "HADAR_FORK_COPIES": "3",
        "HADAR_ROUND": "2",
        "HADAR_CHECKPOINT_OUT": str(tmp_path / "copy.safetensors"),
        "HADAR_STEPS_FILE": str(tmp_path / "copy.steps"),
        "HADAR_STEPS_DONE": "900",
        "HADAR_STEP_BUDGET": "5",
        "HADAR_INNER_STATE_OUT": str(tmp_path / "copy.safetensors.inner"),
    }
    env.update({k: v for k, v in over.items() if v is not None})
    for k, v in over.items():
        if v is None:
            env.pop(k, None)
    return env


def model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))


def train(loop, m, opt):
    g = torch.Generator().manual_seed(loop.env.seed(1))
    while not loop.should_stop():
        opt.zero_grad()
        m(torch.randn(8, 4, generator=g)).pow(2).mean().backward()
        opt.step()
        loop.step()


class Clock:
    def __init__(self, t):
        self.t = t

    def __call__(self):
        return self.t


# -- the environment ------------------------------------------------------------------------


def test_the_environment_is_read_whole(tmp_path):
    start = tmp_path / "start.safetensors"
    save_file({"w": torch.zeros(1)}, str(start))
    e = ForkEnv.from_environ(contract(tmp_path, HADAR_START_CHECKPOINT=str(start),
                                      HADAR_DEADLINE="4102444800", HADAR_GPU_TYPE="v100",
                                      HADAR_GPUS="2", HADAR_INNER_STATE_FROM="/x/prev.inner"))
    assert (e.index, e.copies, e.round, e.steps_done, e.step_budget) == (1, 3, 2, 900, 5)
    assert e.deadline == 4102444800.0 and e.gpu_type == "v100" and e.gpus == 2
    assert e.start_checkpoint == str(start) and e.inner_state_from == "/x/prev.inner"
    # Seeds differ between copies and rounds, and repeat for the same ones.
    other = ForkEnv.from_environ(contract(tmp_path, HADAR_FORK_INDEX="2"))
    assert e.seed(7) != other.seed(7) and e.seed(7) == ForkEnv.from_environ(contract(tmp_path)).seed(7)


@pytest.mark.parametrize("over, word", [
    ({"HADAR_FORK_INDEX": None}, "HADAR_FORK_INDEX is not set"),
    ({"HADAR_ROUND": "two"}, "HADAR_ROUND='two'"),
    ({"HADAR_FORK_INDEX": "3"}, "not below HADAR_FORK_COPIES=3"),
    ({"HADAR_STEP_BUDGET": None}, "neither HADAR_STEP_BUDGET nor HADAR_DEADLINE"),
    ({"HADAR_CHECKPOINT_OUT": ""}, "HADAR_CHECKPOINT_OUT is not set"),
])
def test_a_bad_environment_is_refused_naming_the_variable(tmp_path, over, word):
    with pytest.raises(ForkError, match=word):
        ForkEnv.from_environ(contract(tmp_path, **over))


def test_a_promised_start_checkpoint_that_is_missing_is_an_error(tmp_path):
    gone = str(tmp_path / "consolidated-4.safetensors")
    with pytest.raises(MissingCheckpoint, match="consolidated-4.safetensors does not exist"):
        ForkEnv.from_environ(contract(tmp_path, HADAR_START_CHECKPOINT=gone))


def test_a_spent_budget_or_a_passed_deadline_is_an_error(tmp_path):
    m = model()
    with pytest.raises(BudgetSpent, match="HADAR_STEP_BUDGET is 0"):
        ForkLoop(m, env=ForkEnv.from_environ(contract(tmp_path, HADAR_STEP_BUDGET="0"))).start()
    env = ForkEnv.from_environ(contract(tmp_path, HADAR_STEP_BUDGET=None, HADAR_DEADLINE="1000"))
    with pytest.raises(BudgetSpent, match="HADAR_DEADLINE=1000 has passed"):
        ForkLoop(m, env=env, clock=Clock(998.0), save_margin_s=5).start()
    assert not os.path.exists(env.checkpoint_out) and not os.path.exists(env.steps_file)


# -- the plain loop -------------------------------------------------------------------------


def test_a_round_stops_at_its_budget_and_saves_weights_then_steps(tmp_path):
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    env = ForkEnv.from_environ(contract(tmp_path))
    with ForkLoop(m, opt, env=env, log=None) as loop:
        train(loop, m, opt)
        assert not os.path.exists(env.steps_file), "nothing is written before the round ends"
    assert loop.steps == 5
    assert open(env.steps_file).read() == "5\n"
    saved = load_file(env.checkpoint_out)
    assert set(saved) == set(m.state_dict())
    for k, v in m.state_dict().items():
        assert torch.equal(saved[k], v)
    assert not [p for p in os.listdir(tmp_path) if ".tmp." in p], "no temporary files left"
    # One step more than the budget is refused, naming the budget.
    with pytest.raises(BudgetSpent, match="HADAR_STEP_BUDGET=5"):
        loop.step()


def test_the_deadline_stops_a_round_with_time_to_save(tmp_path):
    clock = Clock(1000.0)
    env = ForkEnv.from_environ(contract(tmp_path, HADAR_STEP_BUDGET=None, HADAR_DEADLINE="1100"))
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    loop = ForkLoop(m, opt, env=env, clock=clock, save_margin_s=10).start()
    while not loop.should_stop():
        loop.step()
        clock.t += 2.0  # every step takes 2 s
    # It stops once another 2 s step and the 10 s margin would pass 1100: at 1088.
    assert clock.t == 1088.0 and loop.steps == 44
    assert loop.finish() == 44 and open(env.steps_file).read() == "44\n"


def test_a_failed_round_writes_nothing(tmp_path):
    env = ForkEnv.from_environ(contract(tmp_path))
    m = model()
    with pytest.raises(RuntimeError):
        with ForkLoop(m, env=env, log=None) as loop:
            loop.step()
            raise RuntimeError("out of memory")
    assert not os.path.exists(env.checkpoint_out) and not os.path.exists(env.steps_file)


def two_rounds(tmp_path, mode):
    """Round 0 then round 1 of copy 1 with AdamW; returns round 1's optimizer."""
    r0 = tmp_path / "r0"
    r1 = tmp_path / "r1"
    r0.mkdir()
    r1.mkdir()
    m = model()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-2)
    with ForkLoop(m, opt, env=ForkEnv.from_environ(contract(r0)), inner_state=mode, log=None) as loop:
        train(loop, m, opt)
    start = str(r0 / "copy.safetensors")
    env1 = ForkEnv.from_environ(contract(r1, HADAR_START_CHECKPOINT=start,
                                         HADAR_INNER_STATE_FROM=str(r0 / "copy.safetensors.inner")))
    m1 = model()  # a fresh build: its weights must come from the start checkpoint
    opt1 = torch.optim.AdamW(m1.parameters(), lr=1e-2)
    loop = ForkLoop(m1, opt1, env=env1, inner_state=mode, log=None).start()
    for k, v in load_file(start).items():
        assert torch.equal(m1.state_dict()[k], v), k
    return r0, opt1


def test_keep_carries_the_inner_optimizer_state_to_the_next_round(tmp_path):
    r0, opt1 = two_rounds(tmp_path, "keep")
    assert (r0 / "copy.safetensors.inner").is_file()
    steps = [s["step"].item() for s in opt1.state_dict()["state"].values()]
    assert steps and all(s == 5 for s in steps), steps


def test_reset_starts_every_round_with_a_fresh_optimizer(tmp_path):
    r0, opt1 = two_rounds(tmp_path, "reset")
    assert not (r0 / "copy.safetensors.inner").exists()
    assert opt1.state_dict()["state"] == {}


def test_a_start_checkpoint_of_another_model_is_refused(tmp_path):
    start = tmp_path / "other.safetensors"
    save_file({"w": torch.zeros(1)}, str(start))
    env = ForkEnv.from_environ(contract(tmp_path, HADAR_START_CHECKPOINT=str(start)))
    with pytest.raises(ForkError, match="other.safetensors: does not fit the model"):
        ForkLoop(model(), env=env, log=None).start()


# -- Lightning ------------------------------------------------------------------------------


class FakeTrainer:
    """The parts of lightning.Trainer the callback uses."""

    def __init__(self, optimizer):
        self.optimizers = [optimizer]
        self.global_step = 0
        self.should_stop = False


def test_the_lightning_callback_stops_at_the_budget_and_saves(tmp_path):
    m = model()
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    trainer = FakeTrainer(opt)
    cb = HadarForkCallback(env=ForkEnv.from_environ(contract(tmp_path, HADAR_STEP_BUDGET="3")))
    cb.on_fit_start(trainer, m)
    batches = 0
    while not trainer.should_stop and batches < 100:
        if cb.on_train_batch_start(trainer, m, None, batches) == -1:
            break
        # Gradient accumulation over two batches: one optimiser step every second batch.
        if batches % 2 == 1:
            opt.step()
            trainer.global_step += 1
        cb.on_train_batch_end(trainer, m, None, None, batches)
        batches += 1
    cb.on_fit_end(trainer, m)
    assert trainer.global_step == 3 and batches == 6
    assert open(tmp_path / "copy.steps").read() == "3\n"
    assert set(load_file(str(tmp_path / "copy.safetensors"))) == set(m.state_dict())


# -- one copy on several processes ----------------------------------------------------------


def test_one_copy_on_two_processes_through_torchrun(tmp_path):
    torchrun = shutil.which("torchrun") or os.path.join(os.path.dirname(sys.executable), "torchrun")
    if not os.access(torchrun, os.X_OK):
        pytest.skip("torchrun is not installed")
    out = tmp_path / "copy.safetensors"
    res = tmp_path / "copy.json"
    cmd = [os.path.join(REPO, "wrappers", "hadar-fork-run"), "--index", "0", "--copies", "1",
           "--round", "0", "--checkpoint-out", str(out), "--result", str(res), "--step-budget", "7",
           "--", torchrun, "--standalone", "--nproc-per-node=2",
           os.path.join(REPO, "wrappers", "examples", "digits_torch.py"), "train", "--hidden", "16"]
    env = dict(os.environ, PYTHONPATH=os.path.join(REPO, "wrappers", "python", "src"), OMP_NUM_THREADS="1")
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr
    result = json.loads(res.read_text())
    assert result["ok"] and result["steps"] == 7
    # Rank 0 alone reported and saved; the checkpoint has the plain model's names (no DDP
    # "module." prefix), so it averages with single-process copies.
    assert p.stdout.count("digits_torch: copy 0 round 0: 7 steps") == 1, p.stdout
    assert sorted(load_file(str(out))) == ["0.bias", "0.weight", "2.bias", "2.weight", "4.bias", "4.weight"]


def test_the_lightning_callback_drives_a_real_trainer(tmp_path):
    lightning = pytest.importorskip("lightning")

    class Net(lightning.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = model()

        def training_step(self, batch, _):
            (x,) = batch
            return self.net(x).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=1e-2)

    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=8)

    def fit(env, net):
        cb = HadarForkCallback(env=env)
        trainer = lightning.Trainer(
            max_epochs=100, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
            enable_progress_bar=False, enable_model_summary=False, callbacks=[cb])
        trainer.fit(net, data)
        return trainer, cb

    r0 = tmp_path / "r0"
    r0.mkdir()
    trainer, _ = fit(ForkEnv.from_environ(contract(r0, HADAR_STEP_BUDGET="11")), Net())
    # 11 optimiser steps over two epochs of 8 batches, then the trainer stopped.
    assert trainer.global_step == 11
    assert open(r0 / "copy.steps").read() == "11\n"
    saved = load_file(str(r0 / "copy.safetensors"))
    assert sorted(saved) == ["net.0.bias", "net.0.weight", "net.2.bias", "net.2.weight"]
    # The next round starts from those weights and that AdamW state.
    r1 = tmp_path / "r1"
    r1.mkdir()
    env1 = ForkEnv.from_environ(contract(r1, HADAR_STEP_BUDGET="3",
                                         HADAR_START_CHECKPOINT=str(r0 / "copy.safetensors"),
                                         HADAR_INNER_STATE_FROM=str(r0 / "copy.safetensors.inner")))
    net = Net()
    trainer, cb = fit(env1, net)
    assert open(r1 / "copy.steps").read() == "3\n"
    state = cb.loop.optimizer.state_dict()["state"]
    assert state and all(s["step"].item() == 14 for s in state.values())
