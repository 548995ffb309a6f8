"""Translation (§5, §6.1): recipes, data and token-budget batches, Eq. 3, the training loop, checkpoints and
their average, BLEU evaluation, and Table 3's ablation."""
