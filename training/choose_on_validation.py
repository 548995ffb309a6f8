"""Choose a translation run's §6.1 settings on the validation split: the averaging window, then the beam.

    python training/choose_on_validation.py runs/multi30k-de-en --recipe training/configs/multi30k_de_en.yaml \
        --last 1 3 5 8 --beams 4 6 --length-penalty 0.6 1.0 --metric sacrebleu

First every ``--last N`` (the average of the run's last N checkpoints, spaced ``save_steps`` apart as the
training run spaces them) is scored with the recipe's decoding; then, for the best N, every beam size and
length penalty. Each score is corpus BLEU on the *whole* validation split (the run's own curve scores a
sample of it), so the test split is never looked at. Prints both tables and writes them, with the winner,
to ``<run>/validation_choices.json``; the winner goes into the recipe (``average_last``, ``num_beams``,
``length_penalty``) by hand, and the test split is then scored once with ``vanilla-transformer evaluate``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
import time
from pathlib import Path

from vanilla_transformer.averaging import average_checkpoints
from vanilla_transformer.data.translation import prepare_data
from vanilla_transformer.evaluation import evaluate_folder
from vanilla_transformer.train.translation.arguments import load_arguments
from vanilla_transformer.train.translation.averaging import spaced_checkpoints


def score(model_dir: Path, split, args, num_beams: int, length_penalty: float) -> dict:
    start = time.time()
    scores, _ = evaluate_folder(
        model_dir,
        split,
        model_dir / "validation_hypotheses.txt",
        target_lang=args.target_lang,
        batch_size=args.per_device_eval_batch_size,
        num_beams=num_beams,
        length_penalty=length_penalty,
    )
    return {**scores, "decode_seconds": time.time() - start}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path, help="The training run's output_dir (with checkpoints/).")
    parser.add_argument(
        "--recipe", help="The run's recipe (names the data and the languages; default: the synthetic task)."
    )
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--last", type=int, nargs="+", default=[1, 3, 5])
    parser.add_argument("--beams", type=int, nargs="+", default=[4])
    parser.add_argument("--length-penalty", type=float, nargs="+", default=[0.6])
    parser.add_argument("--metric", choices=["sacrebleu", "bleu_lc_tok"], default="sacrebleu")
    options = parser.parse_args(argv)

    from vanilla_transformer.recipes import parse_overrides

    args = load_arguments(options.recipe, parse_overrides(options.set))
    split = prepare_data(args)["validation"]
    root = options.run / "checkpoints"
    results = {"metric": options.metric, "sentences": len(split), "windows": [], "decoding": []}

    with tempfile.TemporaryDirectory(prefix="choose-", dir=options.run) as scratch:
        averaged = {}
        for last in options.last:
            folders = spaced_checkpoints(root, last, args.save_steps)
            if len(folders) < last:
                print(f"--last {last}: only {len(folders)} checkpoints under {root}; skipped")
                continue
            averaged[last] = average_checkpoints(folders, Path(scratch) / f"last-{last}")
            row = {"last": last, "checkpoints": [f.name for f in folders]}
            row |= score(averaged[last], split, args, args.num_beams, args.length_penalty)
            results["windows"].append(row)
            print(
                f"last {last:>2} ({folders[0].name}..{folders[-1].name}): {options.metric} {row[options.metric]:.2f}"
            )
        if not results["windows"]:
            raise SystemExit(f"No averaging window could be built from {root}.")
        best = max(results["windows"], key=lambda row: row[options.metric])
        results["decoding"].append({k: v for k, v in best.items() if k not in ("last", "checkpoints")})
        for beams, alpha in itertools.product(options.beams, options.length_penalty):
            alpha = alpha if beams > 1 else 1.0  # greedy search has no length penalty
            if any(
                (row["num_beams"], row["length_penalty"]) == (beams, alpha) for row in results["decoding"]
            ):
                continue  # already scored
            row = score(averaged[best["last"]], split, args, beams, alpha)
            results["decoding"].append(row)
            print(
                f"last {best['last']}, beam {beams}, alpha {row['length_penalty']}: {options.metric} {row[options.metric]:.2f}"
            )

    winner = max(results["decoding"], key=lambda row: row[options.metric])
    results["winner"] = {
        "average_last": best["last"],
        "num_beams": winner["num_beams"],
        "length_penalty": winner["length_penalty"],
    }
    print(f"\nValidation ({len(split)} sentences), {options.metric}:")
    print("| averaged checkpoints | sacreBLEU | lowercased tokenized BLEU |\n| --- | --- | --- |")
    for row in results["windows"]:
        print(f"| last {row['last']} | {row['sacrebleu']:.2f} | {row['bleu_lc_tok']:.2f} |")
    print(
        f"\n| beam (last {best['last']}) | length penalty | sacreBLEU | lowercased tokenized BLEU | decode s |"
    )
    print("| --- | --- | --- | --- | --- |")
    for row in results["decoding"]:
        print(
            f"| {row['num_beams']} | {row['length_penalty']} | {row['sacrebleu']:.2f} | {row['bleu_lc_tok']:.2f} "
            f"| {row['decode_seconds']:.0f} |"
        )
    print(f"\nChosen on validation: {results['winner']}")
    (options.run / "validation_choices.json").write_text(json.dumps(results, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
