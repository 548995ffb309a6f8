"""A training run's tokenizer: an existing one (a folder a setting names is checked to hold one), or a BPE
vocabulary trained on the run's text and saved for the next invocation. Reading the data files themselves
(``data_path``, ``read_data_file``, ...) is ``vanilla_transformer/data/files.py``'s, shared with serving."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from transformers import AutoTokenizer

from ...tokenization import train_bpe_tokenizer


def check_tokenizer_folder(path: str | Path, setting: str) -> None:
    """Refuse a tokenizer folder that a setting names (``tokenizer_path``, ``init_from``) when it holds
    no saved tokenizer, instead of training a new one and writing it there."""
    path = Path(path)
    if not (path / "tokenizer.json").is_file():
        what = "does not exist" if not path.exists() else "holds no tokenizer.json"
        raise FileNotFoundError(
            f"`{setting}`: {path} {what}. Name a folder a tokenizer was saved in (a run's tokenizer/ or "
            "model/), or leave the setting unset to train a tokenizer on the run's data."
        )


def load_or_train_tokenizer(
    saved: Sequence[str | Path | None],
    texts: Iterable[str],
    save_to: str | Path,
    vocab_size: int,
    model_max_length: int,
    extra_special_tokens: tuple[str, ...] = (),
    lowercase: bool = False,
):
    """The tokenizer of the first folder in ``saved`` that holds one (a resumed run, a pre-trained
    model), else a BPE tokenizer trained on ``texts`` (read only then) and saved to ``save_to``."""
    for folder in saved:
        if folder is not None and (Path(folder) / "tokenizer.json").is_file():
            return AutoTokenizer.from_pretrained(folder)
    tokenizer = train_bpe_tokenizer(
        texts,
        vocab_size=vocab_size,
        model_max_length=model_max_length,
        extra_special_tokens=extra_special_tokens,
        lowercase=lowercase,
    )
    tokenizer.save_pretrained(save_to)
    return tokenizer


__all__ = ["check_tokenizer_folder", "load_or_train_tokenizer"]
