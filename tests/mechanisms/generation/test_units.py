"""Pure parts of the generation mechanisms: ESA sensitivity, KSA keywords, accounting and
calibration, parameter validation, ROUGE-L and the bundled task (no model)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from app.mechanisms import clip_softmax as cs
from app.mechanisms import esa, ksa, poe_decode
from app.mechanisms import sensitivity as sens
from app.mechanisms.errors import MechanismParamError, UnknownMechanismError
from app.mechanisms.gen_common import GenerationRequest
from app.mechanisms.gen_rouge import rouge_l
from app.mechanisms.generation import GENERATION_MECHANISMS, get_generation_mechanism
from app.privacy.adjacency import Adjacency
from app.privacy.calibration import calibrate_gaussian
from app.privacy.clip_softmax import clip_softmax_rho

EX = [(f"input {i}", f"output {i}") for i in range(40)]


def _req(mech: str = "esa", **kw) -> GenerationRequest:
    base = dict(epsilon=4.0, delta=1e-5, max_tokens=16)
    base.update(kw)
    return GenerationRequest.build(EX, "a query", **base)


# ---------------------------------------------------------------------------
# ESA: the noisy mean moves by at most the stated sensitivity
# ---------------------------------------------------------------------------


def _noisy_shift(e1, e2, clip_norm, sigma, seed, *, as_sum=False):
    m1 = esa.aggregate(e1, clip_norm, sigma, np.random.default_rng(seed))[1]
    m2 = esa.aggregate(e2, clip_norm, sigma, np.random.default_rng(seed))[1]
    if as_sum:  # ADD_UNIT: the private quantity is the noisy sum (T differs)
        m1, m2 = m1 * len(e1), m2 * len(e2)
    return float(np.linalg.norm(m1 - m2))


def test_esa_noisy_mean_shift_never_exceeds_the_stated_sensitivity():
    rng = np.random.default_rng(11)
    worst = 0.0
    for _ in range(500):
        t, dim, r = int(rng.integers(1, 9)), int(rng.integers(2, 17)), float(rng.uniform(0.3, 2.0))
        e = rng.normal(size=(t, dim)) * rng.uniform(0, 5, size=(t, 1))
        e2 = e.copy()
        e2[int(rng.integers(t))] = rng.normal(size=dim) * rng.choice([0.01, 1.0, 50.0])
        stated = esa.mean_sensitivity(t, r, sens.UnitChange.SWAP_UNIT)
        shift = _noisy_shift(e, e2, r, 0.3, int(rng.integers(1 << 30)))
        assert shift <= stated * (1 + 1e-9)
        worst = max(worst, shift / stated)
        # ADD_UNIT: one member more; the noisy sum moves by <= R (calibrated as R/T on the mean).
        e3 = np.vstack([e, rng.normal(size=dim) * 10])
        sigma_sum = 0.3  # the sum's noise is T sigma_mean, the same for both worlds
        s1 = esa.aggregate(e, r, sigma_sum / t, np.random.default_rng(1))[1] * t
        s3 = esa.aggregate(e3, r, sigma_sum / (t + 1), np.random.default_rng(1))[1] * (t + 1)
        assert np.linalg.norm(s1 - s3) <= r * (1 + 1e-9) + 1e-12
    assert worst > 0.95  # random pairs come close to 2R/T


def test_esa_sensitivity_is_attained_and_a_missing_clip_is_caught():
    u = np.array([3.0, 4.0])  # norm 5, clipped to R = 1
    d = np.stack([u, [0.0, 1.0], [1.0, 0.0]])
    d2 = d.copy()
    d2[0] = -u
    stated = esa.mean_sensitivity(3, 1.0, sens.UnitChange.SWAP_UNIT)
    assert stated == pytest.approx(2 / 3)
    assert _noisy_shift(d, d2, 1.0, 0.5, 3) == pytest.approx(stated)  # Lemma A.1 tightness (u -> -u)
    # A broken aggregation without clipping (R = inf) moves the mean by 2|u|/T = 10/3: caught.
    assert _noisy_shift(d, d2, math.inf, 0.5, 3) > stated


def test_esa_sensitivity_with_the_real_embedder(embedder):
    """Sentence embeddings (unit norm): swapping one member's answer moves the mean by <= 2/T."""
    answers = ["The meeting moves to Friday at noon.", "They will meet on Friday.", "Lunch is cancelled.",
               "Ben lends Alice his bike."]
    other = ["Completely unrelated: the stock market fell sharply today.", ""]
    e = np.asarray(embedder.embed(answers + other), dtype=float)
    assert np.allclose(np.linalg.norm(e[:4], axis=1), 1.0, atol=1e-4)
    stated = esa.mean_sensitivity(4, 1.0, sens.UnitChange.SWAP_UNIT)
    for j in range(4):
        for k in (4, 5):
            e2 = e[:4].copy()
            e2[j] = e[k]
            assert _noisy_shift(e[:4], e2, 1.0, 0.2, 5) <= stated + 1e-9


def test_esa_selection_is_the_nearest_and_the_highest_cosine():
    rng = np.random.default_rng(2)
    cands = rng.normal(size=(10, 8))
    cands /= np.linalg.norm(cands, axis=1, keepdims=True)
    for _ in range(50):
        m = rng.normal(size=8) * rng.uniform(0.01, 10)
        i, dist = esa.select_candidate(m, cands)
        assert i == int(np.argmin(dist)) == int(np.argmax(cands @ m))


def test_esa_calibration_and_cost():
    req = _req(params={"partitions": 8, "shots_per_partition": 4})
    cfg = esa.configure(req)
    assert cfg.noise.sensitivity == pytest.approx(2 / 8)
    assert cfg.noise.sigma == pytest.approx(calibrate_gaussian(4.0, 1e-5, sensitivity=0.25).value)
    cost = esa.privacy(cfg, req)
    assert cost["epsilon"] <= 4.0 and cost["epsilon"] > 3.99 and cost["delta"] == 1e-5
    assert cost["rho"] == pytest.approx(0.25**2 / (2 * cfg.noise.sigma**2))
    assert cost["is_private"] and cost["orders"] and cost["rdp"]
    classical = esa.configure(_req(epsilon=0.5, params={"partitions": 8, "noise_calibration": "classical"}))
    assert classical.noise.sigma == pytest.approx(0.25 * math.sqrt(2 * math.log(1.25 / 1e-5)) / 0.5)
    with pytest.raises(MechanismParamError) as e:
        esa.configure(_req(params={"partitions": 8, "sigma": 0.01}))
    assert e.value.param == "params.sigma"
    # add-remove with the unit count taken from n: whether a neighbour adds a unit or swaps one's
    # content depends on the private n, so the swap bound 2R/T is used either way.
    add = esa.configure(_req(adjacency="add-remove", params={"partitions": 40, "shots_per_partition": 1}))
    assert add.change == sens.UnitChange.SWAP_UNIT and add.noise.sensitivity == pytest.approx(2 / 40)


# ---------------------------------------------------------------------------
# KSA pure parts
# ---------------------------------------------------------------------------


def test_keywords_histogram_and_gaps():
    assert ksa.keywords("The cat, the CAT and a dog!") == {"cat", "dog"}
    assert ksa.keywords("Don't stop; it's 3 pm.") == {"stop", "3", "pm"}
    hist = ksa.keyword_histogram(["cat cat cat", "cat dog", "dog bird", "the of and"])
    assert hist == {"cat": 2, "dog": 2, "bird": 1}  # once per answer
    assert list(ksa.count_gaps(hist, 4)) == [0, 1, 1, 0]  # counts (2, 2, 1, 0, 0), zero padded
    assert ksa.top_keywords(hist, 2) == ["cat", "dog"]
    assert ksa.top_keywords({"zeta": 5, "alpha": 4, "mid": 1}, 2) == ["alpha", "zeta"]  # alphabetical release


def test_ksa_release_keywords_passes_on_a_clear_consensus_and_fails_on_noise():
    cfg = ksa.configure(_req(epsilon=8.0, params={"partitions": 20, "shots_per_partition": 1}))
    consensus = ["Alice meets Ben on Friday"] * 18 + ["weather report", "stock prices"]
    rel = ksa.release_keywords(consensus, cfg, np.random.default_rng(0))
    assert rel["ptr_passed"] and rel["keywords"] == ["alice", "ben", "friday", "meets"]
    noise = [f"word{i} other{i}" for i in range(20)]
    rel = ksa.release_keywords(noise, cfg, np.random.default_rng(0))
    assert not rel["ptr_passed"] and rel["keywords"] is None


def test_ksa_budget_split_and_cost():
    req = _req(epsilon=4.0, delta=1e-5, params={"partitions": 10})
    cfg = ksa.configure(req)
    b = cfg.budget
    assert b.epsilon <= 4.0 + 1e-9 and b.epsilon > 3.99
    assert b.delta0 + b.delta_accounting == pytest.approx(1e-5)
    assert b.epsilon_em == pytest.approx(0.2 * 4.0, rel=1e-6)
    cost = ksa.privacy(cfg, req)
    assert cost["rdp"] is None and cost["orders"] is None  # delta0 has no RDP form
    assert cost["params"]["gumbel_scale"] == pytest.approx(4.0 / b.epsilon_em)
    with pytest.raises(MechanismParamError) as e:
        ksa.configure(_req(epsilon=1.0, params={"epsilon_em": 5.0, "noise_multiplier": 1.0}))
    assert e.value.param == "params.epsilon_em"
    with pytest.raises(MechanismParamError) as e:
        ksa.configure(_req(params={"epsilon_em": 1.0}))
    assert e.value.param == "params.noise_multiplier"


# ---------------------------------------------------------------------------
# clip_softmax and PoE accounting
# ---------------------------------------------------------------------------


def test_clip_softmax_calibration_and_cost():
    req = _req(epsilon=8.0, delta=1e-5, max_tokens=16, params={"prompts": 20, "clip": 2.0})
    cfg = cs.configure(req)
    cost = cs.privacy(cfg, req)
    assert 7.9 < cost["epsilon"] <= 8.0
    # ICLInf Thm C.2 per token, one prompt swapped: rho = (2c/(s tau))^2 / 2, over 16 tokens.
    assert cost["rho"] == pytest.approx(16 * 0.5 * (2 * 2.0 / (20 * cfg.temperature)) ** 2)
    assert cost["rho"] == pytest.approx(16 * clip_softmax_rho(2.0, 20, cfg.temperature, Adjacency.REPLACE_ONE))
    # Same sensitivity basis under add-remove (one prompt changes), labelled as asked.
    add = cs.privacy(cs.configure(_req(epsilon=8.0, adjacency="add-remove", params={"prompts": 20})), req)
    assert add["epsilon"] == pytest.approx(cost["epsilon"])
    # Given temperature: checked against the budget.
    with pytest.raises(MechanismParamError) as e:
        cs.configure(_req(epsilon=1.0, params={"prompts": 20, "temperature": 0.01}))
    assert e.value.param == "params.temperature"
    # Clip calibrated for a given temperature (ICLInf E.2 variant).
    sc = _req(epsilon=8.0, max_tokens=16, params={"prompts": 20, "temperature": 1.0, "solve_for": "clip"})
    cc = cs.configure(sc)
    assert cc.temperature == 1.0 and 7.9 < cs.privacy(cc, sc)["epsilon"] <= 8.0
    with pytest.raises(MechanismParamError) as e:
        cs.configure(_req(params={"prompts": 20, "solve_for": "clip"}))
    assert e.value.param == "params.temperature"
    # Pure DP (delta 0): basic composition of 4c/(s tau) per token.
    pure = _req(epsilon=2.0, delta=0.0, max_tokens=8, params={"prompts": 10, "clip": 1.0})
    pc = cs.configure(pure)
    assert 8 * 4 * 1.0 / (10 * pc.temperature) == pytest.approx(2.0, rel=1e-6)
    assert cs.privacy(pc, pure)["epsilon"] <= 2.0 * (1 + 1e-9)


def test_poe_decoding_composition_beats_naive_summation():
    req = _req(epsilon=8.0, delta=1e-5, max_tokens=32, params={"experts": 16})
    cfg = poe_decode.configure(req)
    assert cfg.epsilon_per_token > 8.0 / 32 * 1.15  # RDP composition of the EM beats eps / T here
    cost = poe_decode.privacy(cfg, req)
    assert 7.9 < cost["epsilon"] <= 8.0 and cost["method"] == "bounded-range-rdp"
    assert cost["rho"] == pytest.approx(32 * cfg.epsilon_per_token**2 / 8)
    # Few tokens: basic composition wins and the cost is pure.
    few = _req(epsilon=1.0, delta=1e-5, max_tokens=2, params={"experts": 16})
    fc = poe_decode.configure(few)
    assert fc.epsilon_per_token == pytest.approx(0.5, rel=1e-6)
    assert poe_decode.privacy(fc, few)["delta"] == 0.0
    assert poe_decode.configure(_req(delta=0.0, max_tokens=8, params={"experts": 16})).epsilon_per_token == 0.5
    # Constants: swap lam = eps/(2c), also under add-remove with every exemplar an expert, since the
    # expert count follows the private n (the swap bound covers an added expert).
    assert cfg.change == sens.UnitChange.SWAP_UNIT
    assert cfg.inverse_temperature == pytest.approx(cfg.epsilon_per_token / (2 * cfg.clip))
    all_add = poe_decode.configure(_req(adjacency="add-remove", params={"experts": 40}))
    assert all_add.change == sens.UnitChange.SWAP_UNIT
    assert all_add.inverse_temperature == pytest.approx(all_add.epsilon_per_token / (2 * all_add.clip))


# ---------------------------------------------------------------------------
# Registry and validation
# ---------------------------------------------------------------------------


def test_registry_and_errors_name_the_field():
    assert set(GENERATION_MECHANISMS) == {"esa", "ksa", "clip_softmax", "poe", "mozo", "zero_shot", "full_context"}
    assert get_generation_mechanism("clip-softmax").name == "clip_softmax"
    with pytest.raises(UnknownMechanismError) as e:
        get_generation_mechanism("nope")
    assert e.value.param == "mechanism"
    for name, bad, param in [
        ("esa", {"bogus": 1}, "params.bogus"),
        ("esa", {"partitions": 41}, "params.partitions"),
        ("esa", {"partitions": 10, "shots_per_partition": 5}, "params.shots_per_partition"),
        ("ksa", {"em_fraction": 1.5}, "params.em_fraction"),
        ("clip_softmax", {"clip": -1}, "params.clip"),
        ("poe", {"experts": "many"}, "params.experts"),
    ]:
        with pytest.raises(MechanismParamError) as e:
            get_generation_mechanism(name).cost(_req(params=bad))
        assert e.value.param == param, (name, bad)
    with pytest.raises(MechanismParamError) as e:
        get_generation_mechanism("esa").cost(GenerationRequest.build(EX, "q", epsilon=None))
    assert e.value.param == "epsilon"
    with pytest.raises(MechanismParamError) as e:
        GenerationRequest.build(EX, "q", max_tokens=0)
    assert e.value.param == "max_tokens"
    assert get_generation_mechanism("zero_shot").cost(_req(epsilon=None))["epsilon"] == 0.0


# ---------------------------------------------------------------------------
# ROUGE-L and the bundled task
# ---------------------------------------------------------------------------


def test_rouge_l():
    assert rouge_l("the cat sat on the mat", "the cat sat on the mat") == 1.0
    assert rouge_l("the cat on the mat", "the cat sat on the mat") == pytest.approx(2 * 1 * (5 / 6) / (1 + 5 / 6))
    assert rouge_l("", "anything") == 0.0
    assert rouge_l("Mat, THE!", "the mat") == pytest.approx(0.5)  # LCS 1 of 2 tokens each


def test_bundled_task_is_regenerated_byte_for_byte():
    from tests.scripts import ROOT as root, load_script

    rows = load_script("scripts/make_generation_task.py").make()
    path = root / "app" / "icl" / "data" / "gen_dialogsum.jsonl"
    assert path.read_text(encoding="utf-8") == "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    assert sum(r["split"] == "train" for r in rows) == 240 and sum(r["split"] == "test" for r in rows) == 60
    assert len({r["input"] for r in rows}) == 300
