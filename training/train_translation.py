"""Train a translation model: the same as ``vanilla-transformer train``, as a plain script.

python training/train_translation.py --recipe training/configs/multi30k_de_en.yaml
accelerate launch --multi_gpu --num_processes 2 training/train_translation.py --recipe ...
"""

import sys

from vanilla_transformer.cli import main

if __name__ == "__main__":
    main(["train", *sys.argv[1:]])
