"""Batches by token budget (§5.1: "each training batch contained a set of sentence pairs containing
approximately 25000 source tokens and 25000 target tokens")."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Groups examples of similar length so that each batch holds at most ``max_tokens`` source and
    ``max_tokens`` target tokens, padding included (longest length in the batch x batch size).

    Every example appears exactly once per epoch. With ``shuffle`` the order of examples of equal
    length and the order of batches change every epoch (call ``set_epoch``), deterministically for a
    seed; an example longer than the budget on its own forms a batch of one.
    """

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int],
        max_tokens: int,
        shuffle: bool = True,
        seed: int = 0,
    ):
        if len(source_lengths) != len(target_lengths):
            raise ValueError(
                f"{len(source_lengths)} source lengths but {len(target_lengths)} target lengths were given."
            )
        if max_tokens < 1:
            raise ValueError(f"`max_tokens` must be positive, got {max_tokens}.")
        self.source_lengths = np.asarray(source_lengths, dtype=np.int64)
        self.target_lengths = np.asarray(target_lengths, dtype=np.int64)
        self.max_tokens = max_tokens
        self.shuffle = shuffle
        self.seed = seed
        self.epoch = 0
        self._batches: list[list[int]] | None = None

    def set_epoch(self, epoch: int) -> None:
        if epoch != self.epoch:
            self.epoch = epoch
            self._batches = None

    def _make_batches(self) -> list[list[int]]:
        rng = np.random.default_rng([self.seed, self.epoch])
        order = (
            rng.permutation(len(self.source_lengths)) if self.shuffle else np.arange(len(self.source_lengths))
        )
        # Stable sort by (source, target) length: ties keep the random order.
        order = order[np.lexsort((self.target_lengths[order], self.source_lengths[order]))]
        batches, current, longest_source, longest_target = [], [], 0, 0
        for index in order.tolist():
            source, target = int(self.source_lengths[index]), int(self.target_lengths[index])
            new_source, new_target = max(longest_source, source), max(longest_target, target)
            size = len(current) + 1
            if current and (new_source * size > self.max_tokens or new_target * size > self.max_tokens):
                batches.append(current)
                current, new_source, new_target = [], source, target
            current.append(index)
            longest_source, longest_target = new_source, new_target
        if current:
            batches.append(current)
        if self.shuffle:
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        if self._batches is None:
            self._batches = self._make_batches()
        yield from self._batches

    def __len__(self) -> int:
        if self._batches is None:
            self._batches = self._make_batches()
        return len(self._batches)


__all__ = ["TokenBudgetBatchSampler"]
