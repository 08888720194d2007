"""Token budgets per pass derived from the device (app/llm/budget.py)."""

from __future__ import annotations

import torch
from transformers import LlamaConfig

from app.llm.budget import GPU_MAX_TOKENS, GPU_MIN_TOKENS, bytes_per_token, device_token_budgets
from app.llm.scheduler import BatchScheduler, SchedulerOptions

SMOLLM2 = LlamaConfig(hidden_size=576, num_hidden_layers=30, num_attention_heads=9, num_key_value_heads=3,
                      head_dim=64, intermediate_size=1536, vocab_size=49152)


def test_cpu_budgets_are_unchanged(lm):
    b = device_token_budgets(torch.device("cpu"), SMOLLM2, torch.float32, free_bytes=1 << 40)
    assert (b.model, b.scheduler, b.merge_step) == (8192, 4096, 3072)
    assert lm.max_batch_tokens == 8192 and lm.scheduler.max_batch_tokens == 4096 and lm.merge_step_tokens == 3072


def test_cuda_budgets_follow_free_memory():
    cuda = torch.device("cuda")
    per = bytes_per_token(SMOLLM2, torch.bfloat16)
    # KV of 30 layers x 3 heads x 64 (bf16) alone is 23 KB a token; the estimate covers more.
    assert 2 * 30 * 3 * 64 * 2 < per < 200_000
    h100 = device_token_budgets(cuda, SMOLLM2, torch.bfloat16, free_bytes=78 << 30)
    assert h100.model == h100.scheduler == GPU_MAX_TOKENS  # 64 answers of 8 x ~120 tokens: one or two passes
    assert h100.merge_step == 3072 * GPU_MAX_TOKENS // 8192
    small = device_token_budgets(cuda, SMOLLM2, torch.bfloat16, free_bytes=1 << 30)
    assert small.model == max(GPU_MIN_TOKENS, int((1 << 30) * 0.25) // per // 1024 * 1024)
    assert device_token_budgets(cuda, SMOLLM2, torch.bfloat16, free_bytes=1 << 20).model == GPU_MIN_TOKENS
    mid = device_token_budgets(cuda, SMOLLM2, torch.bfloat16, free_bytes=4 << 30)
    assert GPU_MIN_TOKENS < mid.model < GPU_MAX_TOKENS and mid.model % 1024 == 0


def test_scheduler_budget_default_and_override():
    assert SchedulerOptions.from_options({}).max_batch_tokens is None  # the model decides
    s = BatchScheduler("x", lambda k, r: r, SchedulerOptions())
    assert s.max_batch_tokens == 4096  # a model that does not decide (the embedder)
    s = BatchScheduler("x", lambda k, r: r, SchedulerOptions.from_options({"scheduler": {"max_batch_tokens": 99}}))
    assert s.max_batch_tokens == 99
    for sched in (s,):
        sched.close()
