"""The encoder as a text classifier: the same as ``vanilla-transformer classify``, as a plain script.

    python training/train_classifier.py pretrain --recipe imdb_pretrain
    python training/train_classifier.py train --recipe imdb_finetune
    python training/train_classifier.py evaluate --recipe training/configs/imdb_finetune.yaml \
        --model runs/imdb-finetuned/model
"""

import sys

from vanilla_transformer.cli import main

if __name__ == "__main__":
    main(["classify", *sys.argv[1:]])
