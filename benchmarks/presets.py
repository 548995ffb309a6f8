"""The two model sizes every system is built at, and the fixed workload of each measurement.

A preset is a dict of ``VanillaTransformerConfig`` fields (the names a recipe's ``model:`` block uses);
the other systems translate them into their own configs (``systems.py``).
"""

PRESETS = {
    "small": {
        "d_model": 256,
        "num_heads": 4,
        "d_ff": 1024,
        "num_encoder_layers": 3,
        "num_decoder_layers": 3,
        "vocab_size": 8000,
    },
    "base": {  # Table 3 base
        "d_model": 512,
        "num_heads": 8,
        "d_ff": 2048,
        "num_encoder_layers": 6,
        "num_decoder_layers": 6,
        "vocab_size": 16000,
    },
}
TRAIN_BATCH, SOURCE_LENGTH, TARGET_LENGTH = 32, 24, 24  # sentences x (source + target) tokens
NEW_TOKENS = 32  # generated per sentence, EOS suppressed so that every system does the same work
LABEL_SMOOTHING = 0.1  # §5.4
DROPOUT = 0.1


def training_flops(
    preset: dict,
    batch: int = TRAIN_BATCH,
    source_length: int = SOURCE_LENGTH,
    target_length: int = TARGET_LENGTH,
) -> float:
    """Matmul FLOPs of one training step (forward x 3) at the fixed workload (or at ``batch`` sentences of
    ``source_length`` + ``target_length`` tokens): projections, attention scores and sums (full T x T for
    the causal decoder), feed-forward and the output projection."""
    d, f, vocab = preset["d_model"], preset["d_ff"], preset["vocab_size"]
    n_enc, n_dec = preset["num_encoder_layers"], preset["num_decoder_layers"]
    b, s, t = batch, source_length, target_length
    encoder = b * s * n_enc * (8 * d * d + 4 * d * f + 4 * s * d)
    decoder = b * t * n_dec * (12 * d * d + 4 * d * f + 4 * t * d + 4 * s * d) + b * s * n_dec * 4 * d * d
    projection = b * t * 2 * d * vocab
    return 3.0 * (encoder + decoder + projection)
