"""``classify evaluate`` and a classification run's test scores: which labelled texts a classification recipe
evaluates a saved classifier on (a ``--file``, the recipe's ``test_file``, or the validation texts held out
of its training file), read with the recipe's columns and checks; the package's
``evaluation.evaluate_classifier`` scores them. A misspelt file is named before the model loads, and the
folder is checked before the data is read (``loading.check_model_folder``: another architecture, missing
or damaged weights or a tokenizer larger than ``vocab_size`` is one error naming the file or field)."""

from __future__ import annotations

from pathlib import Path

from ...data_files import FILE_FORMATS, data_path, refuse_missing
from ...evaluation import evaluate_classifier
from ...loading import check_model_folder
from .arguments import ClassificationArguments
from .data import load_labelled, training_and_validation


def evaluate_on_recipe_data(
    model_dir: str | Path,
    args: ClassificationArguments,
    file: str | None = None,
    split: str = "test",
    device=None,
    dtype: str = "fp32",
) -> dict:
    """Accuracy, F1 and a confusion-matrix PNG (next to the model) on a labelled file: ``file``, else the
    recipe's ``test_file``; with ``split="validation"`` the texts ``training_and_validation`` holds out for
    the recipe's ``seed`` (what training validated on: choices such as the long-text reading are made
    there). The recipe's ``eval_long_text`` and ``max_eval_examples`` apply; ``device`` / ``dtype``: where
    and in which type the model runs (``--device``, ``--dtype``)."""
    if split not in ("test", "validation"):
        raise ValueError(f"`split` must be 'test' or 'validation', got {split!r}.")
    if split == "validation" and file is not None:
        raise ValueError("Pass a labelled `file` or `split='validation'`, not both.")
    if split == "test" and not (file or args.test_file):
        raise ValueError("Nothing to evaluate on: give a labelled file or set the recipe's `test_file`.")
    if split == "test" and args.dataset in FILE_FORMATS:  # a misspelt file is named before the model loads
        refuse_missing({"--file" if file else "test_file": data_path(file or args.test_file, args.data_dir)})
    check_model_folder(model_dir)  # the folder before the data
    if split == "validation":
        source = (
            args.validation_file
            or f"{args.train_file} (validation_size {args.validation_size}, seed {args.seed})"
        )
        title = f"validation ({Path(args.validation_file or args.train_file).name})"
        data = training_and_validation(args, args.seed, check_paths=False)[1]
    else:
        source = file or args.test_file
        title = Path(source).name
        data = load_labelled(args, source)
    return evaluate_classifier(
        model_dir,
        data,
        source=source,
        text_column=args.text_column,
        label_column=args.label_column,
        split=split,
        title=title,
        long_text=args.eval_long_text,
        max_examples=args.max_eval_examples,
        device=device,
        dtype=dtype,
    )


__all__ = ["evaluate_on_recipe_data"]
