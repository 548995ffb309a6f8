"""A run asked to stop, for real: SIGTERM (a scheduler's preemption), SIGINT and SIGUSR1 sent to a real
training process, of either task and under ``accelerate launch`` on two processes. The update in flight
finishes, a checkpoint is written, the process exits with 128 + the signal's number and one line saying
how to continue; a second signal stops at once with the checkpoints intact; the resumed run reproduces
the uninterrupted run's losses."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import TINY_MODEL, TINY_RUN, TWO_PROCESS_LAUNCH
from test_classification import settings as classification_settings
from test_training import logged_losses, run

from vanilla_transformer.cli import main
from vanilla_transformer.train.common.checkpoints import checkpoint_dirs, checkpoint_step, damage

# A run long enough to be stopped in the middle (~0.02 s an update): it never gets near its end.
LONG = 2000
SETTINGS = {**{key: value for key, value in TINY_RUN.items() if key != "model"}, "eval_steps": 100000}
MODEL = {**TINY_MODEL, "dropout": 0.1}  # the resumed run must restore the RNG too


def train_command(folder: Path, **extra) -> list[str]:
    values = {**SETTINGS, "max_steps": LONG, "save_steps": 100000, "output_dir": folder}
    values |= {"model": json.dumps(MODEL)} | extra  # the whole block, as the in-process runs give it
    return ["train", *(f"--set={key}={value}" for key, value in values.items())]


def start(arguments: list[str], folder: Path, prefix: tuple = ("-m", "vanilla_transformer.cli")):
    """A real process of the ``vanilla-transformer`` command, its output in files beside ``folder``."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "TMPDIR": str(folder.parent)}
    out = open(folder.parent / f"{folder.name}.out", "w")  # noqa: SIM115 - closed with the process
    err = open(folder.parent / f"{folder.name}.err", "w")  # noqa: SIM115
    process = subprocess.Popen(
        [sys.executable, *prefix, *map(str, arguments)], stdout=out, stderr=err, env=env
    )
    process.files = (out, err)
    return process


def finish(process, timeout: float = 120) -> tuple[int, str]:
    code = process.wait(timeout=timeout)
    for file in process.files:
        file.close()
    return code, Path(process.files[1].name).read_text()


def wait_until(condition, process, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert process.poll() is None, f"the run ended ({process.returncode}) before it could be stopped"
        assert time.monotonic() < deadline, "the run did not get going in time"
        time.sleep(0.02)


def log_rows(folder: Path) -> int:
    log = folder / "train_log.jsonl"
    return len(log.read_text().splitlines()) if log.is_file() else 0


def last_line(text: str) -> str:
    return [line for line in text.splitlines() if line.strip()][-1]


def record(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())


@pytest.mark.parametrize(
    "signum",
    [
        signal.SIGTERM,
        # second cases of one path (the handler is the same for the three): run once, on the newest releases
        pytest.param(signal.SIGINT, marks=pytest.mark.newest_only),
        pytest.param(signal.SIGUSR1, marks=pytest.mark.newest_only),
    ],
    ids=lambda s: s.name,
)
def test_a_signal_stops_translation_after_the_update_with_a_checkpoint_and_resume_continues_it(
    tmp_path, signum
):
    folder = tmp_path / "stopped"
    process = start(train_command(folder), folder)
    wait_until(lambda: log_rows(folder) >= 3, process)
    process.send_signal(signum)
    code, stderr = finish(process)
    assert code == 128 + signum
    line = last_line(stderr)
    assert line.startswith(f"Stopped by {signum.name} after update "), stderr[-2000:]
    assert "To continue, run the same command with resume: true" in line
    stopped = int(line.split("after update ")[1].split()[0])
    (checkpoint,) = checkpoint_dirs(folder / "checkpoints")  # none was due: the signal's own
    assert checkpoint_step(checkpoint) == stopped >= 3 and f"checkpoint written: {checkpoint}" in line
    assert damage(checkpoint) is None
    assert log_rows(folder) == stopped  # the update in flight was finished and logged, none after it
    assert record(folder)["train"]["status"] == "interrupted"
    if signum != signal.SIGTERM:
        return  # the same path after the signal: the resume is checked once
    # The same run continued (a smaller budget only to keep the test short) reproduces the straight run.
    resumed, _ = run(tmp_path, "stopped", model=MODEL, resume=True, max_steps=stopped + 2, **SETTINGS)
    assert resumed["updates"] == stopped + 2
    run(tmp_path, "straight", model=MODEL, max_steps=stopped + 2, **SETTINGS)
    expected, got = logged_losses(tmp_path / "straight"), logged_losses(folder)
    assert sorted(got) == sorted(expected) == list(range(1, stopped + 3))
    assert [got[step] for step in sorted(got)] == pytest.approx(
        [expected[step] for step in sorted(got)], abs=1e-6
    )
    assert record(folder)["train"]["status"] == "finished"


def test_a_second_signal_stops_at_once_with_the_checkpoints_intact(tmp_path):
    """Asked twice (Ctrl-C pressed again while the checkpoint is written), the run stops at once: the
    checkpoints written before are intact, and what the stopped save left is not taken for one. The model
    is larger here (~5M parameters) so that its checkpoint takes long enough to be interrupted."""
    folder = tmp_path / "twice"
    larger = {"d_model": 256, "d_ff": 1024, "num_heads": 4, "num_encoder_layers": 2, "num_decoder_layers": 2}
    process = start(train_command(folder, save_steps=2, save_total_limit=2, model=json.dumps(larger)), folder)
    wait_until(lambda: len(checkpoint_dirs(folder / "checkpoints")) >= 1, process)
    process.send_signal(signal.SIGTERM)
    wait_until(lambda: "SIGTERM received" in (tmp_path / "twice.err").read_text(), process)
    process.send_signal(signal.SIGTERM)
    code, stderr = finish(process)
    assert code == 128 + signal.SIGTERM
    assert "SIGTERM again: stopping now" in stderr, stderr[-2000:]
    assert "Stopped by SIGTERM after update" not in stderr  # it did not wait for the checkpoint
    listed = checkpoint_dirs(folder / "checkpoints")
    assert listed and all(damage(checkpoint) is None for checkpoint in listed)
    names = {path.name for path in (folder / "checkpoints").iterdir()}
    assert {name for name in names if name.startswith("checkpoint-")} == {c.name for c in listed}


def test_a_signal_stops_classification_with_a_checkpoint_and_resume_continues_it(tmp_path, capsys):
    folder = tmp_path / "run"
    common = dict(num_train_epochs=500, save_strategy="steps", save_steps=5, logging_steps=1)
    arguments = ["classify", "train", *(f"--set={s}" for s in classification_settings(tmp_path, **common))]
    process = start(arguments, folder)
    wait_until(lambda: bool(checkpoint_dirs(folder / "checkpoints" / "train")), process)
    process.send_signal(signal.SIGTERM)
    code, stderr = finish(process)
    assert code == 128 + signal.SIGTERM
    line = last_line(stderr)
    assert line.startswith("Stopped by SIGTERM after update "), stderr[-2000:]
    stopped = int(line.split("after update ")[1].split()[0])
    latest = checkpoint_dirs(folder / "checkpoints" / "train")[-1]
    assert checkpoint_step(latest) == stopped and damage(latest) is None
    assert record(folder)["train"]["status"] == "interrupted"
    assert not (folder / "model").exists()  # an interrupted run leaves no final model
    # The same command without resume is refused; with it, the run goes on from its checkpoint.
    with pytest.raises(SystemExit, match="already holds a run \\(interrupted, at update"):
        main(arguments)
    capsys.readouterr()
    main([*arguments, "--set=resume=true", f"--set=max_steps={stopped + 3}"])
    assert f"Resuming from {latest}" in capsys.readouterr().out
    assert (record(folder)["train"]["status"], record(folder)["train"]["updates"]) == (
        "finished",
        stopped + 3,
    )


def test_two_processes_stop_together_and_a_resume_on_one_is_refused(tmp_path):
    """``accelerate launch`` forwards SIGTERM to both workers; they agree on the update to stop after and
    write one checkpoint. What an update is depends on the processes: resuming on one is refused."""
    folder = tmp_path / "two"
    process = start(train_command(folder), folder, prefix=TWO_PROCESS_LAUNCH)
    wait_until(lambda: log_rows(folder) >= 3, process, timeout=300)
    process.send_signal(signal.SIGTERM)
    code, stderr = finish(process)
    assert code != 0
    stops = {
        line.split("after update ")[1].split()[0]
        for line in stderr.splitlines()
        if "Stopped by SIGTERM" in line
    }
    # every worker stopped after the same update (the message: both workers' lines, progress bars left out)
    assert len(stops) == 1, "\n".join(line for line in stderr.splitlines() if "Training:" not in line)[-8000:]
    (checkpoint,) = checkpoint_dirs(folder / "checkpoints")
    assert str(checkpoint_step(checkpoint)) in stops and damage(checkpoint) is None
    with pytest.raises(ValueError, match=r"settings differ .*world_size: 2 -> 1"):
        run(tmp_path, "two", model=MODEL, resume=True, max_steps=LONG, **SETTINGS)


def worker_pids(launcher) -> dict[int, int]:
    """The workers of an ``accelerate launch`` process, by rank (its children, with ``RANK`` set)."""
    workers = {}
    for entry in Path("/proc").iterdir():
        try:
            if (
                not entry.name.isdigit()
                or int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1]) != launcher.pid
            ):
                continue
            rank = [
                item for item in (entry / "environ").read_bytes().split(b"\0") if item.startswith(b"RANK=")
            ]
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        if rank:
            workers[int(rank[0][len(b"RANK=") :])] = int(entry.name)
    return workers


def test_a_worker_whose_own_signal_comes_after_the_agreement_stops_with_the_other(tmp_path):
    """Each worker gets its own copy of the signal (from ``accelerate launch``, or from SLURM), not always at
    once: here rank 0's first, and rank 1's only once their checkpoint is being written, after rank 0's
    signal has reached it through the agreement. That copy is rank 1's first signal, not a second one (before:
    rank 1 stopped at once, rank 0's barrier failed on the vanished peer, and no checkpoint was published)."""
    folder = tmp_path / "two"
    process = start(train_command(folder), folder, prefix=TWO_PROCESS_LAUNCH)
    wait_until(lambda: log_rows(folder) >= 3, process, timeout=300)
    workers = worker_pids(process)
    assert sorted(workers) == [0, 1], workers
    os.kill(workers[0], signal.SIGTERM)
    root = folder / "checkpoints"
    wait_until(lambda: root.is_dir() and any(root.iterdir()), process, timeout=120)  # staged, or published
    try:
        os.kill(workers[1], signal.SIGTERM)
    except ProcessLookupError:
        pass  # already done with its part
    code, stderr = finish(process)
    assert code != 0
    stops = [line for line in stderr.splitlines() if line.startswith("Stopped by SIGTERM after update ")]
    assert stops, "\n".join(line for line in stderr.splitlines() if "Training:" not in line)[-8000:]
    # (rank 1's own line may be missing: once rank 0 has exited, the launcher stops rank 1 with a SIGTERM of
    # its own, which ends it at once; by then the two are done with each other)
    assert "Connection reset" not in stderr, stderr[-8000:]
    (checkpoint,) = checkpoint_dirs(root)
    assert damage(checkpoint) is None
    assert {int(line.split("after update ")[1].split()[0]) for line in stops} == {checkpoint_step(checkpoint)}
