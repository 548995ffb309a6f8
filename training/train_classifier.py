"""The encoder as a text classifier: the same as ``vanilla-transformer classify``, as a plain script.

    python training/train_classifier.py pretrain --recipe training/configs/imdb_pretrain.yaml
    python training/train_classifier.py train --recipe training/configs/imdb_finetune.yaml
    python training/train_classifier.py evaluate --recipe training/configs/imdb_finetune.yaml \
        --model runs/imdb-finetuned/model
"""

import sys

from vanilla_transformer.cli import main

if __name__ == "__main__":
    main(["classify", *sys.argv[1:]])
