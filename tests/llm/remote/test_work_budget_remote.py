"""A remote model's work counts against an answer's token budget (tenancy.work_scope), as the hf backend's does,
and the call that would pass it is refused before any completion request reaches the server.

No vLLM here: the fake server (one token per character) counts the requests, so these are tests of the
arithmetic (what is counted == the tokens the server was sent) and of the order (refused before sending).
Before: the remote backend never called spend_work, and an answer's budget was None for a remote model.
"""

from __future__ import annotations

import pytest

from app.llm.errors import WorkTooLarge
from app.llm.tenancy import _WORK, work_scope

from .test_client import remote


@pytest.fixture
def toy(server):
    lm = remote(server.url)
    server.requests.clear()  # the capability probes at load
    yield lm
    lm.close()


def _submitted(server) -> int:
    return sum(len(b["prompt"]) for b in server.bodies("/v1/completions"))


def _spent(call) -> int:
    with work_scope(10**9):
        call()
        budget = _WORK.get()
        assert budget is not None
        return budget.spent


PROMPTS = ["The match was close until the end: ", "Rain all day again, said the forecast: "]


def test_scoring_counts_every_token_it_sends(server, toy):
    spent = _spent(lambda: toy.next_token_logprobs(PROMPTS))
    assert spent == _submitted(server) >= sum(map(len, PROMPTS))  # one token per character (+ a BOS if any)
    server.requests.clear()
    spent = _spent(lambda: toy.continuation_logprobs(PROMPTS, ["a", "bc", "bd", "xyz"]))
    assert spent == _submitted(server) > 0


def test_generation_counts_prompt_and_max_tokens_per_row(server, toy):
    spent = _spent(lambda: toy.generate(PROMPTS, max_new_tokens=7))
    bodies = server.bodies("/v1/completions")
    assert len(bodies) == 2 and all(b["max_tokens"] == 7 for b in bodies)
    assert spent == _submitted(server) + 2 * 7


def test_decoding_counts_prompts_then_one_per_row_per_step(server, toy):
    def run():
        with toy.start_decode(PROMPTS) as s:
            s.step([1, 2])
            s.step([3, 4])
    rows = [len(r) for r in [toy.tokenize(p) for p in PROMPTS]]
    assert _spent(run) == sum(rows) + 2 * 2


@pytest.mark.parametrize("call", ["next", "cont", "gen", "decode"])
def test_over_the_budget_nothing_is_sent(server, toy, call):
    long = ["Will it rain tomorrow? " * 9] * 4  # 4 x 208 tokens (the toy's context is 256)
    run = {"next": lambda: toy.next_token_logprobs(long),
           "cont": lambda: toy.continuation_logprobs(long, ["a", "b"]),
           "gen": lambda: toy.generate(long, max_new_tokens=4),
           "decode": lambda: toy.start_decode(long)}[call]
    with work_scope(500), pytest.raises(WorkTooLarge) as e:
        run()
    assert e.value.limit == 500 and e.value.tokens > 800
    assert server.bodies("/v1/completions") == []  # tokenized (cheap), never scored or generated
    with work_scope(10_000):
        out = run()
    if call == "decode":
        out.close()
    assert server.bodies("/v1/completions")


def test_the_default_answer_budget_is_twice_the_declared_batch(server):
    from app.answers.flow import answer_token_budget

    lm = remote(server.url)
    try:
        assert answer_token_budget(None, lm) == 2 * 8192  # before: None, no bound at all
        assert answer_token_budget(100, lm) == 100
    finally:
        lm.close()
    lm = remote(server.url, max_batch_tokens=1000)
    try:
        assert answer_token_budget(None, lm) == 2000
    finally:
        lm.close()
