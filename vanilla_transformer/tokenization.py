"""Train the shared source-target BPE vocabulary of §5.1 and save it as a transformers fast tokenizer.

The tokenizer works on any Unicode script: text is NFC-normalised (canonical composition only, so
Hangul compatibility jamo such as "ㅋㅋ", full-width letters or "①" stay as typed; NFKC would rewrite
them), split into words and punctuation, and each word's UTF-8 bytes are merged by byte-pair encoding
(Sennrich et al., 2016; byte-level as in GPT-2), so no character is ever unknown and decoding gives the
(NFC) text back exactly, but for the characters other programs take for line ends inside a line
(``LINE_BREAKS``: U+2028, U+2029, U+0085, \x1c-\x1e, \v, \f, a lone \r), which become a space: a line
of a file (split only at ``\n``) is one sentence in training, evaluation and translation alike, and no
output line ever holds a line end for another reader to split at. Nothing is stripped of accents, and
nothing is lower-cased unless asked (``lowercase``: a classifier's choice, where "Great" and "great"
should share one embedding).
Special tokens are fixed at the ids the config expects: ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3;
every encoded sequence ends in ``</s>``. The result loads offline with
``AutoTokenizer.from_pretrained(folder)``.

:func:`tokenizer_fingerprint` names a vocabulary: a training run records it in the model's config
(``tokenizer_fingerprint``), so that a folder's ``tokenizer.json`` can be checked against the model it was
saved with (``loading.check_model_folder``), not only by its size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

# What str.splitlines(), Python's universal newlines or other tools end a line at, besides "\n": inside a
# line of the package's files they are part of the sentence, and the tokenizer reads each as a space.
LINE_BREAKS = "\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"

SPECIAL_TOKENS = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
MASK_TOKEN = "<mask>"
# The special tokens whose ids a fingerprint records (those a tokenizer does not set count as None).
FINGERPRINT_SPECIALS = ("pad", "bos", "eos", "unk", "mask", "sep", "cls")


def train_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int = 8000,
    model_max_length: int = 256,
    min_frequency: int = 2,
    extra_special_tokens: tuple[str, ...] = (),
    show_progress: bool = False,
    lowercase: bool = False,
) -> PreTrainedTokenizerFast:
    """Learn a BPE vocabulary of at most ``vocab_size`` tokens from ``texts``.

    For translation pass the source and target sides together, so that both languages share one
    vocabulary and one embedding matrix (§3.4, §5.1).

    Args:
        texts: training sentences (any iterable; read once).
        vocab_size: upper bound on the vocabulary, special tokens included.
        model_max_length: the longest input the tokenizer will produce when truncating.
        min_frequency: merges seen fewer times than this are not learned.
        extra_special_tokens: more special tokens after the four fixed ones (e.g. ``"<mask>"``).
        show_progress: show the tokenizers library's progress bar.
        lowercase: lower-case every text before it is split (saved in the tokenizer's normaliser, so the
            loaded tokenizer and pipelines do it too; decoding then gives the lower-cased text).

    Returns:
        A ``PreTrainedTokenizerFast`` with pad / bos / eos / unk set and a ``</s>`` post-processor.
    """
    minimum = len(SPECIAL_TOKENS) + len(extra_special_tokens) + 256
    if vocab_size < minimum:
        raise ValueError(
            f"`vocab_size` must hold the 256 byte symbols and the special tokens (>= {minimum}), got {vocab_size}."
        )
    specials = list(SPECIAL_TOKENS.values()) + list(extra_special_tokens)
    bpe = Tokenizer(models.BPE(unk_token=SPECIAL_TOKENS["unk_token"]))
    steps = [normalizers.NFC(), normalizers.Replace(Regex(f"[{LINE_BREAKS}]"), " ")]
    bpe.normalizer = normalizers.Sequence(steps + [normalizers.Lowercase()] if lowercase else steps)
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=show_progress,
    )
    bpe.train_from_iterator(_nonempty(texts), trainer)
    eos = SPECIAL_TOKENS["eos_token"]
    bpe.post_processor = processors.TemplateProcessing(
        single=f"$A {eos}", pair=f"$A {eos} $B {eos}", special_tokens=[(eos, bpe.token_to_id(eos))]
    )
    extra = {"mask_token": MASK_TOKEN} if MASK_TOKEN in extra_special_tokens else {}
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
        **SPECIAL_TOKENS,
        **extra,
    )


def tokenizer_fingerprint(tokenizer) -> str:
    """SHA-256 (hex) of what makes token ids mean what a model learned: the vocabulary (every token with
    its id, added tokens included) and the ids of the special tokens. Not of the saved files, whose other
    contents (formatting, fields a transformers release adds) may change on a re-save while the ids do
    not; two tokenizers with the same fingerprint turn every text into the same ids' meanings."""
    specials = {name: getattr(tokenizer, f"{name}_token_id", None) for name in FINGERPRINT_SPECIALS}
    record = {"vocabulary": sorted(tokenizer.get_vocab().items()), "special_ids": specials}
    text = json.dumps(record, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _nonempty(texts: Iterable[str]) -> Iterable[str]:
    seen = False
    for text in texts:
        if text and text.strip():
            seen = True
            yield text
    if not seen:
        raise ValueError("Cannot train a tokenizer on no text: every training sentence was empty.")


__all__ = ["train_bpe_tokenizer", "tokenizer_fingerprint", "SPECIAL_TOKENS", "MASK_TOKEN", "LINE_BREAKS"]
