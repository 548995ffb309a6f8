"""The run folder's owner, for both tasks: one run writes a folder at a time; a folder's run is continued
only when the recipe asks, with the settings it started with, and replaced only when asked; a finished run
is not trained again unasked; a checkpoint save that fails (a really full disk) loses nothing."""

import functools
import hashlib
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from test_classification import train as train_classification
from test_preemption import finish, start, train_command
from test_training import logged_losses, run

from vanilla_transformer.cli import main
from vanilla_transformer.train.common.checkpoints import checkpoint_dirs, damage

SHORT = dict(max_steps=2, save_steps=1, eval_steps=1000)


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (but the lock and the record) by its SHA-256."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file() and path.name not in (".lock", "run.json")
    }


def status(folder: Path, stage: str = "train") -> str:
    return json.loads((folder / "run.json").read_text())[stage]["status"]


# -- one run per folder -----------------------------------------------------------------------------------


def test_two_runs_started_at_once_on_one_folder_one_runs_the_other_is_refused_naming_it(tmp_path):
    folder = tmp_path / "shared"
    command = train_command(folder, max_steps=300)
    first, second = (start(command, tmp_path / name) for name in ("a", "b"))
    (code_a, err_a), (code_b, err_b) = finish(first, 300), finish(second, 300)
    assert sorted([code_a, code_b]) == [0, 1], (err_a[-1500:], err_b[-1500:])
    refused, winner = (err_b, first) if code_b else (err_a, second)
    line = [text for text in refused.splitlines() if text.startswith("error:")][-1]
    assert f"{folder} is in use by another run (pid {winner.pid} on " in line
    assert status(folder) == "finished"
    assert [path.name for path in checkpoint_dirs(folder / "checkpoints")] == ["checkpoint-300"]


def test_a_new_run_in_a_finished_runs_folder_is_refused_and_touches_nothing(tmp_path, capsys):
    _, folder = run(tmp_path, "run", **SHORT)
    before = fingerprint(folder)
    with pytest.raises(
        SystemExit, match=r"already holds a run \(finished, at update 2.*resume: true.*overwrite: true"
    ):
        main(train_command(folder, max_steps=4, seed=1))
    assert fingerprint(folder) == before
    # resume on a finished run with the same budget: nothing to train, refused; a larger budget continues it
    with pytest.raises(ValueError, match=r"holds a finished run .*nothing is left to train. Raise a budget"):
        run(tmp_path, "run", resume=True, **SHORT)
    assert fingerprint(folder) == before
    results, _ = run(tmp_path, "run", resume=True, **{**SHORT, "max_steps": 3})
    assert results["updates"] == 3 and "max_steps: 2 -> 3" in capsys.readouterr().out


@pytest.mark.parametrize("how", ["true", "delete"])
def test_overwrite_starts_a_new_run_moving_the_old_one_aside_or_deleting_it(tmp_path, how):
    _, folder = run(tmp_path, "run", **SHORT)
    before = fingerprint(folder)
    results, _ = run(tmp_path, "run", overwrite=how, **{**SHORT, "seed": 1})
    assert results["updates"] == 2 and status(folder) == "finished"
    aside = sorted(tmp_path.glob("run.replaced-*"))
    if how == "true":
        assert len(aside) == 1 and fingerprint(aside[0]) == before  # the old run, whole
    else:
        assert aside == []
    assert fingerprint(folder)["model/model.safetensors"] != before["model/model.safetensors"]


def test_resume_auto_starts_a_run_then_continues_it_and_refuses_other_settings(tmp_path):
    """``resume: auto``: the same command, run again after a stop (here ``session_minutes: 0``, one update),
    continues the run; with another setting of what an update is, it is refused naming the setting."""
    same = dict(resume="auto", max_steps=3, save_steps=1, eval_steps=1000)
    stopped, folder = run(tmp_path, "run", session_minutes=0, **same)
    assert stopped["stopped"] == "session_minutes" and status(folder) == "stopped"
    with pytest.raises(ValueError, match=r"settings differ .*\(seed: 0 -> 1\)"):
        run(tmp_path, "run", seed=1, **same)
    results, _ = run(tmp_path, "run", **same)
    assert results["updates"] == 3 and status(folder) == "finished"
    assert sorted(logged_losses(folder)) == [1, 2, 3] and all(
        map(math.isfinite, logged_losses(folder).values())
    )


def test_resume_and_overwrite_are_refused_together_and_bad_words_named(tmp_path):
    with pytest.raises(ValueError, match=r"Set `resume` \(true\) or `overwrite` \(true\), not both"):
        run(tmp_path, "run", resume=True, overwrite=True, **SHORT)
    with pytest.raises(ValueError, match=r"`resume` must be one of false \| true \| auto, got 'sometimes'"):
        run(tmp_path, "run", resume="sometimes", **SHORT)
    with pytest.raises(
        ValueError, match=r"`enable_jit_checkpoint` is not a translation setting: the run stops on"
    ):
        run(tmp_path, "run", enable_jit_checkpoint=True, **SHORT)
    assert not (tmp_path / "run").exists()


# -- classification: the same protections --------------------------------------------------------------


def test_classification_refuses_an_unasked_resume_and_a_resume_with_another_model(tmp_path):
    """Before: the same command with a bigger model resumed the old run unasked and died on a size
    mismatch. Now the folder's run is named, and a resume names the changed field."""
    saving = dict(save_strategy="steps", save_steps=5, max_steps=10)
    train_classification(tmp_path, **saving)
    folder = tmp_path / "run"
    before = fingerprint(folder)
    with pytest.raises(ValueError, match=r"already holds a run \(finished, at update 10"):
        train_classification(tmp_path, **{**saving, "model.d_model": 64})
    with pytest.raises(ValueError, match=r"settings differ .*model\.d_model: 32 -> 64"):
        train_classification(tmp_path, resume="true", **{**saving, "max_steps": 20, "model.d_model": 64})
    assert fingerprint(folder) == before


def test_classification_resume_passes_over_a_half_written_checkpoint(tmp_path, capsys):
    """Before: a half-written newest checkpoint made the same command fail with ``[Errno 2] ...
    trainer_state.json``. A folder without its trainer state is no checkpoint, a damaged one is named and
    passed over: the run resumes from the newest intact one."""
    saving = dict(save_strategy="steps", save_steps=5, max_steps=10, session_minutes=0)
    train_classification(tmp_path, **saving)  # stopped after update 1, with its save
    root = tmp_path / "run" / "checkpoints" / "train"
    (good,) = checkpoint_dirs(root)
    half = root / "checkpoint-99999"
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"\0" * 100)
    damaged = root / "checkpoint-50000"
    shutil.copytree(good, damaged)
    state = json.loads((damaged / "trainer_state.json").read_text())
    (damaged / "trainer_state.json").write_text(json.dumps({**state, "global_step": 50000}))
    capsys.readouterr()
    resumed = dict(save_strategy="steps", save_steps=5, max_steps=10, resume="true")
    results = train_classification(tmp_path, **resumed)
    printed = capsys.readouterr().out
    assert "checkpoint-50000 cannot be resumed from (trainer_state.json has " in printed
    assert f"Resuming from {good}." in printed
    assert results["updates"] == 10 and status(tmp_path / "run") == "finished"


def test_classification_skips_an_update_whose_loss_is_not_finite(tmp_path, monkeypatch, caplog):
    from vanilla_transformer import modeling_vanilla_transformer as modeling

    real, calls = modeling.VanillaTransformerForSequenceClassification.forward, []

    @functools.wraps(real)  # the Trainer reads the model's inputs from forward's signature
    def nan_at_the_third(self, *args, **kwargs):
        output = real(self, *args, **kwargs)
        calls.append(1)
        if self.training and len(calls) == 3:
            output.loss = output.loss * float("nan")
        return output

    monkeypatch.setattr(modeling.VanillaTransformerForSequenceClassification, "forward", nan_at_the_third)
    train_classification(tmp_path, max_steps=5)
    skipped = [record.getMessage() for record in caplog.records if "skipped:" in record.getMessage()]
    assert len(skipped) == 1 and skipped[0].startswith("Update 3 skipped: the loss is not finite (nan)")
    weights = load_file(tmp_path / "run" / "model" / "model.safetensors")
    assert all(torch.isfinite(tensor).all() for tensor in weights.values())  # NaN never reached them


# -- a full disk ---------------------------------------------------------------------------------------------


def _can_mount_tmpfs() -> str | None:
    if shutil.which("unshare") is None:
        return "no unshare command"
    probe = subprocess.run(
        ["unshare", "-m", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs /mnt"], capture_output=True
    )
    return (
        None
        if probe.returncode == 0
        else f"cannot mount a tmpfs in a private mount namespace: {probe.stderr!r}"
    )


def test_a_really_full_disk_while_saving_is_one_line_and_loses_nothing(tmp_path):
    """A size-limited tmpfs (in a private mount namespace, so nothing outside the test sees it) holds the
    run folder, with room for the run and a checkpoint or two but not for all four: safetensors / torch.save raise
    what they really raise on a full disk, and the run stops with one line naming the disk, removes its
    unfinished folder, and keeps the first checkpoint intact."""
    why = _can_mount_tmpfs()
    if why:
        pytest.skip(f"a real full disk needs root: {why}")
    # The room a run with one checkpoint takes, measured on an ordinary disk.
    _, measured = run(tmp_path, "measured", max_steps=1, save_steps=1, eval_steps=1000)
    checkpoint = sum(
        p.stat().st_size for p in (measured / "checkpoints" / "checkpoint-1").rglob("*") if p.is_file()
    )
    others = sum(p.stat().st_size for p in measured.rglob("*") if p.is_file()) - checkpoint
    size_kib = (others + checkpoint + checkpoint // 2) // 1024 + 64
    disk, copy = tmp_path / "disk", tmp_path / "after"
    disk.mkdir()
    command = [
        sys.executable,
        "-m",
        "vanilla_transformer.cli",
        *train_command(disk / "run", max_steps=4, save_steps=1),
    ]
    script = (
        f'mount -t tmpfs -o size={size_kib}k tmpfs "{disk}" && '
        f"{' '.join(f'{chr(39)}{word}{chr(39)}' for word in command)}; code=$?; "
        f'cp -a "{disk}/run" "{copy}"; exit $code'
    )
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr[-2000:]
    (line,) = [text for text in done.stderr.splitlines() if text.startswith("error:")]  # on a line of its own
    assert line.startswith(f"error: No space left on the disk mounted at {disk} ("), done.stderr[-2000:]
    failed = int(line.split("while writing checkpoint ")[1].split()[0])  # the first that did not fit
    assert failed >= 2 and f"(the latest: checkpoint-{failed - 1})" in line
    root = copy / "checkpoints"
    kept = [f"checkpoint-{step}" for step in range(1, failed)]
    assert [path.name for path in checkpoint_dirs(root)] == kept
    assert all(damage(root / name) is None for name in kept)
    assert sorted(path.name for path in root.iterdir()) == sorted(kept)  # the staging folder is gone
    # The record says the run did not finish: "interrupted" where the disk had room left to say so, else
    # still "running" (it is written aside and renamed, so never half-written), which resume reads alike.
    assert status(copy) in ("interrupted", "running")


def test_an_unreadable_run_record_is_named_with_what_to_do_and_the_checkpoints_still_resume(tmp_path):
    """Not among the issue's cases: run.json cut short (an edit, a copy). The folder is refused naming the
    file; without the record, the run resumes from its checkpoints, whose own settings are compared."""
    _, folder = run(tmp_path, "run", max_steps=2, save_steps=1, eval_steps=1000, session_minutes=0)
    (folder / "run.json").write_text("{broken")
    with pytest.raises(ValueError, match=r"run\.json is unreadable .*Delete it to continue the run"):
        run(tmp_path, "run", max_steps=3, save_steps=1, eval_steps=1000, resume=True)
    (folder / "run.json").unlink()
    results, _ = run(tmp_path, "run", max_steps=3, save_steps=1, eval_steps=1000, resume=True)
    assert results["updates"] == 3
