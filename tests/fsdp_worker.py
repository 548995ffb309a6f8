"""One process of ``test_scale_out.py``'s FSDP2 run (started twice by torchrun, gloo on the CPU): shard a
translation model layer by layer as ``training/accelerate/fsdp.yaml`` asks, take one SGD update on a
batch, gather the full weights with torch's state-dict API (what Accelerate's FSDP2 ``get_state_dict`` and
so ``Trainer.save_model`` call) and save them with ``save_pretrained``; rank 0 also saves the weights before
the update and the same update made without sharding, for the test to compare."""

import sys

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
from vanilla_transformer import modeling_vanilla_transformer as modeling


def update(model, batch):
    # SGD, not Adam: some gradients are zero up to rounding (a key projection's bias cannot change a
    # softmax), and Adam would scale that rounding noise, which differs between the runs, into full steps.
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    model(**batch).loss.backward()
    optimizer.step()


def main(sharded_folder: str, reference_folder: str, initial_folder: str, layer_classes: str) -> None:
    dist.init_process_group("gloo")
    config = VanillaTransformerConfig(
        vocab_size=40,
        d_model=16,
        d_ff=32,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        dropout=0.0,
        max_position_embeddings=32,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config)
    reference = VanillaTransformerForConditionalGeneration(config)
    reference.load_state_dict(model.state_dict())
    if dist.get_rank() == 0:
        reference.save_pretrained(initial_folder)
    generator = torch.Generator().manual_seed(1)  # the same batch on both processes
    batch = {
        "input_ids": torch.randint(3, 40, (4, 7), generator=generator),
        "labels": torch.randint(3, 40, (4, 6), generator=generator),
    }
    wrap = tuple(getattr(modeling, name) for name in layer_classes.split(","))
    for module in model.modules():
        if isinstance(module, wrap):
            fully_shard(module)
    fully_shard(model)
    local = {name: p.to_local().numel() for name, p in model.named_parameters()}
    full = {name: p.numel() for name, p in reference.named_parameters()}
    assert sum(local.values()) < sum(full.values()), "the parameters are not sharded"
    update(model, batch)
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if dist.get_rank() == 0:
        model.save_pretrained(sharded_folder, state_dict=state)
        update(reference, batch)
        reference.save_pretrained(reference_folder)
        print(f"sharded: {sum(local.values())} of {sum(full.values())} parameters on rank 0")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
