"""ONNX export of a trained folder: the largest difference from PyTorch and the latency of each runtime.

    python -m benchmarks.onnx_runtime --model runs/imdb-finetuned/model --texts "a fine film" "dull"
    python -m benchmarks.onnx_runtime --model runs/synthetic-en-de/model --texts "a red house ."

Classifier (or any encoder-only folder): logits of PyTorch and onnxruntime on the texts, batch 1 and all
texts at once. Translation folder: greedy tokens of ``generate(num_beams=1)`` against the onnxruntime
loop, and the time of each, batch 1 and all texts at once.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import torch
from transformers import AutoTokenizer

from vanilla_transformer.loading import load_saved_model
from vanilla_transformer.onnx_export import OnnxSeq2Seq, export_onnx

from .measure import timed


def median_ms(function, repeats: int) -> float:
    return 1000 * statistics.median(timed(function, repeats, warmup=1))


def check_classifier(model, tokenizer, folder, texts: list[str], repeats: int) -> None:
    import onnxruntime

    session = onnxruntime.InferenceSession(f"{folder}/model.onnx", providers=["CPUExecutionProvider"])
    for label, batch in (("batch 1", texts[:1]), (f"batch {len(texts)}", texts)):
        encoded = tokenizer(batch, return_tensors="pt", padding=True, truncation=True)
        inputs = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"]}
        with torch.inference_mode():
            expected = model(**inputs).logits.numpy()
            torch_ms = median_ms(lambda inputs=inputs: model(**inputs), repeats)
        feed = {name: tensor.numpy() for name, tensor in inputs.items()}
        (logits,) = session.run(None, feed)
        onnx_ms = median_ms(lambda feed=feed: session.run(None, feed), repeats)
        print(
            f"{label}: max |logits diff| {np.abs(logits - expected).max():.2e}, same labels "
            f"{(logits.argmax(-1) == expected.argmax(-1)).mean():.0%}; PyTorch {torch_ms:.1f} ms, "
            f"onnxruntime {onnx_ms:.1f} ms"
        )


def check_seq2seq(model, tokenizer, folder, texts: list[str], repeats: int, new_tokens: int) -> None:
    runner = OnnxSeq2Seq(folder)
    for label, batch in (("batch 1", texts[:1]), (f"batch {len(texts)}", texts)):
        encoded = tokenizer(batch, return_tensors="pt", padding=True)

        def torch_generate(encoded=encoded):
            return model.generate(**encoded, num_beams=1, do_sample=False, max_new_tokens=new_tokens)

        def onnx_generate(encoded=encoded):
            ids, mask = encoded["input_ids"].numpy(), encoded["attention_mask"].numpy()
            return runner.generate(ids, mask, max_new_tokens=new_tokens, num_beams=1)

        with torch.inference_mode():
            expected = torch_generate().numpy()
            torch_ms = median_ms(torch_generate, repeats)
        tokens = onnx_generate()
        onnx_ms = median_ms(onnx_generate, repeats)
        same = tokens.shape == expected.shape and bool((tokens == expected).all())
        difference = logits_difference(model, runner, encoded, torch.from_numpy(tokens))
        print(
            f"{label}: greedy tokens identical: {same}; max |logits diff| over the decode {difference:.2e}; "
            f"generate() {torch_ms:.1f} ms, "
            f"onnxruntime loop {onnx_ms:.1f} ms; first: {tokenizer.decode(tokens[0], skip_special_tokens=True)!r}"
        )


def logits_difference(model, runner: OnnxSeq2Seq, encoded, tokens: torch.Tensor) -> float:
    """Largest |logit| difference between PyTorch (teacher-forced on ``tokens``) and the ONNX graphs
    stepping through the same tokens with their keys/values."""
    ids, mask = encoded["input_ids"].numpy(), encoded["attention_mask"].numpy()
    with torch.inference_mode():
        expected = model(**encoded, decoder_input_ids=tokens).logits.numpy()
    (states,) = runner.encoder.run(None, {"input_ids": ids, "attention_mask": mask})
    first = {
        "decoder_input_ids": tokens[:, :1].numpy(),
        "encoder_hidden_states": states,
        "encoder_attention_mask": mask,
    }
    logits, keys, values, cross_keys, cross_values = runner.first.run(None, first)
    worst = np.abs(logits - expected[:, 0]).max()
    for step in range(1, tokens.shape[1]):
        feed = {
            "decoder_input_ids": tokens[:, step : step + 1].numpy(),
            "encoder_attention_mask": mask,
            "past_keys": keys,
            "past_values": values,
            "cross_keys": cross_keys,
            "cross_values": cross_values,
        }
        logits, keys, values = runner.later.run(None, feed)
        worst = max(worst, np.abs(logits - expected[:, step]).max())
    return float(worst)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--texts", nargs="+", required=True)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--new-tokens", type=int, default=40)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model = load_saved_model(args.model).eval()
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        files = export_onnx(model, folder, tokenizer)
        print(f"Exported {', '.join(f.name for f in files)} in {time.perf_counter() - start:.1f} s")
        if model.config.is_encoder_decoder:
            check_seq2seq(model, tokenizer, folder, args.texts, args.repeats, args.new_tokens)
        else:
            check_classifier(model, tokenizer, folder, args.texts, args.repeats)


if __name__ == "__main__":
    main()
