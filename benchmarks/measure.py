"""One measurement of one system, run in its own process by benchmarks/run.py; prints one JSON line.

python -m benchmarks.measure --system ours --preset small --measure train --threads 2
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import time

import torch

from .presets import NEW_TOKENS, PRESETS, SOURCE_LENGTH, TARGET_LENGTH, TRAIN_BATCH, training_flops
from .systems import EOS, SYSTEMS, build, fixed_length_generate

GENERATION_SETTINGS = [(1, 1), (1, 4), (32, 1), (32, 4)]  # (batch, beams)


def random_sentences(batch: int, length: int, vocab: int, seed: int) -> torch.Tensor:
    """Ids that avoid every special token (ours: 0-3, Marian's <pad>: vocab - 1), ending with EOS."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(4, vocab - 1, (batch, length), generator=generator)
    ids[:, -1] = EOS
    return ids


def generation_workloads(systems: list, preset: dict) -> list[tuple[int, int, torch.Tensor]]:
    """(batch, beams, source ids) for every generation setting that all the given systems run (ONNX
    exports decode greedily only)."""
    return [
        (batch, beams, random_sentences(batch, SOURCE_LENGTH, preset["vocab_size"], seed=10 + batch))
        for batch, beams in GENERATION_SETTINGS
        if all(beams in getattr(system, "beams", (beams,)) for system in systems)
    ]


def timed(function, repeats: int, warmup: int) -> list[float]:
    for _ in range(warmup):
        function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return times


def measure_peak(threads: int, repeats: int) -> dict:
    """fp32 and bf16 matmul throughput (2048^3) of this machine at this thread count: the peaks that MFU
    is measured against. bf16 only where the CPU multiplies it natively: emulated bf16 products are so slow
    that one 2048^3 peak takes minutes (docs/benchmarks.md)."""
    from vanilla_transformer.precision import native_bf16

    size = 2048
    peaks = {}
    formats = [("matmul_gflops", torch.float32)]
    formats += [("bf16_matmul_gflops", torch.bfloat16)] if native_bf16("cpu") else []
    for name, dtype in formats:
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        times = timed(lambda a=a, b=b: torch.mm(a, b), repeats=max(repeats, 5), warmup=2)
        peaks[name] = 2 * size**3 / statistics.median(times) / 1e9
    return peaks


def training_batch(system, preset: dict) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fixed training workload: (source, decoder input, labels), the decoder input starting with the
    system's own start token."""
    vocab = preset["vocab_size"]
    source = random_sentences(TRAIN_BATCH, SOURCE_LENGTH, vocab, seed=1)
    target = random_sentences(TRAIN_BATCH, TARGET_LENGTH, vocab, seed=2)
    decoder_input = torch.cat([torch.full((TRAIN_BATCH, 1), system.start), target[:, :-1]], dim=1)
    return source, decoder_input, target


def measure_train(system, preset: dict, repeats: int) -> dict:
    batch = training_batch(system, preset)
    system.model.train()
    losses = []
    times = timed(lambda: losses.append(system.train_step(*batch)), repeats, warmup=3)
    step = statistics.median(times)
    return {
        "train_tokens_per_s": TRAIN_BATCH * (SOURCE_LENGTH + TARGET_LENGTH) / step,
        "train_step_s": step,
        "train_gflops": training_flops(preset) / step / 1e9,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "parameters": sum(p.numel() for p in system.model.parameters()),
        "loss_first_last": [losses[0], losses[-1]],
    }


def greedy_reference(name: str, system, source: torch.Tensor) -> torch.Tensor | None:
    """What greedy tokens must agree with: for ours, the eager attention path without a cache; for
    CTranslate2, transformers' Marian with the same weights."""
    if name.startswith("ours"):  # fp32 weights still: bf16 and int8 systems convert at their first generate()
        model = system.model.eval()
        model.set_attn_implementation("eager")
        reference = fixed_length_generate(model, source, num_beams=1, new_tokens=NEW_TOKENS, use_cache=False)
        model.set_attn_implementation("sdpa")
        return reference
    if name.startswith("ctranslate2"):
        return system.reference(source, NEW_TOKENS)
    return None


def measure_generate(name: str, system, preset: dict, repeats: int) -> dict:
    vocab = preset["vocab_size"]
    results = {}
    check = random_sentences(4, SOURCE_LENGTH, vocab, seed=3)
    torch.manual_seed(0)
    # Ours: the eager reference runs before any compilation. CTranslate2: its Marian reference runs after
    # the timings, since torch running first in the same process slows CTranslate2 down (docs/benchmarks.md).
    reference = greedy_reference(name, system, check) if name.startswith("ours") else None
    with torch.inference_mode():
        for batch, beams, source in generation_workloads([system], preset):
            outputs = []
            times = timed(
                lambda source=source, beams=beams, outputs=outputs: outputs.append(
                    system.generate(source, beams, NEW_TOKENS)
                ),
                repeats=repeats if batch == 1 else max(2, repeats // 2),
                warmup=1,
            )
            assert outputs[-1].shape == (batch, NEW_TOKENS), (name, outputs[-1].shape)
            key = f"{'greedy' if beams == 1 else f'beam{beams}'}_batch{batch}_tokens_per_s"
            results[key] = batch * NEW_TOKENS / statistics.median(times)
        tokens = system.generate(check, 1, NEW_TOKENS)
        reference = reference if reference is not None else greedy_reference(name, system, check)
        if reference is not None:
            results["greedy_agreement"] = float((tokens == reference).float().mean())
    return results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--system", choices=SYSTEMS)
    parser.add_argument("--preset", choices=sorted(PRESETS), default="small")
    parser.add_argument("--measure", choices=["train", "generate", "peak"], required=True)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    # CTranslate2 runs its own thread pool; torch only converts weights and runs the Marian reference
    # there: a second thread pool in the same process slows CTranslate2 down (docs/benchmarks.md).
    torch.set_num_threads(1 if (args.system or "").startswith("ctranslate2") else args.threads)
    torch.manual_seed(0)
    record = {"system": args.system, "preset": args.preset, "measure": args.measure, "threads": args.threads}
    if args.measure == "peak":
        record |= measure_peak(args.threads, args.repeats)
    else:
        preset = PRESETS[args.preset]
        system = build(args.system, preset, args.threads)
        if args.measure == "train":
            record |= measure_train(system, preset, args.repeats)
        else:
            record |= measure_generate(args.system, system, preset, args.repeats)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
