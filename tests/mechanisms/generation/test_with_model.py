"""The generation mechanisms on the bundled models (SmolLM2-135M-Instruct, MiniLM), kept tiny:
two or three prompts, a few tokens."""

from __future__ import annotations

import json

import numpy as np
import pytest

from app.mechanisms import clip_softmax as cs
from app.mechanisms.gen_common import GenerationRequest, PromptTemplate, build_prompt
from app.mechanisms.gen_decode import decode
from app.mechanisms.generation import generate

from ..conftest import CountingLM

MARK = "QX7"  # planted in every exemplar: must never come back in a result's privacy or internals
EXEMPLARS = [(f"{MARK} Ann meets Bo on {d}.", f"{MARK} Ann and Bo meet on {d}.") for d in
             ("Monday", "Tuesday", "Friday", "Sunday", "Monday", "Friday")]
TEMPLATE = PromptTemplate("Summarize.", "Text:", "Summary:")
QUERY = "Cy meets Di on Friday."


def _prompts(lm, k: int = 3) -> list[str]:
    return [build_prompt(lm, TEMPLATE, [EXEMPLARS[i]], QUERY) for i in range(k)]


def test_incremental_decoding_matches_reencoding(lm):
    """KV-cached steps give the logits (so the clip-softmax law) that re-encoding every step gives,
    within 1e-4, and the same released tokens."""
    prompts = _prompts(lm, 2)
    runs = {}
    for reencode in (False, True):
        seen: list[np.ndarray] = []
        rng = np.random.default_rng(3)

        def choose(z, seen=seen, rng=rng):
            seen.append(np.array(z, copy=True))
            return cs.sample_token(z, 2.0, 0.5, rng), {}

        out = decode(lm, prompts, choose, 2, reencode=reencode, stop_at_eos=False)
        runs[reencode] = (out.token_ids, seen)
    (tok_kv, z_kv), (tok_re, z_re) = runs[False], runs[True]
    assert tok_kv == tok_re and len(z_kv) == len(z_re) == 2
    for a, b in zip(z_kv, z_re):
        assert a.shape == (2, lm.vocab_size)
        assert np.max(np.abs(a - b)) < 1e-4
        assert np.max(np.abs(cs.step_log_probs(a, 2.0, 0.5) - cs.step_log_probs(b, 2.0, 0.5))) < 1e-4
    assert np.max(np.abs(z_kv[0][0] - z_kv[0][1])) > 1e-2  # the two prompts really differ


@pytest.mark.parametrize("mechanism, params", [
    ("esa", {"partitions": 2, "shots_per_partition": 1, "candidates": 2}),
    ("ksa", {"partitions": 2, "shots_per_partition": 1}),
    ("clip_softmax", {"prompts": 2}),
    ("poe", {"experts": 2}),
    ("mozo", {"experts": 2}),
    ("mozo", {"experts": 2, "group_size": 3, "lambda_mode": "per_expert"}),  # few-shot experts (issue 18)
    ("full_context", {"shots": 2}),
])
def test_mechanisms_end_to_end(lm, embedder, mechanism, params):
    private = mechanism != "full_context"
    req = GenerationRequest.build(EXEMPLARS, QUERY, epsilon=4.0 if private else None, delta=1e-5, max_tokens=2,
                                  template=TEMPLATE, params=params)
    res = generate(mechanism, req, lm, embedder, np.random.default_rng(1))
    assert isinstance(res.text, str) and res.tokens <= 2
    d = res.to_dict()
    blob = json.dumps({k: v for k, v in d.items() if k != "text"})
    assert MARK not in blob  # no exemplar text in privacy or internals
    if private:
        assert d["privacy"]["is_private"] and 0 < d["privacy"]["epsilon"] <= 4.0
    else:
        assert d["privacy"]["epsilon"] is None
    if mechanism == "mozo":  # disjoint experts of group_size exemplars each
        units = d["internals"]["experts"]
        assert [len(u) for u in units] == [params.get("group_size", 1)] * 2
        assert len({i for u in units for i in u}) == sum(len(u) for u in units)
    if mechanism == "esa":
        i = d["internals"]
        assert len(i["clean_mean"]) == len(i["noisy_mean"]) == 384 and len(i["candidate_distances"]) == 2
        assert res.text == i["candidates"][i["selected"]]


def test_private_steps_then_greedy_zero_shot_continuation(lm):
    """decode(private_steps=K): the chooser runs K times, the private session takes K - 1 steps and is
    closed before step K + 1, and the rest of the answer is the public row's greedy continuation: the
    same tokens as a run whose chooser takes the public argmax at every step (KV cache intact)."""
    prompts = _prompts(lm, 3)
    public = build_prompt(lm, TEMPLATE, [], QUERY)
    calls: list[int] = []

    def choose(z, pub):
        assert z.shape[0] == 3  # the private rows are really there while the chooser runs
        calls.append(1)
        return int(np.argmax(pub)), {"lambda": 0.0}

    spy = CountingLM(lm)
    k, n = 3, 10
    out = decode(spy, prompts, choose, n, public_prompt=public, private_steps=k, stop_at_eos=False)
    priv, pub = spy.sessions
    assert (priv.rows, pub.rows) == (3, 1)
    assert len(calls) == k and priv.steps == k - 1 and priv.closed
    assert pub.steps == n - 1 and len(out.token_ids) == n
    assert [("public" in s) for s in out.steps] == [False] * k + [True] * (n - k)
    ref = decode(lm, prompts, choose, n, public_prompt=public, stop_at_eos=False)
    assert out.token_ids == ref.token_ids
    with pytest.raises(ValueError):
        decode(lm, prompts, choose, n, private_steps=k)


def test_mozo_private_tokens_charges_k_steps_and_continues_publicly(lm, embedder):
    """mozo with private_tokens K < max_tokens: charged exactly as a K-token answer, at most K steps read
    the experts, the released text is the same whatever the exemplars once the first K tokens agree
    (here: K = 1 at a budget so small that lam ~ 0, so the private step is the public base's draw)."""
    from app.mechanisms.generation import get_generation_mechanism

    mech = get_generation_mechanism("mozo")
    base = dict(epsilon=2.0, delta=1e-5, template=TEMPLATE)
    req = GenerationRequest.build(EXEMPLARS, QUERY, max_tokens=8, params={"experts": 2, "private_tokens": 3}, **base)
    short = GenerationRequest.build(EXEMPLARS, QUERY, max_tokens=3, params={"experts": 2}, **base)
    c, s = mech.cost(req), mech.cost(short)
    assert c["epsilon"] == s["epsilon"] and c["rdp"] == s["rdp"] and c["params"]["compositions"] == 3
    assert c["params"]["public_continuation"] and s["params"]["public_continuation"] is None
    res = generate("mozo", req, lm, embedder, np.random.default_rng(4))
    i = res.to_dict()["internals"]
    assert i["private_steps"] <= 3 and i["private_steps"] + i["public_steps"] == len(i["steps"])
    assert res.tokens <= 8 and res.to_dict()["privacy"]["epsilon"] == c["epsilon"]
    # Two disjoint datasets, one seed: with eps_tok ~ 1e-6 (lam ~ 0) the one private step draws from the
    # public base alone, so the first token, hence the whole public continuation, is the same.
    tiny = dict(base, epsilon=1e-6)
    other = [(f"{MARK} Eve calls Fay on {d}.", f"{MARK} Eve phones Fay on {d}.") for d in ("May", "June")]
    texts = {generate("mozo", GenerationRequest.build(ex, QUERY, max_tokens=6, params={"experts": 2, "private_tokens": 1},
                                                      **tiny), lm, embedder, np.random.default_rng(9)).text
             for ex in (EXEMPLARS[:2], other)}
    assert len(texts) == 1
