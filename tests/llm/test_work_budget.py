"""One answer's model work is bounded in tokens (app.llm.tenancy.work_scope): every scoring call, a decode's
prompts and each decode step count against it, and the call that would pass it is refused before it runs.
A real (tiny, random-init) model with SmolLM2's tokenizer, scheduler on and off."""

from __future__ import annotations

import pytest
import torch

from app.llm.errors import WorkTooLarge
from app.llm.tenancy import spend_work, work_scope

from .conftest import model_folder


@pytest.fixture(scope="module", params=[True, False], ids=["scheduler", "no-scheduler"])
def tiny(lm, request):
    from app.llm.tiny import random_lm

    m = random_lm(model_folder(lm), tiny=True, dtype=torch.float32, seed=3,
                  options={"scheduler": {"enabled": request.param}})
    yield m
    m.close()


def test_the_scope_counts_and_refuses_the_call_that_would_pass_it():
    spend_work(10**9, "outside any scope")  # a no-op: no bound
    with work_scope(100):
        spend_work(60, "a")
        spend_work(40, "b")  # exactly the budget: allowed
        with pytest.raises(WorkTooLarge) as e:
            spend_work(1, "c")
        assert (e.value.tokens, e.value.limit) == (101, 100)
        assert str(e.value) == "this answer's model work would pass its budget of 100 tokens"  # no count
        assert e.value.what == "c"
    with work_scope(0):  # 0: no bound
        spend_work(10**9, "x")
    with work_scope(None):
        spend_work(10**9, "x")


def test_scoring_calls_count_their_rows_tokens_and_a_refused_call_computes_nothing(tiny):
    prompts = ["Classify: the match ended two to one.", "Classify: rain is expected tonight over the coast."]
    n = sum(len(r) for r in tiny._encode_prompts(prompts))
    calls = tiny.stats.forward_calls
    with work_scope(n):
        tiny.next_token_logprobs(prompts)  # exactly n tokens: runs
        ran = tiny.stats.forward_calls
        assert ran > calls
        with pytest.raises(WorkTooLarge) as e:
            tiny.next_token_logprobs(prompts[:1])  # the budget is spent
        assert tiny.stats.forward_calls == ran  # nothing of the refused call ran
        assert e.value.what == "1 prompt rows"  # the scoring call of the one prompt was refused
    with work_scope(n - 1), pytest.raises(WorkTooLarge):
        tiny.continuation_logprobs(prompts, [" sports", " weather"])


def test_decoding_counts_its_prompts_and_one_token_per_row_per_step(tiny):
    prompts = ["Summary: The meeting", "Summary: Two friends", "Summary: A customer"]
    n = sum(len(r) for r in tiny._encode_prompts(prompts))
    with work_scope(n + 3 * 2):  # the prompts and two steps of three rows
        s = tiny.start_decode(prompts)
        s.step(int(s.logits[0].argmax()))
        s.step(int(s.logits[0].argmax()))
        with pytest.raises(WorkTooLarge):
            s.step(int(s.logits[0].argmax()))  # a third step would pass the budget
        s.close()
    with work_scope(n - 1), pytest.raises(WorkTooLarge) as e:
        tiny.start_decode(prompts)
    assert (e.value.what, e.value.tokens, e.value.limit) == ("decoding 3 prompts", n, n - 1)
