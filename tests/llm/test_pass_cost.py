"""The CPU's cost of one more forward pass, derived from the weights (issue 27): what the chunk planner
weighs a batch's padding against (app/llm/budget.py ``cpu_pass_cost_tokens``, app/llm/chunking.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from app.llm.budget import cpu_pass_cost_tokens

from .conftest import model_folder


@pytest.fixture(scope="module")
def tiny32(lm):
    """The benchmark's shape (2 layers, hidden 64, SmolLM2's tokenizer and tied 49152 x 64 embedding), float32."""
    from app.llm.tiny import random_lm

    return random_lm(model_folder(lm), tiny=True, dtype=torch.float32, seed=3)


def test_smollm2_keeps_its_measured_cost(lm):
    # 48 ms per pass / 3 ms per token on one thread (docs/models.md): the constant it had before.
    assert cpu_pass_cost_tokens(lm.model) == 16
    assert lm.pass_cost_tokens == 16


def test_a_tiny_model_is_pass_bound(tiny32):
    # Its weights are almost all the LM head's embedding (read once a pass); its body is 74k weights.
    assert 400 <= cpu_pass_cost_tokens(tiny32.model) <= 800
    assert tiny32.pass_cost_tokens == cpu_pass_cost_tokens(tiny32.model)


def test_an_explicit_option_wins(lm):
    from app.llm.hf import HFLanguageModel

    spec = type(lm.spec)(name="x", kind="lm", source="x", options={"pass_cost_tokens": 3,
                                                                   "scheduler": {"enabled": False}})
    other = HFLanguageModel(spec, lm.model, lm.tokenizer, device="cpu", dtype=torch.float32)
    assert other.pass_cost_tokens == 3


def _rnm_prompts(lm, parts: int = 8, shots: int = 4, seed: int = 0) -> tuple[list[str], list[str]]:
    """An rnm 8 x 4 answer's partition prompts (the bundled task, its chat template) and label continuations."""
    from app.icl import load_bundled
    from app.icl.scoring import ICLPrompt, _render

    task = load_bundled("assistant_intents")
    ex = list(task.exemplars("train"))
    perm = np.random.default_rng(seed).permutation(len(ex))
    q = task.test[seed].input
    prompts = [_render(lm, task.template, ICLPrompt.of([ex[j] for j in perm[i * shots:(i + 1) * shots]], q),
                       list(task.labels)) for i in range(parts)]
    return prompts, list(task.template.continuations(list(task.labels)))


def test_tiny_rnm_answer_takes_one_pass_with_the_same_scores(tiny32):
    """Rows of different lengths: one padded pass (the derived cost) instead of two chunks (the old 16 tokens);
    the same label log-probabilities within float32 rounding."""
    prompts, conts = _rnm_prompts(tiny32)
    assert len({len(tiny32.tokenize(p)) for p in prompts}) > 1  # padding to weigh
    old = tiny32.pass_cost_tokens
    try:
        tiny32.clear_prefix_cache()
        tiny32.continuation_logprobs(prompts, conts)  # the header into the prefix LRU
        tiny32.stats.reset()
        one = tiny32.continuation_logprobs(prompts, conts)
        assert tiny32.stats.forward_calls == 1
        tiny32.pass_cost_tokens = 16
        tiny32.stats.reset()
        two = tiny32.continuation_logprobs(prompts, conts)
        assert tiny32.stats.forward_calls == 2
    finally:
        tiny32.pass_cost_tokens = old
        tiny32.clear_prefix_cache()
    np.testing.assert_allclose(one, two, rtol=0, atol=2e-5)
    assert np.isfinite(one).all() and one.shape == (8, len(conts))



def test_the_merge_rule_follows_the_pass_cost(lm, tiny32):
    """A CPU scoring job of more than 32 passes' worth of tokens runs alone: 512 for SmolLM2 (as measured,
    docs/models.md), ~17k for the tiny model, so its concurrent rnm 8 x 4 answers (~900 tokens) merge."""
    assert lm.scheduler.opts.merge_job_tokens == 512
    assert tiny32.scheduler.opts.merge_job_tokens == 32 * tiny32.pass_cost_tokens > 8 * 1000
