"""The pre-softmax projection and the label-smoothed loss fused, a few hundred rows at a time.

Training computes §3.4's pre-softmax linear transformation (``lm_head``, tied to the embeddings) and §5.4's
label-smoothed cross-entropy over every target token. Done as written, that materialises the (N, V)
logits, their log-softmax, the two loss gradients and their sum: four or five tensors of N x V floats
(a Multi30k batch of 2,048 target tokens at V = 8,000 makes each 65 MB), each written and read once
more than the arithmetic needs. On a CPU every such tensor is a fresh allocation above glibc's mmap
threshold, so the kernel zeroes it page by page (docs/results.md, "The fused projection and loss",
measures what that costs the Multi30k recipe).

``fused_output_loss`` takes the final states instead of the logits. Over chunks of rows it
computes the chunk's logits z = h W^T and its loss with the log-sum-exp ``lse`` (one exponential per
logit, in place)

    loss_i = lse_i - (1 - eps) z_{i,y_i} - (eps / V) sum_j z_ij      (= §5.4's smoothed cross-entropy)

and in the same pass that loss's gradient with respect to the logits, softmax(z) - ((1 - eps) one_hot(y)
+ eps / V), which it turns at once into the chunk's gradients for h (g W) and W (g^T h). The logits never
exist beyond one chunk (a few MB, reused); rows whose label is ignored (-100: padding) are dropped before
any product. Forward and backward do the same three matrix products as the unfused path; the backward
pass hands the stored gradients over (scaled, when the incoming gradient is not 1). The loss and
gradients equal the unfused path's to float rounding (``tests/test_fused_output_loss.py``).

``use_fused_output_loss(model, device)`` installs it on a model the trainers train on a CPU, where it was
measured (not yet on GPUs): translation. The causal-LM and masked-LM heads take it too (the latter's
projection has a bias, and no label smoothing), but masked-LM pre-training does not install it: at the
IMDB recipe's 2,400 masked rows x 16,000 ids per step it measured no clear gain (docs/results.md).
The model file calls it in training mode when labels are given, and
returns no logits from such a forward. Nothing is saved: a loaded model computes logits and loss as
written. Evaluation (``model.eval()``) always takes the unfused path.
"""

from __future__ import annotations

import torch
from torch import nn

CHUNK_ELEMENTS = 2**21  # logits per chunk (8 MB in float32): 262 rows at V = 8,000


def chunk_rows_for(vocab_size: int) -> int:
    """Rows per chunk: about ``CHUNK_ELEMENTS`` logits, at least 64 rows (smaller products run slower)."""
    return max(64, CHUNK_ELEMENTS // vocab_size)


class _FusedOutputLoss(torch.autograd.Function):
    """Summed label-smoothed loss of ``hidden @ weight.T (+ bias)`` against ``labels`` (no ignored rows),
    divided by ``divisor``; the gradients of that loss for ``hidden`` and ``weight`` are computed in the forward
    pass, already divided, so that the backward pass returns them as they are for the usual incoming 1.
    ``bias`` may be None (the translation and causal heads have none)."""

    @staticmethod
    def forward(
        ctx, hidden, weight, bias, labels, epsilon, divisor, chunk_rows, compute_dtype, with_gradients
    ):
        vocab = weight.shape[0]
        weight_c = weight.to(compute_dtype)
        bias_c = bias.to(compute_dtype) if bias is not None else None
        grad_hidden = torch.empty_like(hidden)
        grad_weight = grad_bias = None
        total = torch.zeros((), dtype=torch.float32, device=hidden.device)
        for start in range(0, hidden.shape[0], chunk_rows):
            rows = slice(start, start + chunk_rows)
            h = hidden[rows].to(compute_dtype)
            y = labels[rows].unsqueeze(1)
            z = h @ weight_c.t() if bias is None else torch.addmm(bias_c, h, weight_c.t())
            z = z.float()  # (c, V) logits
            total -= (1 - epsilon) * z.gather(1, y).sum() + (epsilon / vocab) * z.sum()
            # log-sum-exp with one exponential, in place: z becomes exp(z - max), then softmax(z)
            peak = z.amax(dim=1, keepdim=True)
            sums = z.sub_(peak).exp_().sum(dim=1, keepdim=True)
            total += (peak + sums.log()).sum()
            if not with_gradients:
                continue
            # d loss / d z = (softmax(z) - (1 - eps) one_hot(y) - eps / V) / divisor, in place
            z.mul_(sums.reciprocal_().div_(divisor)).sub_(epsilon / vocab / divisor)
            z.scatter_add_(1, y, z.new_full(y.shape, -(1 - epsilon) / divisor))
            g = z.to(compute_dtype)
            grad_hidden[rows] = g @ weight_c
            if grad_weight is None:
                grad_weight = (g.t() @ h).float()  # (V, D), accumulated in float32
            elif compute_dtype == torch.float32:
                grad_weight.addmm_(g.t(), h)
            else:
                grad_weight += g.t() @ h
            if bias is not None:
                grad_bias = z.sum(0) if grad_bias is None else grad_bias.add_(z.sum(0))
        if with_gradients:
            grad_weight = grad_weight if grad_weight is not None else torch.zeros_like(weight)
            grad_bias = grad_bias if grad_bias is not None or bias is None else torch.zeros_like(bias)
            ctx.has_bias = bias is not None
            saved = [grad_hidden, grad_weight.to(weight.dtype)]
            ctx.save_for_backward(*saved, *([grad_bias.to(bias.dtype)] if bias is not None else []))
        return total / divisor

    @staticmethod
    def backward(ctx, grad_output):
        grads = list(ctx.saved_tensors)  # hidden, weight[, bias]
        if not bool(grad_output == 1):  # a scaled loss (gradient accumulation, loss scaling)
            grads = [grad * grad_output.to(grad.dtype) for grad in grads]
        grad_bias = grads[2] if ctx.has_bias else None
        return grads[0], grads[1], grad_bias, *[None] * 6


def fused_output_loss(
    hidden_states: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    epsilon: float,
    num_items_in_batch: int | torch.Tensor | None = None,
    chunk_rows: int | None = None,
    bias: torch.Tensor | None = None,
) -> torch.Tensor:
    """``label_smoothed_nll_loss(F.linear(hidden_states, weight, bias), labels, epsilon,
    num_items_in_batch)`` without the logits: ``hidden_states`` (..., D) final states, ``weight`` (V, D)
    and ``bias`` (V) or None the output projection, ``labels`` (...) target ids with -100 ignored. The mean
    over non-ignored tokens, or their sum divided by ``num_items_in_batch`` (the Trainer's count across
    accumulated batches). Under autocast the products run in the autocast dtype and the softmax in
    float32, as the unfused path's."""
    if hidden_states.shape[:-1] != labels.shape:
        raise ValueError(
            f"`labels` shape {tuple(labels.shape)} does not match the states {tuple(hidden_states.shape[:-1])}."
        )
    if hidden_states.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"The output projection's weight {tuple(weight.shape)} does not take states of width "
            f"{hidden_states.shape[-1]}."
        )
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    flat_labels = labels.reshape(-1).to(hidden.device)
    kept = flat_labels != -100
    if not bool(kept.all()):
        hidden, flat_labels = hidden[kept], flat_labels[kept]
    divisor = float(num_items_in_batch) if num_items_in_batch is not None else flat_labels.numel()
    device_type = hidden.device.type
    autocast = torch.is_autocast_enabled(device_type)
    compute_dtype = torch.get_autocast_dtype(device_type) if autocast else hidden.dtype
    rows = chunk_rows or chunk_rows_for(weight.shape[0])
    with torch.autocast(device_type, enabled=False):
        parameters = (hidden, weight) if bias is None else (hidden, weight, bias)
        with_gradients = torch.is_grad_enabled() and any(tensor.requires_grad for tensor in parameters)
        return _FusedOutputLoss.apply(
            hidden, weight, bias, flat_labels, float(epsilon), divisor, rows, compute_dtype, with_gradients
        )


def use_fused_output_loss(model: nn.Module, device: torch.device | str) -> bool:
    """Have ``model`` compute its training loss with ``fused_output_loss`` when ``device`` is a CPU;
    returns whether it did. The heads over the vocabulary take it (``...ForConditionalGeneration``,
    ``...ForCausalLM``, ``...ForMaskedLM``) and then return no logits while training. Training-time only:
    the attribute is not saved."""
    if torch.device(device).type != "cpu":
        return False
    model.output_loss_kernel = fused_output_loss
    return True


__all__ = ["chunk_rows_for", "fused_output_loss", "use_fused_output_loss"]
