"""Recipes as files: the shipped ones (this folder's ``*.yaml``; ``training/configs`` in a clone links here),
finding one by name or path, reading it, and ``--set key=value`` overrides. Nothing here knows what a
setting means: the training command parses a recipe into its run's arguments
(``train/common/recipes.py``), and a serving command reads only the settings it needs, the data's
(:func:`read_settings`, behind ``data.translation.TranslationData.from_recipe`` and
``data.classification.ClassificationData.from_recipe``).

* A recipe is a mapping of ``setting: value``; the model's settings are its ``model:`` block.
* ``--set key=value`` overrides a setting; ``--set model.d_model=64`` edits one field of the model
  block; ``--set 'model={preset: base}'`` replaces the whole block.
* YAML 1.2 scalars: only true/false are booleans (``eval_strategy: no`` stays the string "no") and
  ``3e-4`` is a float, not a string.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import types
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path

import yaml

MODEL_BLOCK = "model"


class _RecipeLoader(yaml.SafeLoader):
    """PyYAML's loader with YAML 1.2 booleans and exponent floats (see the module docstring)."""


_RecipeLoader.yaml_implicit_resolvers = {
    first: [(tag, pattern) for tag, pattern in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_RecipeLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"),
)


def parse_yaml(text: str):
    """Parse a recipe or a ``--set`` value."""
    return yaml.load(text, Loader=_RecipeLoader)


# The recipes that ship with the package (this folder; ``training/configs`` in a clone).
SHIPPED_RECIPES = Path(__file__).resolve().parent


def shipped_recipes() -> list[str]:
    return sorted(path.stem for path in SHIPPED_RECIPES.glob("*.yaml"))


def find_recipe(name: str) -> str:
    """``--recipe``: a YAML file's path, or the name of a shipped recipe (``multi30k_de_en``, with or without
    ``.yaml``), so that the README's commands run from a wheel as from a clone."""
    path = Path(name)
    if path.is_file():
        return str(path)
    shipped = SHIPPED_RECIPES / f"{path.name.removesuffix('.yaml')}.yaml"
    if path.parent == Path(".") and shipped.is_file():
        return str(shipped)
    if path.parent != Path(".") and not path.exists():
        # training/configs/NAME.yaml from a directory other than a clone's root: the shipped one of that name
        if path.parent.as_posix().endswith("training/configs") and shipped.is_file():
            return str(shipped)
    raise FileNotFoundError(
        f"--recipe {name}: no such file, and no shipped recipe of that name (shipped: "
        f"{', '.join(shipped_recipes())})."
    )


def read_recipe(path: str | Path) -> dict:
    """The settings of a YAML recipe file (a mapping; the ``model:`` block a mapping too)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"No such recipe file: {path}")
    try:
        values = parse_yaml(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f"{path}, line {mark.line + 1}, column {mark.column + 1}" if mark else str(path)
        problem = getattr(error, "problem", None) or str(error).splitlines()[0]
        raise ValueError(f"{where}: not valid YAML ({problem}).") from error
    if not isinstance(values, dict):
        raise ValueError(f"{path}: a recipe must be a mapping of setting: value.")
    if not isinstance(values.get(MODEL_BLOCK, {}), dict):
        raise ValueError(f"{path}: `model:` must be a mapping of VanillaTransformerConfig fields.")
    return values


def parse_overrides(pairs: Iterable[str]) -> dict:
    """``["max_steps=400", "model.d_model=64"]`` -> ``{"max_steps": 400, "model.d_model": 64}``."""
    overrides = {}
    for pair in pairs:
        if "=" not in pair:
            raise ValueError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            overrides[key.strip().replace("-", "_")] = parse_yaml(value)
        except yaml.YAMLError as error:
            problem = getattr(error, "problem", None) or str(error).splitlines()[0]
            raise ValueError(f"--set {key.strip()}: {value!r} is not valid YAML ({problem}).") from error
    return overrides


def apply_overrides(values: Mapping, overrides: Mapping | None, default_model: dict) -> dict:
    """``values`` with ``overrides`` applied: a plain key replaces a setting (``model``: the whole block);
    ``model.<field>`` edits one field of the block (the recipe's, else ``default_model``)."""
    values, overrides = dict(values), dict(overrides or {})
    dotted = {key: overrides.pop(key) for key in list(overrides) if "." in key}
    values.update(overrides)
    for key, value in dotted.items():
        block, name = key.split(".", 1)
        if block != MODEL_BLOCK:
            raise ValueError(f"Only the model block takes dotted settings (model.<field>), not {key!r}.")
        values[MODEL_BLOCK] = {**values.get(MODEL_BLOCK, default_model), name: value}
    return values


def source_name(recipe: str | None, overrides: Mapping | None) -> str:
    """How errors name where the settings came from: the recipe file, ``--set``, or both."""
    if recipe is None:
        return "--set"
    return f"{recipe} (with --set overrides)" if overrides else str(recipe)


def field_types(dataclass_types: tuple) -> dict:
    """{setting: its annotation} over the dataclasses (first one wins)."""
    found = {}
    for cls in dataclass_types:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            found.setdefault(f.name, hints.get(f.name))
    return found


def type_problem(value, annotation) -> str | None:
    """Why ``value`` cannot be a setting of type ``annotation`` (None: it can, or the type is not a plain
    number, string, flag, list or mapping that is checked here), so that a bad value is refused by name
    before any work starts instead of failing deep inside the run."""
    allowed = (
        typing.get_args(annotation)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType)
        else (annotation,)
    )
    if value is None:
        return None if type(None) in allowed else "must be set (it cannot be null)"
    names = {
        int: "an integer",
        float: "a number",
        bool: "true or false",
        str: "a string",
        list: "a list",
        dict: "a mapping",
    }
    plain = [typing.get_origin(kind) or kind for kind in allowed if kind is not type(None)]
    if not plain or any(kind not in names for kind in plain):
        return None  # enums, literals and other types: the parser checks those
    for kind in plain:
        if kind is float and isinstance(value, int | float) and not isinstance(value, bool):
            return None
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return None
        if kind in (bool, str, list, dict) and isinstance(value, kind):
            return None
    return "must be " + " or ".join(names[kind] for kind in plain)


def closest(key: str, known) -> str:
    """The (at most three) known names closest to a misspelt ``key``, as "a, b or c"; "" when none is close:
    what a refusal names instead of every setting there is."""
    close = difflib.get_close_matches(key, sorted(known), n=3)
    return f"{', '.join(close[:-1])} or {close[-1]}" if len(close) > 1 else "".join(close)


def unknown_key_hint(key: str, known, model_fields=()) -> str:
    """What to do about a key that is no setting: a model field set at the top level goes under ``model:``;
    else the closest known settings; else that none is close."""
    if key in model_fields:
        return f"a model setting: put it under `model:` (--set model.{key}=...)"
    close = closest(key, known)
    return f"did you mean {close}?" if close else "no setting has a similar name"


def read_settings(settings_class: type, recipe: str | None, overrides: Mapping | None, what: str):
    """The ``settings_class`` dataclass of a recipe's settings: the recipe file's (None: none) with
    ``overrides`` (``--set``) applied, each one unset at its default. Only the dataclass's fields are read: a
    key of the file that is none of them is left alone (it is the training command's to check), a ``--set``
    key that is none of them is refused, naming the closest of them, since it would change nothing here.
    ``what``: what one of the fields is, for that message (e.g. "a data setting of a translation recipe")."""
    fields = sorted(f.name for f in dataclasses.fields(settings_class) if f.init)
    overrides = dict(overrides or {})
    unknown = [key for key in overrides if key not in fields]
    if unknown:
        key = unknown[0]
        close = closest(key, fields)
        hint = f"did you mean {close}?" if close else f"they are: {', '.join(fields)}."
        raise ValueError(f"--set {key}: not {what}, the only settings this command reads; {hint}")
    from_file = read_recipe(recipe) if recipe else {}
    values = {key: value for key, value in from_file.items() if key in fields} | overrides
    annotations = field_types((settings_class,))
    for key, value in values.items():
        problem = type_problem(value, annotations.get(key))
        if problem:
            raise ValueError(f"{'--set' if key in overrides else recipe}: `{key}` {problem}, got {value!r}.")
    try:
        return settings_class(**values)
    except ValueError as error:
        raise ValueError(f"{source_name(recipe, overrides)}: {error}") from error


__all__ = [
    "SHIPPED_RECIPES",
    "shipped_recipes",
    "find_recipe",
    "read_recipe",
    "parse_yaml",
    "parse_overrides",
    "apply_overrides",
    "source_name",
    "field_types",
    "type_problem",
    "read_settings",
]
