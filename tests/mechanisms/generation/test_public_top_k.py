"""``params.public_top_k``: clip_softmax / poe decoding over the zero-shot (public) top-k.

* the candidate set is the public row's top-k (+ EOS) and nothing else: changing the
  private rows (the exemplars) never changes it, given the same released prefix;
* the restricted step puts zero mass outside the set (exactly, and when sampled);
* the privacy cost is the same for every k (the accounting takes no vocabulary size);
* on the bundled model, the set each step equals the top-k of the zero-shot prompt +
  released tokens decoded alone, and is the same with two different exemplar sets.

The exact per-token e^eps / Renyi checks restricted to a set are in
``test_guarantees_sampled.py``.
"""

from __future__ import annotations

import numpy as np
import pytest

from app.mechanisms import clip_softmax as cs
from app.mechanisms import poe_decode
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.gen_common import GenerationRequest, PromptTemplate, build_prompt
from app.mechanisms.gen_decode import ReencodeSession, decode, eos_ids, public_candidates

EXEMPLARS = [(f"Ann meets Bo on {d}.", f"Ann and Bo meet on {d}.") for d in ("Monday", "Tuesday", "Friday", "Sunday")]
OTHER = [("A very different and much longer private exemplar about the harbour, the ferry and "
          "the weather on a rainy Thursday evening.", "Ferry late.")] * 4
TEMPLATE = PromptTemplate("Summarize.", "Text:", "Summary:")
QUERY = "Cy meets Di on Friday."


# ---------------------------------------------------------------------------
# Pure parts
# ---------------------------------------------------------------------------


def test_public_candidates_is_the_top_k_plus_eos_with_ties_to_the_lower_id():
    z = np.array([0.0, 5.0, 3.0, 5.0, -1.0, 4.0])
    assert public_candidates(z, 2, ()).tolist() == [1, 3]
    assert public_candidates(z, 3, [4]).tolist() == [1, 3, 4, 5]
    assert public_candidates(z, 1, [1]).tolist() == [1]  # EOS already in: no duplicate
    assert public_candidates(np.zeros(4), 2, ()).tolist() == [0, 1]  # ties -> lower ids
    assert public_candidates(z, 100, ()).tolist() == list(range(6))  # k >= V: the vocabulary
    rng = np.random.default_rng(0)
    for _ in range(50):
        v = rng.normal(size=300)
        k = int(rng.integers(1, 50))
        assert set(public_candidates(v, k, [7]).tolist()) == set(np.argsort(-v)[:k].tolist()) | {7}


@pytest.mark.parametrize("mod, clip, temp", [(cs, 2.0, 0.7), (poe_decode, 4.0, 0.3)])
def test_restricted_step_has_no_mass_outside_and_the_set_ignores_private_rows(mod, clip, temp):
    rng = np.random.default_rng(1)
    v, k = 200, 10
    public = rng.normal(size=v)
    eos = frozenset({v - 1})
    cand = public_candidates(public, k, sorted(eos))
    for trial in range(5):
        # The private rows put the top of their mass *outside* the set: still no mass there.
        z = rng.normal(0, 3, size=(4, v))
        z[:, np.setdiff1d(np.arange(v), cand)[:5]] += 50.0
        lp = mod.step_log_probs(z, clip, temp, cand)
        outside = np.setdiff1d(np.arange(v), cand)
        assert np.all(np.isneginf(lp[outside]))
        assert np.exp(lp[cand]).sum() == pytest.approx(1.0)
        # Restricted law = the full law conditioned on the set (same scores, smaller range).
        full = mod.step_log_probs(z, clip, temp)
        cond = full[cand] - np.log(np.exp(full[cand]).sum())
        assert np.allclose(lp[cand], cond, atol=1e-9)
        draws = mod.sample_token(z, clip, temp, np.random.default_rng(trial), size=20_000, candidates=cand)
        assert set(np.unique(draws).tolist()) <= set(cand.tolist())

    # The chooser: the set is computed from the public row only; changing every private row
    # (a different exemplar set) with the same public row gives the same set.
    seen = []
    import app.mechanisms.clip_softmax as csm

    real = csm.public_candidates

    def spy(public_logits, kk, always):
        out = real(public_logits, kk, always)
        seen.append(out.copy())
        return out

    csm.public_candidates = spy
    try:
        choose = csm.private_chooser(lambda zz: mod.step_scores(zz, clip, temp), np.random.default_rng(5), k, eos)
        for _ in range(10):
            tok, info = choose(rng.normal(0, 5, size=(4, v)), public)
            assert tok in set(cand.tolist()) and info["candidates"] == cand.size
    finally:
        csm.public_candidates = real
    assert len(seen) == 10 and all(np.array_equal(s, cand) for s in seen)


def _req(mech_params: dict, **kw) -> GenerationRequest:
    return GenerationRequest.build(EXEMPLARS, QUERY, epsilon=kw.get("epsilon", 4.0), delta=kw.get("delta", 1e-5),
                                   max_tokens=kw.get("max_tokens", 8), template=TEMPLATE, params=mech_params)


@pytest.mark.parametrize("delta", [1e-5, 0.0])
def test_privacy_cost_is_the_same_for_every_k(delta):
    for mod, base in ((cs, {"prompts": 4}), (poe_decode, {"experts": 4})):
        costs = []
        assert mod.DEFAULT_PUBLIC_TOP_K == 20
        for k in (None, 0, 1, 20, 100, 49152):
            p = dict(base) if k is None else {**base, "public_top_k": k}
            req = _req(p, delta=delta)
            cfg = mod.configure(req)
            assert cfg.public_top_k == (mod.DEFAULT_PUBLIC_TOP_K if k is None else (k or None))
            costs.append(mod.privacy(cfg, req))
        assert all(c == costs[0] for c in costs[1:])
        assert costs[0]["epsilon"] <= 4.0 * (1 + 1e-9)


@pytest.mark.parametrize("bad", [-1, 1.5, "20", True, 1 << 21, [20]])
@pytest.mark.parametrize("mod, base", [(cs, {"prompts": 4}), (poe_decode, {"experts": 4})])
def test_bad_public_top_k_is_refused_naming_the_field(mod, base, bad):
    with pytest.raises(MechanismParamError) as e:
        mod.configure(_req({**base, "public_top_k": bad}))
    assert e.value.param == "params.public_top_k"


# ---------------------------------------------------------------------------
# On the bundled model
# ---------------------------------------------------------------------------


def _public_sets(lm, exemplars, tokens, k):
    """Decode 4 one-shot prompts + the zero-shot row, releasing the fixed ``tokens``; return
    the candidate set of every step."""
    prompts = [build_prompt(lm, TEMPLATE, [e], QUERY) for e in exemplars]
    public = build_prompt(lm, TEMPLATE, [], QUERY)
    eos = sorted(eos_ids(lm))
    sets = []
    it = iter(tokens)

    def choose(z, pub):
        assert z.shape[0] == len(prompts) and pub.ndim == 1
        sets.append(public_candidates(pub, k, eos))
        return next(it), {}

    decode(lm, prompts, choose, len(tokens), stop_at_eos=False, public_prompt=public)
    return sets


def test_candidate_set_is_the_zero_shot_top_k_and_never_reads_exemplars(lm):
    k = 20
    public = build_prompt(lm, TEMPLATE, [], QUERY)
    # A fixed released prefix (public text, tokenised), the same for both exemplar sets.
    tokens = list(lm.tokenize(" Cy and Di meet"))[:4]
    a = _public_sets(lm, EXEMPLARS, tokens, k)
    b = _public_sets(lm, OTHER, tokens, k)
    assert len(a) == len(b) == len(tokens)
    for sa, sb in zip(a, b):
        assert np.array_equal(sa, sb)
    # ... and equal to the top-k of the zero-shot prompt + released tokens decoded on its own.
    ref = ReencodeSession(lm, [public])
    eos = sorted(eos_ids(lm))
    for i, sa in enumerate(a):
        assert np.array_equal(sa, public_candidates(ref.logits[0], k, eos))
        if i < len(tokens) - 1:
            ref.step(tokens[i])
    ref.close()


@pytest.mark.parametrize("mechanism, params", [("clip_softmax", {"prompts": 3}), ("poe", {"experts": 3})])
def test_end_to_end_internals_and_unchanged_cost(lm, mechanism, params):
    from app.mechanisms.generation import generate

    base = _req({**params, "public_top_k": 0}, max_tokens=3)
    top = _req({**params, "public_top_k": 5}, max_tokens=3)
    r0 = generate(mechanism, base, lm, None, np.random.default_rng(3))
    r1 = generate(mechanism, top, lm, None, np.random.default_rng(3))
    assert r0.internals["public_top_k"] is None and r0.internals["candidate_set"] == "vocabulary"
    assert r1.internals["public_top_k"] == 5 and r1.internals["candidate_set"].startswith("public")
    assert r1.privacy == r0.privacy
    eos = eos_ids(lm)
    for st in r1.internals["steps"]:
        assert st["candidates"] in (5, 5 + len(eos))
        assert st["log_prob"] > np.log(1e-9)  # the released token has mass under the restricted law


def test_public_row_ignores_the_prefix_cache_private_prompts_fill(lm):
    """The public row is decoded fresh: its logits are bit-for-bit the same whether or not the
    cross-call prefix cache holds private prompts sharing its template prefix, and it adds nothing."""
    from app.mechanisms.gen_decode import open_session

    query = "Anna: Can we meet at noon? Ben: Sure, see you at the cafe."
    pub = build_prompt(lm, TEMPLATE, [], query)
    private = build_prompt(lm, TEMPLATE, [("Tom: Lunch at one? Sue: Yes, at the deli.", "Tom and Sue lunch at one.")],
                           query)
    lm.clear_prefix_cache()
    s = open_session(lm, [pub], fresh=True)
    try:
        clean, after = s.logits.copy(), s.step(int(np.argmax(s.logits[0])))
    finally:
        s.close()
    assert len(lm.prefix_cache) == 0  # read nothing, filled nothing
    for p in (private, pub):  # what earlier (private) calls leave in the cache
        lm.start_decode([p]).close()
    assert len(lm.prefix_cache) >= 1
    s = open_session(lm, [pub], fresh=True)
    try:
        again, after2 = s.logits.copy(), s.step(int(np.argmax(s.logits[0])))
    finally:
        s.close()
    assert np.array_equal(clean, again) and np.array_equal(after, after2)
    lm.clear_prefix_cache()
