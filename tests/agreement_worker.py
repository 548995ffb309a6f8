"""The worker of ``test_update_sync.py``'s two-process test, in a module of its own: a spawned process imports
the module its function lives in, and this one imports little."""

import json
import os
import signal
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from transformers import TrainerControl, TrainerState

from vanilla_transformer.train.common.preemption import Preemption


def agree(rank: int, folder: str, signalled: int, slow: int, signal_at: int, last: int) -> None:
    """One of two processes running ``Preemption``'s callbacks over ``last`` fake updates (``slow`` takes
    20 ms an update): SIGTERM comes to ``signalled`` during update ``signal_at``; the other gets its own copy
    only once the two have agreed to stop (``accelerate launch`` forwards the signal to each worker, one
    after the other). Writes the update each stopped after and the all-reduces of the updates."""
    folder = Path(folder)
    sys.stderr = open(folder / f"rank{rank}.err", "w", buffering=1)  # noqa: SIM115 - closed at the process's end
    torch.distributed.init_process_group(
        "gloo", init_method=f"file://{folder}/store", rank=rank, world_size=2
    )
    calls, real = [], torch.distributed.all_reduce

    def recorded(tensor, *args, **kwargs):
        backend = torch.distributed.get_backend(kwargs.get("group"))
        calls.append((kwargs.get("async_op", False), tensor.device.type, backend))
        return real(tensor, *args, **kwargs)

    torch.distributed.all_reduce = recorded
    args = SimpleNamespace(world_size=2, device=torch.device("cpu"))
    state, control = TrainerState(), TrainerControl()
    with Preemption("hint") as preemption:
        preemption.on_train_begin(args, state, control)
        at_begin = len(calls)
        for step in range(1, last + 1):
            time.sleep(0.02 if rank == slow else 0.0)  # the update
            if rank == signalled and step == signal_at:
                os.kill(os.getpid(), signal.SIGTERM)
            state.global_step = step
            control.should_training_stop = step == last  # as the Trainer's flow callback sets it
            control = preemption.on_step_end(args, state, control)
            if control.should_training_stop:
                if rank != signalled:
                    os.kill(os.getpid(), signal.SIGTERM)  # its own copy, after the agreement
                break
        per_update = calls[at_begin:]
        preemption.on_train_end(args, state, control)
    record = {"stopped_at": preemption.stopped_at, "received": preemption.received, "per_update": per_update}
    (folder / f"rank{rank}.json").write_text(json.dumps(record))
    torch.distributed.destroy_process_group()
