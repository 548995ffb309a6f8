"""A recipe's data, for training and for scoring a saved model alike: ``files`` (where relative paths are
read from, the checks every data file passes, the readers of JSON Lines, CSV/TSV and parquet files, and
``DataSettings``, the settings every task's data shares), ``translation`` and ``classification`` (each
task's data settings, which its training arguments inherit, and the readers of its splits) and
``synthetic`` (the built-in translation task). Nothing here imports ``train/``: ``evaluate`` and
``classify evaluate`` read a recipe's data without the training code."""
