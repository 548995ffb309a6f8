"""Crash safety for real: training processes killed with SIGKILL while they write checkpoints, and every
moment of a checkpoint save that renames or deletes folders. After each crash the latest checkpoint loads
and ``--set resume=true`` reproduces the uninterrupted run."""

import json
import multiprocessing
import shutil
import time
from pathlib import Path

import pytest
import torch
from conftest import TINY_MODEL, TINY_RUN, tiny_config
from safetensors.torch import load_file

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli import main
from vanilla_transformer.train.common import checkpoints as checkpoint_module
from vanilla_transformer.train.common.checkpoints import (
    STATE_FILE,
    checkpoint_dirs,
    checkpoint_step,
    latest_checkpoint,
    publish_checkpoint,
    staging_dir,
    tidy_up,
)

STEPS = 12
SETTINGS = {
    **{key: value for key, value in TINY_RUN.items() if key != "model"},
    "max_steps": STEPS,
    "save_steps": 1,  # a checkpoint after every update: most of a run's time is spent writing one
    "save_total_limit": 2,  # and every save deletes an old one
    "synthetic_eval_size": 1,
    "eval_bleu_samples": 1,
}
MODEL = {**TINY_MODEL, "dropout": 0.1}  # dropout: the resumed run must also restore the RNG


def train_command(output_dir: Path, *extra: str) -> list[str]:
    settings = [f"{key}={value}" for key, value in SETTINGS.items()]
    settings += [f"model.{key}={value}" for key, value in MODEL.items()]
    settings += [f"output_dir={output_dir}", *extra]
    return ["train", *(f"--set={setting}" for setting in settings)]


@pytest.fixture(scope="module")
def processes():
    """Training processes forked from a server that has imported the package once (a fresh interpreter
    spends most of its start-up importing torch and transformers). Each is a real process running the
    ``vanilla-transformer train`` entry point, killed with SIGKILL by ``Process.kill``."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(
        ["vanilla_transformer.cli", "vanilla_transformer.train.translation.trainer"]
    )
    return context


def kill_when(process, *markers: Path, timeout: float = 120) -> Path:
    """SIGKILL ``process`` as soon as one of ``markers`` exists (polled every half millisecond); returns it."""
    deadline = time.monotonic() + timeout
    while not (hit := next((marker for marker in markers if marker.exists()), None)):
        assert process.is_alive(), f"the run ended (exit code {process.exitcode}) before {markers} appeared"
        assert time.monotonic() < deadline, f"{markers} did not appear in {timeout} s"
        time.sleep(0.0005)
    process.kill()
    process.join()
    assert process.exitcode == -9  # SIGKILL: no handler, no cleanup ran
    return hit


TRAINING_STATE = {"optimizer.pt", "scheduler.pt", "model.safetensors", "rng_state.pth"}


def assert_checkpoints_load(root: Path, state_files=TRAINING_STATE) -> int:
    """Every checkpoint listed under ``root`` is complete: its weights and trainer state read back, the
    state names its step, the Trainer's state files are there; the latest loads as a model with no
    missing key. Returns the latest step."""
    listed = checkpoint_dirs(root)
    assert listed, f"no checkpoint left under {root}"
    for folder in listed:
        assert (folder / "model.safetensors").is_file(), f"{folder} is listed without its model"
        assert load_file(folder / "model.safetensors"), folder
        assert json.loads((folder / STATE_FILE).read_text())["global_step"] == checkpoint_step(folder)
        assert state_files <= {path.name for path in folder.iterdir()}, folder
    assert latest_checkpoint(root) == listed[-1]
    model, info = VanillaTransformerForConditionalGeneration.from_pretrained(
        listed[-1], output_loading_info=True
    )
    assert not info["missing_keys"] and not info["unexpected_keys"], listed[-1]
    return checkpoint_step(listed[-1])


def logged(folder: Path) -> dict[int, list[float]]:
    """Every logged loss by step: a step redone after a crash is logged once per session."""
    rows: dict[int, list[float]] = {}
    for line in (folder / "train_log.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows.setdefault(row["step"], []).append(row["train/loss"])
    return rows


def test_runs_killed_while_writing_checkpoints_resume_to_the_uninterrupted_run(tmp_path, processes):
    main(train_command(tmp_path / "straight"))
    expected = {step: losses[-1] for step, losses in logged(tmp_path / "straight").items()}
    assert sorted(expected) == list(range(1, STEPS + 1))

    folder = tmp_path / "killed"
    root = folder / "checkpoints"
    # Three moments of a save: the staging folder just made, the model being written, an old
    # checkpoint being deleted (save_total_limit) after the new one was renamed into place. The last lasts about
    # a millisecond: if the poll misses it, the kill comes as the next save starts. Each marker comes with
    # the latest checkpoint a kill at that moment leaves.
    moments = [
        {root / ".tmp-checkpoint-3": 2},
        {root / ".tmp-checkpoint-6" / "checkpoint-6": 5},
        {root / ".deleting-checkpoint-7": 9, root / ".tmp-checkpoint-10": 9},
    ]
    inside_a_save = []
    for index, markers in enumerate(moments):
        extra = ["resume=true"] if index else []
        process = processes.Process(target=main, args=(train_command(folder, *extra),))
        process.start()
        hit = kill_when(process, *markers)
        latest = assert_checkpoints_load(root)
        # A poller descheduled for the ~20 ms a save lasts kills just after it: one checkpoint more.
        assert latest in (markers[hit], markers[hit] + 1)
        inside_a_save.append(latest == markers[hit] and any(root.glob(".*-checkpoint-*")))
    # Most kills landed inside a save, leaving its temporary (or half-deleted) folder behind.
    assert sum(inside_a_save) >= 2, inside_a_save

    process = processes.Process(target=main, args=(train_command(folder, "resume=true"),))
    process.start()
    process.join()
    assert process.exitcode == 0
    got = logged(folder)
    assert sorted(got) == list(range(1, STEPS + 1))
    for step, losses in got.items():  # every session that ran update k computed the same loss
        assert losses == pytest.approx([expected[step]] * len(losses), abs=1e-6), step
    assert sorted(path.name for path in root.iterdir()) == ["checkpoint-11", "checkpoint-12"]
    resumed = VanillaTransformerForConditionalGeneration.from_pretrained(folder / "model").state_dict()
    straight = VanillaTransformerForConditionalGeneration.from_pretrained(
        tmp_path / "straight" / "model"
    ).state_dict()
    for name, tensor in straight.items():
        torch.testing.assert_close(resumed[name], tensor, atol=1e-6, rtol=0)
    assert json.loads((folder / "results.json").read_text())["updates"] == STEPS


# -- every moment of a save that renames or deletes -----------------------------------------------------


class Killed(BaseException):
    """Stands for SIGKILL inside ``publish_checkpoint``: it has no handler or ``finally`` that runs on the
    way out, so the folders are left exactly as a kill at that moment leaves them."""


class KillAt:
    """Counts the folder renames and deletions ``publish_checkpoint`` makes under ``root`` and dies at the
    ``target``-th: before it, or (for a deletion) half-way through it, after its weights went."""

    def __init__(self, root: Path, target: int, halfway: bool):
        self.root, self.target, self.halfway, self.count = root, target, halfway, 0
        self.replace, self.rmtree = checkpoint_module.os.replace, checkpoint_module.shutil.rmtree

    def _ours(self, path) -> bool:
        return Path(path).parent == self.root

    def _tick(self) -> bool:
        self.count += 1
        return self.count == self.target

    def os_replace(self, source, destination):
        if (self._ours(source) or self._ours(destination)) and self._tick() and not self.halfway:
            raise Killed
        return self.replace(source, destination)

    def shutil_rmtree(self, path, ignore_errors=False):
        if self._ours(path) and Path(path).exists() and self._tick():
            if self.halfway:
                (Path(path) / "model.safetensors").unlink(missing_ok=True)
            raise Killed
        return self.rmtree(path, ignore_errors=ignore_errors)


def _weights(step: int) -> VanillaTransformerForConditionalGeneration:
    torch.manual_seed(step)
    return VanillaTransformerForConditionalGeneration(tiny_config())


def _save(tokenizer, root, step, model, save_total_limit=2):
    """What ``TranslationTrainer._save_checkpoint`` does around the Trainer's own save: tidy up, write the
    checkpoint under its staging folder (here: a model folder, an RNG state and the trainer state), publish."""
    root.mkdir(parents=True, exist_ok=True)
    tidy_up(root)
    staged = staging_dir(root, step) / f"checkpoint-{step}"
    model.save_pretrained(staged)
    tokenizer.save_pretrained(staged)
    torch.save({"cpu": torch.get_rng_state()}, staged / "rng_state.pth")
    (staged / STATE_FILE).write_text(json.dumps({"global_step": step}))
    publish_checkpoint(staged, root, save_total_limit)


def _first_weight(folder: Path) -> torch.Tensor:
    return load_file(folder / "model.safetensors")["model.encoder.embed_tokens.weight"]


RNG_ONLY = {"rng_state.pth"}  # no optimizer in these saves


def test_a_save_killed_at_any_rename_or_deletion_keeps_the_last_good_checkpoint(
    tmp_path, tokenizer, monkeypatch
):
    """A run restarted in its old folder saves step 5 again (over the earlier save), then step 6, which
    deletes step 4 (save_total_limit 2). Killed before any of those renames and deletions, or half-way through
    a deletion, the folder still lists only complete checkpoints, step 5 among them (the earlier or the
    new save); and the next save leaves exactly the last two, nothing half-written beside them."""
    template = tmp_path / "template"
    models = {step: _weights(step) for step in (4, 5, 6, 7)}
    _save(tokenizer, template, 4, models[4])
    _save(tokenizer, template, 5, models[4])  # the earlier save of step 5
    earlier, new = _first_weight(template / "checkpoint-5"), models[5].model.encoder.embed_tokens.weight

    moments = 0
    for target in range(1, 20):
        for halfway in (False, True):
            root = tmp_path / f"kill-{target}-{halfway}"
            shutil.copytree(template, root)
            killer = KillAt(root, target, halfway)
            monkeypatch.setattr(checkpoint_module.os, "replace", killer.os_replace)
            monkeypatch.setattr(checkpoint_module.shutil, "rmtree", killer.shutil_rmtree)
            try:
                _save(tokenizer, root, 5, models[5])  # the re-save
                _save(tokenizer, root, 6, models[6])  # prunes step 4
            except Killed:
                killed = True
            else:
                killed = False
            monkeypatch.undo()
            if not killed:
                continue
            moments += 1
            latest = assert_checkpoints_load(root, RNG_ONLY)
            listed = {checkpoint_step(folder): folder for folder in checkpoint_dirs(root)}
            assert latest in (5, 6) and 5 in listed, (target, halfway, sorted(listed))
            weight = _first_weight(listed[5])
            assert torch.equal(weight, earlier) or torch.equal(weight, new)
            _save(tokenizer, root, 7, models[7])  # the resumed run's next save
            assert sorted(path.name for path in root.iterdir()) == sorted(
                folder.name for folder in checkpoint_dirs(root)[-2:]
            ), (target, halfway)
            assert [checkpoint_step(folder) for folder in checkpoint_dirs(root)] == [latest, 7]
            assert_checkpoints_load(root, RNG_ONLY)
    # Re-saving step 5: the earlier save moves aside, the new one is renamed in, its emptied staging
    # folder is deleted, the earlier save is renamed for deletion and deleted; saving step 6: renamed in,
    # staging folder deleted, step 4 renamed for deletion and deleted. Nine operations, four of them
    # deletions also killed half-way: thirteen moments.
    assert moments == 13
