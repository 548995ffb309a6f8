"""The encoder alone as a text classifier, by stage: arguments, data, pre-training (masked LM or ELECTRA),
fine-tuning and evaluation, each with ``transformers.Trainer``."""
