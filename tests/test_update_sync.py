"""An update waits for nothing it does not need: the loss guard keeps its flags on the device and reads them
back only where the trainer waits anyway (a log, a save, an evaluation, the end of the updates), and several
processes agree on a stop on a signal with an all-reduce on the CPU (gloo) that runs while the next update
does, not with a device tensor read back after every update. What each must still do: a skipped update
leaves the weights and the optimizer's state as they were, under a loss scaler too, and every process stops
after the same update, with a process's own copy of a signal that another one passed on first not taken for
a second signal."""

import json
import multiprocessing
import signal
import time
from pathlib import Path

import pytest
import torch
from agreement_worker import agree
from safetensors.torch import load_file
from test_host_reads import HostReads
from test_training import run
from test_training_faults import WEIGHT, NanLossAt

from vanilla_transformer.train.common.checkpoints import checkpoint_dirs
from vanilla_transformer.train.translation.trainer import TranslationTrainer

OWN_FILES = {"run_trainer.py", "preemption.py"}  # the loss guard's and the stop's
QUIET = dict(eval_steps=1000, save_steps=1000, logging_steps=1000)  # no log, save or evaluation in between


def skipped_warnings(caplog) -> list[str]:
    return [record.getMessage() for record in caplog.records if "skipped:" in record.getMessage()]


# -- the loss guard -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("logging_steps", "reads"), [(1000, 1), (3, 2)])
def test_updates_read_the_loss_guard_only_where_the_trainer_logs_or_ends(
    tmp_path, monkeypatch, caplog, logging_steps, reads
):
    """Six updates, one of them with a NaN loss: the guard reads its flags back once per log and once at the
    end (before: one read per batch, six here), and still skips and names update 3."""
    monkeypatch.setattr(TranslationTrainer, "compute_loss", NanLossAt({3}))
    with HostReads() as counted:
        results, _ = run(tmp_path, "run", max_steps=6, **{**QUIET, "logging_steps": logging_steps})
    assert results["updates"] == 6
    own = [read for read in counted.reads if read[1] in OWN_FILES]
    assert len(own) == reads, own
    (skipped,) = skipped_warnings(caplog)
    assert skipped.startswith("Update 3 skipped: the loss is not finite (nan) on a batch of ")


def optimizer_state(checkpoint: Path) -> dict:
    return torch.load(checkpoint / "optimizer.pt", weights_only=True)["state"]


def force_unfused_adam(monkeypatch):
    """Adam without its fused step (a user's optimizer, FSDP's): one that cannot skip on the device."""
    real = torch.optim.Adam.__init__

    def unfused(self, *args, **kwargs):
        real(self, *args, **{**kwargs, "fused": False, "foreach": False})

    monkeypatch.setattr(torch.optim.Adam, "__init__", unfused)


@pytest.mark.parametrize("optimizer", ["fused", "unfused"])
def test_a_skipped_update_leaves_the_weights_and_the_optimizer_state_as_they_were(
    tmp_path, monkeypatch, caplog, optimizer
):
    """The fused Adam skips on the device (``found_inf``); another optimizer gets no gradients (its flag read
    at once). Either way checkpoint 3 holds checkpoint 2's weights and Adam state, step count included."""
    if optimizer == "unfused":
        force_unfused_adam(monkeypatch)
    monkeypatch.setattr(TranslationTrainer, "compute_loss", NanLossAt({3}))
    _, folder = run(tmp_path, "run", max_steps=4, save_steps=1, eval_steps=1000)
    saved = {int(path.name.split("-")[1]): path for path in checkpoint_dirs(folder / "checkpoints")}
    assert torch.equal(
        load_file(saved[3] / "model.safetensors")[WEIGHT], load_file(saved[2] / "model.safetensors")[WEIGHT]
    )
    before, after = optimizer_state(saved[2]), optimizer_state(saved[3])
    assert before.keys() == after.keys()
    for index, state in before.items():
        for name, value in state.items():
            assert torch.equal(after[index][name], value), (index, name)
    assert not torch.equal(optimizer_state(saved[4])[0]["exp_avg"], after[0]["exp_avg"])  # update 4 did step
    assert len(skipped_warnings(caplog)) == 1


def test_an_fp16_update_with_a_nan_loss_is_skipped_by_the_loss_scaler(tmp_path, monkeypatch, caplog):
    """Under fp16's loss scaler (before: the guard dropped every gradient, and the scaler's update failed with
    "No inf checks were recorded prior to update"): the scaler skips the update, as after an overflow."""
    monkeypatch.setattr(TranslationTrainer, "compute_loss", NanLossAt({3}))
    results, folder = run(tmp_path, "run", mixed_precision="fp16", max_steps=5, save_steps=1, eval_steps=1000)
    assert results["updates"] == 5
    saved = {
        int(p.name.split("-")[1]): load_file(p / "model.safetensors")
        for p in checkpoint_dirs(folder / "checkpoints")
    }
    assert torch.equal(saved[3][WEIGHT], saved[2][WEIGHT])
    assert not torch.equal(saved[4][WEIGHT], saved[3][WEIGHT])
    assert all(torch.isfinite(tensor).all() for tensor in saved[5].values())
    (skipped,) = skipped_warnings(caplog)
    assert skipped.startswith("Update 3 skipped: the loss is not finite (nan)")


def test_a_run_of_nan_updates_read_late_stops_at_the_update_that_made_five(tmp_path, monkeypatch):
    """Read at update 10's log, a run of NaN losses from update 3 on stops the run with update 7's error:
    the updates after the fifth were skipped on the device too, and no checkpoint was written."""
    monkeypatch.setattr(TranslationTrainer, "compute_loss", NanLossAt(range(3, 100)))
    with pytest.raises(ValueError, match=r"not finite for 5 updates in a row \(the last: update 7, "):
        run(tmp_path, "run", max_steps=20, **{**QUIET, "logging_steps": 10})
    assert not checkpoint_dirs(tmp_path / "run" / "checkpoints")


# -- agreeing on a stop, on two processes -------------------------------------------------------------------


def run_two(folder: Path, *arguments) -> list[dict]:
    """``agree`` on two spawned processes; what each wrote."""
    spawn = multiprocessing.get_context("spawn")
    processes = [spawn.Process(target=agree, args=(rank, str(folder), *arguments)) for rank in (0, 1)]
    for process in processes:
        process.start()
    deadline = time.monotonic() + 120
    for process in processes:
        process.join(max(deadline - time.monotonic(), 1))
    for process in processes:
        if process.is_alive():
            process.kill()
    errors = [(folder / f"rank{rank}.err").read_text() for rank in (0, 1)]
    assert [process.exitcode for process in processes] == [0, 0], errors
    assert not any("SIGTERM again" in text for text in errors), errors  # a single signal each
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in (0, 1)]


@pytest.mark.parametrize(
    ("signalled", "slow", "signal_at", "last", "stopped_at"),
    [(0, 1, 3, 40, 4), (1, 0, 3, 40, 4), (0, 1, 5, 5, 5)],
    ids=["first-signalled", "second-signalled", "during-the-last-update"],
)
def test_two_processes_agree_on_the_update_to_stop_after_without_waiting_at_each(
    tmp_path, signalled, slow, signal_at, last, stopped_at
):
    """A signal to one process during update 3 stops both after update 4, whichever is signalled and
    whichever is slower: each update starts an all-reduce on the CPU (gloo) and reads the one started after
    the update before. During the last update, they agree at once: both stop after it. The other process's
    own SIGTERM, arriving after the agreement, is not a second signal (before: it stopped that process at
    once, ``os._exit``, and left the other in the checkpoint's barrier)."""
    records = run_two(tmp_path, signalled, slow, signal_at, last)
    assert [record["stopped_at"] for record in records] == [stopped_at, stopped_at]
    assert [record["received"] for record in records] == [signal.SIGTERM, signal.SIGTERM]
    for record in records:  # one all-reduce an update, started without waiting (the last update's waited for)
        assert record["per_update"] == [[True, "cpu", "gloo"]] * min(stopped_at, signal_at)
