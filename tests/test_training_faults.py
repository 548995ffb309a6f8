"""Faults during a translation run: a loss that is not finite, a damaged
checkpoint on resume, a resume whose model or data settings changed. Each gets a clear message, and
nothing good is lost: the last good checkpoint stays the one ``resume`` takes."""

import functools
import math

import pytest
import torch
from safetensors.torch import load_file
from test_training import logged_losses, run

from vanilla_transformer.train.common.checkpoints import checkpoint_dirs, damage, write_checksums
from vanilla_transformer.train.translation.trainer import TranslationTrainer

WEIGHT = "model.encoder.embed_tokens.weight"


def weights(folder):
    return load_file(folder / "model.safetensors")


class NanLossAt:
    """``TranslationTrainer.compute_loss`` returning NaN on the training calls numbered in ``calls``
    (1-based): one call per training batch here (one batch per update). On every device: the loss the
    trainer steps on, whichever kernel computed it (the fused projection + loss of CPUs, or the model's own)."""

    def __init__(self, calls, real=TranslationTrainer.compute_loss):
        self.calls, self.real, self.count = set(calls), real, 0

    def __get__(self, trainer, owner=None):
        return self if trainer is None else functools.partial(self, trainer)

    def __call__(self, trainer, model, inputs, *args, **kwargs):
        result = self.real(trainer, model, inputs, *args, **kwargs)
        if not model.training:
            return result
        self.count += 1
        if self.count not in self.calls:
            return result
        return (result[0] * float("nan"), *result[1:]) if isinstance(result, tuple) else result * float("nan")


def test_an_update_with_a_nan_loss_is_skipped_and_logged(tmp_path, monkeypatch, caplog):
    """Update 3's loss is NaN: its gradients are dropped, so the weights after update 3 are those after
    update 2; the warning names the update and the batch; the run goes on and ends with finite weights."""
    monkeypatch.setattr(TranslationTrainer, "compute_loss", NanLossAt({3}))
    results, folder = run(tmp_path, "run", max_steps=5, save_steps=1, eval_steps=1000)
    assert results["updates"] == 5
    saved = {int(path.name.split("-")[1]): weights(path) for path in checkpoint_dirs(folder / "checkpoints")}
    assert sorted(saved) == [1, 2, 3, 4, 5]
    assert torch.equal(saved[3][WEIGHT], saved[2][WEIGHT])  # update 3 did not move the weights
    assert not torch.equal(saved[4][WEIGHT], saved[3][WEIGHT])  # update 4 did
    assert all(torch.isfinite(tensor).all() for tensor in saved[5].values())
    skipped = [record.getMessage() for record in caplog.records if "skipped:" in record.getMessage()]
    assert len(skipped) == 1 and "Update 3 skipped: the loss is not finite (nan)" in skipped[0]
    assert "sentences" in skipped[0] and "tokens" in skipped[0]


def test_a_run_whose_loss_stays_nan_stops_with_a_clear_error_and_finite_checkpoints(tmp_path, monkeypatch):
    """Five NaN updates in a row stop the run with a message that says what to change; every checkpoint
    written holds the finite weights of the last good update (before: the run went on to the end and
    saved a model whose validation loss was NaN)."""
    monkeypatch.setattr(TranslationTrainer, "compute_loss", NanLossAt(range(3, 100)))
    with pytest.raises(ValueError, match=r"not finite for 5 updates in a row .*update 7.*Lower `lr_scale`"):
        run(tmp_path, "run", max_steps=20, save_steps=1, eval_steps=1000)
    folder = tmp_path / "run"
    assert not (folder / "model").exists()
    last = checkpoint_dirs(folder / "checkpoints")[-1]
    assert last.name == "checkpoint-6"  # update 7 raised before its save
    assert torch.equal(weights(last)[WEIGHT], weights(folder / "checkpoints" / "checkpoint-2")[WEIGHT])


def test_a_huge_learning_rate_is_stopped_not_saved(tmp_path):
    """As a user meets it: `lr_scale=1e7` drives the loss to NaN; the run stops with the message instead
    of finishing with a NaN model."""
    with pytest.raises(ValueError, match="not finite for 5 updates in a row"):
        run(tmp_path, "run", max_steps=60, lr_scale=1e7, save_steps=1000, eval_steps=1000)
    assert not (tmp_path / "run" / "model").exists()


# -- a damaged checkpoint on resume -------------------------------------------------------------------


def _truncate(path, keep=100):
    path.write_bytes(path.read_bytes()[:keep])


class _Payload:
    """What a pickle that runs code on load looks like: here it would only print."""

    def __reduce__(self):
        return (print, ("the payload ran",))


def _with_payload(checkpoint, name):
    """``name`` rewritten to hold a payload, and the checksums rewritten to match (issue 56): the checksums
    cannot tell, the load must."""
    torch.save({"state": {}, "param_groups": [], "extra": _Payload()}, checkpoint / name)
    write_checksums(checkpoint)


def _garbled(checkpoint, name):
    (checkpoint / name).write_bytes(b"not a torch file at all")
    write_checksums(checkpoint)


def _flip_a_bit(path, offset=-50):
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    ("hurt", "named"),
    [
        (lambda c: _truncate(c / "model.safetensors"), "model.safetensors has 100 bytes"),
        # Once, the other damages: the check that finds them is the package's own, and the resume that
        # follows is the same library calls as above, which run at both ends of the ranges.
        pytest.param(
            lambda c: _flip_a_bit(c / "model.safetensors"),
            "model.safetensors has changed since it was saved",
            marks=pytest.mark.newest_only,
        ),
        pytest.param(
            lambda c: _truncate(c / "optimizer.pt"),
            "optimizer.pt has 100 bytes",
            marks=pytest.mark.newest_only,
        ),
        pytest.param(
            lambda c: (c / "trainer_state.json").write_text("{broken"),
            "trainer_state.json has",
            marks=pytest.mark.newest_only,
        ),
        # At both ends: what torch.load's weights_only says differs between releases.
        pytest.param(
            lambda c: _with_payload(c, "optimizer.pt"),
            "optimizer.pt is unsafe: it holds a pickle that would run code, which torch.load refuses",
        ),
        pytest.param(
            lambda c: _garbled(c, "rng_state.pth"),
            "rng_state.pth is damaged and cannot be read",
            marks=pytest.mark.newest_only,
        ),
    ],
    ids=[
        "truncated-weights",
        "bit-flipped-weights",
        "truncated-optimizer",
        "broken-trainer-state",
        "unsafe-optimizer",
        "garbled-rng-state",
    ],
)
def test_resume_passes_over_a_damaged_checkpoint_to_the_newest_intact_one(tmp_path, capsys, hurt, named):
    settings = dict(save_steps=1, eval_steps=1000, model={"dropout": 0.1})
    _, straight = run(tmp_path, "straight", max_steps=5, **settings)
    _, folder = run(tmp_path, "hurt", max_steps=3, **settings)
    hurt(folder / "checkpoints" / "checkpoint-3")
    assert damage(folder / "checkpoints" / "checkpoint-2") is None
    capsys.readouterr()
    results, _ = run(tmp_path, "hurt", max_steps=5, resume=True, **settings)
    printed = capsys.readouterr().out
    assert "checkpoint-3 cannot be resumed from (" in printed and named in printed
    assert "the payload ran" not in printed
    assert "Resuming from" in printed and printed.split("Resuming from ")[1].split()[0].endswith(
        "checkpoint-2."
    )
    assert results["updates"] == 5
    expected, got = logged_losses(straight), logged_losses(folder)  # updates 3-5 redone from checkpoint 2
    assert [got[s] for s in (3, 4, 5)] == pytest.approx([expected[s] for s in (3, 4, 5)], abs=1e-6)


def test_resume_with_every_checkpoint_damaged_is_refused_not_restarted(tmp_path):
    _, folder = run(tmp_path, "run", max_steps=2, save_steps=1, eval_steps=1000)
    for checkpoint in checkpoint_dirs(folder / "checkpoints"):
        _truncate(checkpoint / "model.safetensors")
    with pytest.raises(
        ValueError, match=r"resume: no intact checkpoint .*checkpoint-2: model.safetensors has"
    ):
        run(tmp_path, "run", max_steps=4, resume=True, save_steps=1, eval_steps=1000)


# -- a resume with other settings ---------------------------------------------------------------------


def test_resume_with_a_changed_model_or_data_setting_is_refused_naming_the_fields(tmp_path):
    _, folder = run(tmp_path, "run", max_steps=2, save_steps=1, eval_steps=1000)
    with pytest.raises(
        ValueError,
        match=r"settings differ .*checkpoint-2 \(max_tokens: 300 -> 400; model\.d_model: 32 -> 64\)",
    ):
        run(tmp_path, "run", max_steps=4, resume=True, model={"d_model": 64}, max_tokens=400)
    # What an update is: its batches (accumulation), its precision, its schedule.
    with pytest.raises(ValueError, match=r"settings differ .*\(gradient_accumulation_steps: 1 -> 2\)"):
        run(tmp_path, "run", max_steps=4, resume=True, gradient_accumulation_steps=2)
    with pytest.raises(ValueError, match=r"settings differ .*\(mixed_precision: 'no' -> 'bf16'\)"):
        run(tmp_path, "run", max_steps=4, resume=True, mixed_precision="bf16")
    with pytest.raises(ValueError, match=r"settings differ .*\(warmup_steps: 4 -> 8\)"):
        run(tmp_path, "run", max_steps=4, resume=True, warmup_steps=8)
    # Settings that only decide how long and how the run goes on may change: more updates, other logging.
    results, _ = run(
        tmp_path, "run", max_steps=3, resume=True, save_steps=1, eval_steps=1000, logging_steps=2
    )
    assert results["updates"] == 3 and math.isfinite(logged_losses(folder)[3])
