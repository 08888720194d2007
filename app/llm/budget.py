"""Token budgets per forward pass, derived from the device (issue 27).

On a CPU a pass costs its tokens and the budgets stay what they were measured to be
(model 8192 row-tokens per pass, scheduler 4096 prompt tokens per coalesced batch). On a
GPU a small model's pass is launch-bound: a budget of 4096 cut 16 concurrent ``rnm`` 8 x 4
answers (8 rows x ~120 tokens each) into 3 passes of <= 14 prompts. There the budget is
what fits in a fraction of the memory free at start-up, at an estimated cost per token of
one cache-free pass (keys/values of every layer, plus one layer's activations and
attention scores), clamped to [8192, 131072]: 64 such answers (~62k tokens) then merge
into one or two passes. An explicit ``max_batch_tokens`` (model) or
``scheduler.max_batch_tokens`` always wins.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

CPU_MODEL_TOKENS = 8192
CPU_SCHEDULER_TOKENS = 4096
GPU_MIN_TOKENS = 8192
GPU_MAX_TOKENS = 131072
MEMORY_FRACTION = 0.25  # of the memory free at start-up, for one pass's transient tensors
ASSUMED_LENGTH = 512  # sequence length behind the attention-score term of the estimate


def bytes_per_token(config: Any, dtype: torch.dtype) -> int:
    """Estimated bytes one token of a cache-free batched pass needs at its peak."""
    cfg = config.get_text_config() if hasattr(config, "get_text_config") else config
    hidden = int(getattr(cfg, "hidden_size", 1024))
    layers = int(getattr(cfg, "num_hidden_layers", 24))
    heads = int(getattr(cfg, "num_attention_heads", 16))
    kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(cfg, "head_dim", None) or hidden // heads)
    inter = int(getattr(cfg, "intermediate_size", 4 * hidden))
    size = torch.finfo(dtype).bits // 8 if dtype.is_floating_point else 4
    kv = 2 * layers * kv_heads * head_dim * size  # keys and values of every layer
    act = (4 * hidden + 3 * inter) * size  # residual, norm, q/k/v/o, and the MLP's gate/up/down
    scores = heads * ASSUMED_LENGTH * 4  # attention probabilities (math kernel, float32)
    return kv + act + scores


CPU_MERGE_STEP_TOKENS = 3072

# What one more forward pass costs on a CPU, in tokens (HFLanguageModel.pass_cost_tokens, plan_chunks): a
# pass reads every weight once (memory-bound, fixed) and each token costs ~2 multiply-adds per weight of the
# decoder body (compute-bound; the LM head runs on the scored positions only). Calibrated on SmolLM2-135M
# with one thread (~48 ms per pass, ~3 ms per further token: 16 tokens at 2.53 weight bytes per body FLOP,
# so ~6.3 FLOP per byte); the 2-layer benchmark model (benchmarks/tiny_model.py: 13 MB of weights, almost
# all its tied 49152 x 64 embedding, 74k body weights) gets ~550, i.e. one pass for an rnm 8 x 4 answer's rows.
CPU_FLOP_PER_BYTE = 6.3


def cpu_pass_cost_tokens(model: Any) -> int:
    """The default ``pass_cost_tokens`` of ``model`` on a CPU: a pass's fixed cost over one token's (above)."""
    params = list(model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in params)
    heads = {id(m.weight) for m in (model.get_input_embeddings(), model.get_output_embeddings())
             if m is not None and getattr(m, "weight", None) is not None}
    body = sum(p.numel() for p in params if id(p) not in heads)
    if body <= 0:
        return 0
    return max(0, int(round(weight_bytes / (2 * body) * CPU_FLOP_PER_BYTE)))


@dataclass(frozen=True)
class TokenBudgets:
    model: int  # HFLanguageModel.max_batch_tokens: rows x length per forward pass
    scheduler: int  # SchedulerOptions.max_batch_tokens: prompt tokens per coalesced batch
    merge_step: int  # HFLanguageModel.merge_step_tokens: KV row-tokens a merged decode step may copy per pass saved


def device_token_budgets(device: torch.device, config: Any, dtype: torch.dtype,
                         free_bytes: int | None = None) -> TokenBudgets:
    """The default token budgets for a model on ``device`` (module doc).

    ``free_bytes``: the device memory free (default: asked of CUDA); ignored on a CPU.
    """
    if device.type != "cuda":
        return TokenBudgets(CPU_MODEL_TOKENS, CPU_SCHEDULER_TOKENS, CPU_MERGE_STEP_TOKENS)
    if free_bytes is None:
        free_bytes, _ = torch.cuda.mem_get_info(device)
    tokens = int(free_bytes * MEMORY_FRACTION) // max(1, bytes_per_token(config, dtype))
    tokens = max(GPU_MIN_TOKENS, min(GPU_MAX_TOKENS, tokens // 1024 * 1024))
    # The scheduler counts prompt tokens; the fast path and the one-pass scoring run one row per
    # prompt (plus the labels' few tokens), so one coalesced batch is one pass of the model's budget.
    # A merged decode step's cache copy is a memory-bound kernel that costs microseconds on a GPU
    # while the pass it saves costs milliseconds of launches: scale the CPU-measured allowance.
    return TokenBudgets(tokens, tokens, CPU_MERGE_STEP_TOKENS * tokens // CPU_MODEL_TOKENS)
