"""Train any task (the recipe's ``task:``; none: translation): the same as ``vanilla-transformer train``, as a
plain script, for ``accelerate launch``.

python training/train_translation.py --recipe multi30k_de_en
accelerate launch --multi_gpu --num_processes 2 training/train_translation.py --recipe ...
"""

import sys

from vanilla_transformer.cli import main

if __name__ == "__main__":
    main(["train", *sys.argv[1:]])
