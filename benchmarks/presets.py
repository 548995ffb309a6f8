"""The two model sizes every system is built at, and the fixed workload of each measurement."""

PRESETS = {
    "small": {"d_model": 256, "layers": 3, "heads": 4, "d_ff": 1024, "vocab": 8000},
    "base": {"d_model": 512, "layers": 6, "heads": 8, "d_ff": 2048, "vocab": 16000},  # Table 3 base
}
TRAIN_BATCH, SOURCE_LENGTH, TARGET_LENGTH = 32, 24, 24  # sentences x (source + target) tokens
NEW_TOKENS = 32  # generated per sentence, EOS suppressed so that every system does the same work
LABEL_SMOOTHING = 0.1  # §5.4
DROPOUT = 0.1


def training_flops(preset: dict) -> float:
    """Matmul FLOPs of one training step (forward x 3) at the fixed workload: projections, attention
    scores and sums (full T x T for the causal decoder), feed-forward and the output projection."""
    d, f, layers, vocab = preset["d_model"], preset["d_ff"], preset["layers"], preset["vocab"]
    b, s, t = TRAIN_BATCH, SOURCE_LENGTH, TARGET_LENGTH
    encoder = b * s * layers * (8 * d * d + 4 * d * f + 4 * s * d)
    decoder = b * t * layers * (12 * d * d + 4 * d * f + 4 * t * d + 4 * s * d) + b * s * layers * 4 * d * d
    projection = b * t * 2 * d * vocab
    return 3.0 * (encoder + decoder + projection)
