"""Where a run's data files are (``--data-dir`` / ``VT_DATA_DIR``) and the run's tokenizer: an existing one,
or a BPE vocabulary trained on the run's text and saved for the next invocation."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from transformers import AutoTokenizer

from ...tokenization import train_bpe_tokenizer


def data_dir(flag: str | None = None) -> Path | None:
    """The shared data folder: a flag, else ``$VT_DATA_DIR``, else None."""
    value = flag or os.environ.get("VT_DATA_DIR")
    return Path(value) if value else None


def data_path(value: str | None, folder: str | None = None) -> str | None:
    """A data file's path: absolute, or relative to ``folder`` (a recipe's ``data_dir``) or
    ``$VT_DATA_DIR`` when either is set."""
    if value is None:
        return None
    root = data_dir(folder)
    return str(root / value) if root is not None and not Path(value).is_absolute() else value


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


__all__ = ["data_dir", "data_path", "load_or_train_tokenizer"]
