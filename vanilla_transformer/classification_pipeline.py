"""A text-classification pipeline that reads a long text the way the classifier was evaluated.

transformers' own text-classification pipeline reads a text whole or, truncating, its first tokens. A
model saved by ``VanillaTransformerForSequenceClassification.save_pretrained`` carries this file and
names it in ``config.custom_pipelines``, so whoever loads the folder gets the model's own reading::

    pipeline("text-classification", model=folder, trust_remote_code=True)

The folder's config says how a text longer than ``classifier_max_length`` tokens is read
(``classifier_long_text``):

* ``"head"``: its first tokens;
* ``"head_tail"``: its first ``classifier_head_tokens`` and its last tokens (Sun et al., 2019, "How to
  Fine-Tune BERT for Text Classification?", §5.3.1: the head and the tail of an IMDB review carry most of
  its sentiment);
* ``"windows"``: windows of ``classifier_max_length`` tokens every ``classifier_window_stride`` tokens,
  the last one ending at the text's end; the classifier's logits are averaged over the windows.

Every view ends in ``</s>``, as in training. ``vanilla-transformer classify`` trains and evaluates with
the same two functions (``encode_long_texts``, ``average_logits``), so the pipeline's predictions are
those ``classify evaluate`` scored. Only HTML line breaks (``<br />``, as in IMDB) become spaces
(``clean_text``); the language and the case of a text are kept.

This file imports only torch, public transformers API and the configuration: it travels with the weights.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch
from transformers import TextClassificationPipeline
from transformers.pipelines.base import ChunkPipeline

from .configuration_vanilla_transformer import check_token_ids, validate_long_text

TASK = "text-classification"
BREAKS = re.compile(r"<br\s*/?>", re.IGNORECASE)


def clean_text(text: str) -> str:
    """HTML line breaks become spaces and runs of white space one space; nothing else changes (any
    language, any case)."""
    return " ".join(BREAKS.sub(" ", text).split())


@dataclass(frozen=True)
class LongText:
    """How a classifier reads a text: ``strategy`` (``head`` | ``head_tail`` | ``windows``), views of at
    most ``max_length`` tokens (``</s>`` included), ``head_tokens`` for ``head_tail``, ``stride`` for
    ``windows``."""

    strategy: str
    max_length: int
    head_tokens: int = 128
    stride: int | None = None

    def __post_init__(self):
        validate_long_text(self.strategy, self.max_length, self.head_tokens, self.stride)

    @classmethod
    def from_config(cls, config, strategy: str | None = None) -> LongText:
        """The reading a saved classifier's config records; ``strategy`` replaces its strategy (to measure
        another one on the same weights)."""
        return cls(
            strategy=strategy or config.classifier_long_text,
            max_length=config.classifier_max_length or config.max_position_embeddings,
            head_tokens=config.classifier_head_tokens,
            stride=config.classifier_window_stride,
        )

    def describe(self) -> str:
        """One line for model cards: what the classifier reads of a long text."""
        budget = self.max_length - 1
        if self.strategy == "head":
            return f"first {budget} tokens, then </s>"
        if self.strategy == "head_tail":
            head = min(self.head_tokens, budget)
            return f"first {head} + last {budget - head} tokens, then </s>"
        stride = min(self.stride or max(budget // 2, 1), budget)
        return f"windows of {budget} tokens every {stride} tokens, each then </s>; logits averaged"

    def views(self, ids: Sequence[int], eos_token_id: int | None) -> list[list[int]]:
        """The token ids of one text (no special tokens) -> the sequences the classifier reads."""
        end = [] if eos_token_id is None else [eos_token_id]
        budget = self.max_length - len(end)
        ids = list(ids)
        if len(ids) <= budget:
            return [ids + end]
        if self.strategy == "head":
            return [ids[:budget] + end]
        if self.strategy == "head_tail":
            head = min(self.head_tokens, budget)
            tail = budget - head
            return [ids[:head] + (ids[-tail:] if tail else []) + end]
        stride = min(self.stride or max(budget // 2, 1), budget)
        # Windows every `stride` tokens; the last one ends where the text ends.
        starts = [*range(0, len(ids) - budget, stride), len(ids) - budget]
        return [ids[start : start + budget] + end for start in starts]


def encode_long_texts(tokenizer, texts: Sequence[str], long_text: LongText) -> list[list[list[int]]]:
    """For each text, the token-id sequences the classifier reads (one, or one per window)."""
    encoded = tokenizer([clean_text(text) for text in texts], add_special_tokens=False, verbose=False)
    return [long_text.views(ids, tokenizer.eos_token_id) for ids in encoded["input_ids"]]


def average_logits(logits: torch.Tensor, owners: Sequence[int], num_texts: int) -> torch.Tensor:
    """(views, labels) logits -> (texts, labels): the mean over each text's views (``owners[i]`` is the
    text of view ``i``), accumulated in float64 so the order of the views does not matter."""
    logits = torch.as_tensor(logits).double()
    owners = torch.as_tensor(list(owners), dtype=torch.long)
    total = torch.zeros(num_texts, logits.shape[-1], dtype=torch.float64).index_add_(0, owners, logits)
    counts = torch.bincount(owners, minlength=num_texts).clamp(min=1).unsqueeze(-1)
    return total / counts


class LongTextClassificationPipeline(ChunkPipeline, TextClassificationPipeline):
    """transformers' text-classification pipeline (labels, scores, ``top_k``, ``function_to_apply``) that
    reads each text as ``config.classifier_long_text`` says: every view is a chunk (batched with
    ``batch_size``), and a text's label comes from the mean of its views' logits.

    The standard arguments keep their meaning, mapped onto that reading: ``truncation=True`` (what users
    pass for long texts) reads a long text as the model was evaluated, never beyond ``max_length`` tokens a
    view; ``truncation=False`` refuses a text longer than ``max_length`` instead; ``max_length`` sets the
    tokens per view (``</s>`` included) for one call; ``padding`` is accepted (views are padded to the
    longest of a batch either way, which the attention mask makes irrelevant to the scores).
    ``long_text="windows"`` (or ``"head"``, ``"head_tail"``) reads with another strategy for one call.
    Text pairs are not taken: the classifier was trained on single texts.
    """

    def _sanitize_parameters(
        self,
        function_to_apply=None,
        top_k="",
        long_text=None,
        truncation=None,
        max_length=None,
        padding=None,
        **tokenizer_kwargs,
    ):
        if tokenizer_kwargs:
            raise ValueError(
                f"This pipeline reads long texts as the model's config says (classifier_long_text="
                f"{self.model.config.classifier_long_text!r}); of the tokenizer's arguments it takes truncation, "
                f"max_length and padding, not {sorted(tokenizer_kwargs)}. Pass long_text='head' | 'head_tail' | "
                "'windows' to change the reading."
            )
        if truncation not in (None, True, False, "longest_first", "only_first", "do_not_truncate"):
            raise ValueError(
                f"`truncation` must be True, False, 'longest_first' or 'only_first', got {truncation!r}."
            )
        if padding not in (None, True, False, "longest", "max_length", "do_not_pad"):
            raise ValueError(f"`padding` must be True, False, 'longest' or 'max_length', got {padding!r}.")
        preprocess_params = {
            key: value
            for key, value in (("long_text", long_text), ("max_length", max_length))
            if value is not None
        }
        if truncation is not None:
            preprocess_params["truncate"] = truncation not in (False, "do_not_truncate")
        _, _, postprocess_params = super()._sanitize_parameters(
            function_to_apply=function_to_apply, top_k=top_k
        )
        return preprocess_params, {}, postprocess_params

    def preprocess(self, inputs, long_text: str | None = None, max_length: int | None = None, truncate=True):
        if not isinstance(inputs, str):
            raise ValueError(
                f"The text-classification pipeline of this model takes a string or a list of strings, got {type(inputs)}."
            )
        reading = LongText.from_config(self.model.config, long_text)
        if max_length is not None:
            positions = self.model.config.max_position_embeddings
            if isinstance(max_length, bool) or not isinstance(max_length, int) or max_length > positions:
                raise ValueError(
                    f"`max_length` must be an integer of at most {positions} tokens, got {max_length!r}."
                )
            reading = replace(reading, max_length=max_length)
        if not truncate:
            length = len(self.tokenizer(clean_text(inputs), add_special_tokens=False)["input_ids"]) + 1
            if length > reading.max_length:
                raise ValueError(
                    f"The text has {length} tokens (</s> included), more than max_length={reading.max_length}, "
                    f"and truncation=False. Pass truncation=True to read it as the model was evaluated "
                    f"({reading.describe()})."
                )
        views = encode_long_texts(self.tokenizer, [inputs], reading)[0]
        check_token_ids(views, self.model.config.vocab_size, "input_ids")  # here, not in the model's forward
        for index, ids in enumerate(views):
            yield {
                "input_ids": torch.tensor([ids]),
                "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
                "is_last": index == len(views) - 1,
            }

    def _forward(self, model_inputs):
        is_last = model_inputs.pop("is_last")
        return {"logits": self.model(**model_inputs).logits, "is_last": is_last}

    def postprocess(self, model_outputs, function_to_apply=None, top_k=1, _legacy=True):
        logits = torch.cat([output["logits"].reshape(1, -1) for output in model_outputs])  # (views, labels)
        mean = average_logits(logits.float(), [0] * len(logits), 1).float()  # (1, labels)
        return super().postprocess(
            {"logits": mean}, function_to_apply=function_to_apply, top_k=top_k, _legacy=_legacy
        )


def custom_pipelines_entry() -> dict:
    """The ``config.custom_pipelines`` entry that serves ``pipeline("text-classification")`` from a folder."""
    return {
        TASK: {
            "impl": f"{__name__.rsplit('.', 1)[-1]}.{LongTextClassificationPipeline.__name__}",
            "pt": ["AutoModelForSequenceClassification"],
            "type": "text",
        }
    }


__all__ = [
    "LongText",
    "LongTextClassificationPipeline",
    "clean_text",
    "encode_long_texts",
    "average_logits",
    "custom_pipelines_entry",
]
