"""The lengths a training run feeds its model, checked against the positions the model will have
(``max_position_embeddings``) before any work, the same way for every task: translation
(``max_source_length``, ``max_target_length``), classification (``max_length``), encoder pre-training
(``pack_length``, else ``max_length``) and the causal LM (``pack_length``).

**Learned positions** (Table 3 row E) are a table of ``max_position_embeddings`` rows: a longer sequence has
no row, and the model's forward refuses it, which in a run means mid-training, after its folder was written,
and only once a long enough example comes along. So a run whose lengths exceed the table is refused before
its folder is touched, in one line naming the first length that does, both numbers and the fix. The table
is the one the model will have: the model it starts from (``init_from``), else the recipe's
``model.max_position_embeddings``; a recipe that leaves it out gets one the run sizes to its lengths.

**Sinusoidal positions** (§3.5) are computed for any position (``sinusoidal_position_encoding``: no table,
no limit; the paper chose them because they "may allow the model to extrapolate to sequence lengths longer
than the ones encountered during training"), so a length past ``max_position_embeddings`` is not refused:
training reads those positions as the model computes them. For such a model ``max_position_embeddings``
is where serving cuts a long input (``long_inputs.reading_limit``), and the size of the table a CTranslate2
export writes."""

from __future__ import annotations

import dataclasses

from ...configuration_vanilla_transformer import PRESETS, VanillaTransformerConfig
from .recipes import PRESET_KEY

LEARNED = "learned"


def _default(name: str):
    return next(f.default for f in dataclasses.fields(VanillaTransformerConfig) if f.name == name)


def check_lengths(
    lengths: dict[str, int | None],
    block: dict,
    init_from: str | None = None,
    parent: VanillaTransformerConfig | None = None,
) -> None:
    """Refuse ``lengths`` (setting -> the longest sequence it lets the model read; None: unset) longer than
    the learned positions of the model the run trains: ``parent``'s (the model ``init_from`` names), else
    those the recipe's ``model:`` block sets. One ``ValueError`` names the first length that is too long."""
    if parent is not None:
        encoding, positions = parent.position_encoding, parent.max_position_embeddings
    else:
        fields = {**PRESETS.get(block.get(PRESET_KEY), {}), **block}
        encoding = fields.get("position_encoding", _default("position_encoding"))
        positions = fields.get("max_position_embeddings")  # unset: the run sizes it to the lengths
    if encoding != LEARNED or positions is None:
        return
    for name, length in lengths.items():
        if length is None or length <= positions:
            continue
        if parent is not None:
            raise ValueError(
                f"`init_from`: {init_from} has {positions} learned positions (max_position_embeddings), but "
                f"`{name}` is {length}: the model cannot read a longer sequence. Set {name} to at most "
                f"{positions}, or start from a model with more positions."
            )
        raise ValueError(
            f"`model.max_position_embeddings` is {positions} learned positions, but `{name}` is {length}: the "
            f"model could not read a longer sequence. Set model.max_position_embeddings to at least {length} "
            f"(or leave it out: the run sizes it), or {name} to at most {positions}."
        )


__all__ = ["check_lengths"]
