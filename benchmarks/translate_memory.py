"""Peak memory of ``vanilla-transformer translate`` against the length of its input (#31, item 8): the
command reads, translates and writes a chunk of lines at a time, so its peak should not grow with the
number of lines.

    python -m benchmarks.translate_memory [--model DIR] [--lines 0 1000 100000] [--max-new-tokens 4]

Each input length runs in a fresh process (``python -m vanilla_transformer.cli translate --input FILE
--output FILE --beams 1``), one thread; its peak resident memory is the kernel's count for that one
process (``ru_maxrss`` from ``os.wait4``, taken by a small launcher process: see ``LAUNCHER``). The input
is the synthetic task's English sentences, one a line. Without ``--model`` the model is untrained and tiny
(width 64, 2 + 2 layers, a 1,000-token BPE vocabulary trained on the sentences) and decodes greedily at
most ``--max-new-tokens`` tokens a sentence, so 100,000 lines take well under a minute on a CPU: what is
measured is the command's memory, not the model's. A trained ``--model`` measures a real one (with its
own decoding, and ``--beams 1``).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def tiny_model(folder: Path, sentences: list[str], max_new_tokens: int) -> Path:
    """An untrained tiny translation model with a tokenizer trained on ``sentences``, saved to ``folder``."""
    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.tokenization import train_bpe_tokenizer

    tokenizer = train_bpe_tokenizer(sentences[:5000], vocab_size=1000, model_max_length=64)
    config = VanillaTransformerConfig(
        vocab_size=len(tokenizer),
        d_model=64,
        d_ff=256,
        num_heads=4,
        num_encoder_layers=2,
        num_decoder_layers=2,
        max_position_embeddings=64,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    model = VanillaTransformerForConditionalGeneration(config)
    model.generation_config.num_beams = 1
    model.generation_config.length_penalty = 1.0
    model.generation_config.early_stopping = False
    model.generation_config.max_new_tokens = max_new_tokens
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# Starts the command and prints its exit code and peak RSS. It runs as a small process of its own: Linux
# carries a process's high-water mark across fork and exec, so a child started straight from this
# (large) process would report at least this one's peak.
LAUNCHER = """
import os, subprocess, sys
process = subprocess.Popen(sys.argv[1:], stderr=subprocess.DEVNULL)
_, status, usage = os.wait4(process.pid, 0)
print(os.waitstatus_to_exitcode(status), usage.ru_maxrss)
"""


def measure(model: Path, source: Path, output: Path) -> dict:
    """One ``translate`` process on ``source``: its wall time and peak resident memory (MiB)."""
    command = [sys.executable, "-m", "vanilla_transformer.cli", "translate", "--model", str(model)]
    command += ["--input", str(source), "--output", str(output), "--beams", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}
    start = time.perf_counter()
    launched = subprocess.run(
        [sys.executable, "-c", LAUNCHER, *command], env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    code, peak_kib = map(int, launched.stdout.split())
    if code:
        raise SystemExit(f"translate exited with {code}: {' '.join(command)}")
    with open(output, "rb") as handle:
        written = sum(1 for _ in handle)
    return {"seconds": seconds, "peak_rss_mib": peak_kib / 1024, "lines_written": written}  # KiB on Linux


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", help="A saved translation model folder (default: an untrained tiny one).")
    parser.add_argument("--lines", type=int, nargs="+", default=[0, 1000, 100_000])
    parser.add_argument("--max-new-tokens", type=int, default=4, help="The tiny model's output bound.")
    options = parser.parse_args(argv)

    from vanilla_transformer.data.synthetic import synthetic_pairs
    from vanilla_transformer.model_card import hardware

    sentences = [
        pair["en"] for pair in synthetic_pairs(max(*options.lines, 5000), seed=0)
    ]  # 5,000: the tokenizer's
    with tempfile.TemporaryDirectory() as folder:
        folder = Path(folder)
        model = (
            Path(options.model)
            if options.model
            else tiny_model(folder / "model", sentences, options.max_new_tokens)
        )
        print(f"{hardware()}; model: {options.model or 'untrained tiny (width 64, 2 + 2 layers), greedy'}")
        print("| lines | input (MiB) | seconds | peak RSS (MiB) |\n| ---: | ---: | ---: | ---: |")
        for count in options.lines:
            source = folder / f"in-{count}.txt"
            source.write_text("".join(f"{text}\n" for text in sentences[:count]), encoding="utf-8")
            result = measure(model, source, folder / f"out-{count}.txt")
            if result["lines_written"] != count:
                raise SystemExit(f"{count} lines in, {result['lines_written']} out")
            size = source.stat().st_size / 2**20
            print(
                f"| {count:,} | {size:.2f} | {result['seconds']:.1f} | {result['peak_rss_mib']:.0f} |",
                flush=True,
            )


if __name__ == "__main__":
    main()
