"""Scale-out on existing engines: the FSDP and DeepSpeed launch configurations shipped under
``training/accelerate/``, and the full-weight save of a model that FSDP2 shards.

Accelerate applies FSDP on GPUs (and other accelerators) only: on a CPU it launches plain data
parallelism whatever the configuration says (``AcceleratorState`` turns ``distributed_type`` into FSDP
for the MULTI_GPU family only). So the sharded run here uses torch's FSDP2 itself, on two CPU processes
over gloo, and the engine's state-dict API that Accelerate's ``get_state_dict`` (and ``Trainer.save_model``)
calls under FSDP2 with ``FULL_STATE_DICT``. DeepSpeed is not installed here (it needs GPUs): its
configuration is checked against what the trainer fills in."""

import json
import os
import subprocess
import sys
from pathlib import Path

from accelerate.commands.config.config_args import load_config_from_file
from accelerate.utils import DistributedType

from vanilla_transformer import modeling_vanilla_transformer as modeling

ROOT = Path(__file__).parent.parent
CONFIGS = ROOT / "training" / "accelerate"


def test_the_fsdp_configuration_wraps_the_models_layers_and_saves_full_weights():
    config = load_config_from_file(str(CONFIGS / "fsdp.yaml"))
    assert config.distributed_type == DistributedType.FSDP
    fsdp = config.fsdp_config
    assert fsdp["fsdp_version"] == 2 and fsdp["fsdp_state_dict_type"] == "FULL_STATE_DICT"
    # The classes it wraps one by one are the model's layers, the units transformers never splits.
    layers = fsdp["fsdp_transformer_layer_cls_to_wrap"].split(",")
    assert layers == modeling.VanillaTransformerPreTrainedModel._no_split_modules
    assert all(isinstance(getattr(modeling, name), type) for name in layers)


def test_the_deepspeed_configuration_leaves_optimizer_schedule_and_batches_to_the_recipe():
    config = load_config_from_file(str(CONFIGS / "deepspeed_zero3.yaml"))
    assert config.distributed_type == DistributedType.DEEPSPEED
    file = ROOT / config.deepspeed_config["deepspeed_config_file"]
    deepspeed = json.loads(file.read_text())
    assert deepspeed["zero_optimization"]["stage"] == 3
    assert (
        deepspeed["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    )  # loadable saves
    assert "optimizer" not in deepspeed and "scheduler" not in deepspeed  # §5.3's Adam and Eq. 3 stay
    for key in ("gradient_accumulation_steps", "gradient_clipping", "train_micro_batch_size_per_gpu"):
        assert deepspeed[key] == "auto", key  # filled by the trainer from the recipe


def test_fsdp2_sharded_training_saves_full_weights_that_load_in_a_fresh_process(tmp_path):
    """Two processes shard the model layer by layer (as fsdp.yaml wraps it), take one SGD update, and
    save the gathered full weights; a fresh process loads them with from_pretrained and they equal the
    same update made without sharding, tied embeddings included."""
    layers = load_config_from_file(str(CONFIGS / "fsdp.yaml")).fsdp_config[
        "fsdp_transformer_layer_cls_to_wrap"
    ]
    sharded, reference, initial = (tmp_path / name for name in ("sharded", "reference", "initial"))
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        str(Path(__file__).parent / "fsdp_worker.py"),
        str(sharded),
        str(reference),
        str(initial),
        layers,
    ]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)},  # torchelastic_* logs go there
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "sharded:" in done.stdout
    check = (
        "import sys, torch\n"
        "from transformers import AutoModelForSeq2SeqLM\n"
        "a, b, c = (AutoModelForSeq2SeqLM.from_pretrained(p, trust_remote_code=True) for p in sys.argv[1:4])\n"
        "assert a.get_input_embeddings().weight is a.get_output_embeddings().weight\n"
        "sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()\n"
        "assert sa.keys() == sb.keys()\n"
        "print(max((sa[k] - sb[k]).abs().max().item() for k in sa))\n"
        "print(max((sa[k] - sc[k]).abs().max().item() for k in sa))\n"
    )
    fresh = subprocess.run(
        [sys.executable, "-c", check, str(sharded), str(reference), str(initial)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    from_reference, from_initial = map(float, fresh.stdout.split()[-2:])
    assert from_reference < 1e-6
    assert from_initial > 1e-3  # the update moved the weights: not a comparison of two untrained copies
