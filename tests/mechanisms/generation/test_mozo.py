"""``mozo`` (DPS-MOZO-style mixing): the per-token bound, its calibration, sampled checks.

The bound under test (``app/mechanisms/mozo.py``): with the public base b on the candidate
set and p~_i = lam p_i + (1 - lam) b, the step q prop. to prod_i p~_i^w has a log-ratio between
neighbours whose range over tokens is at most
w [log(1 + lam/((1-lam) m1)) + log(1 + lam/((1-lam) m2))] =: eps_tok (bounded range), hence
eps_tok-DP and the per-token RDP curve min(alpha eps_tok^2/8, sinh bound, eps_tok).

The reference computations below do NOT call mozo's step functions: they build the mixed
distributions, their product and the Renyi divergences directly with numpy.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.mechanisms import mozo, poe_decode
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.gen_common import GenerationRequest
from app.mechanisms.generation import get_generation_mechanism
from app.mechanisms.verify import counts, sampled_epsilon_lower_bound

ORDERS = np.array([1.25, 1.5, 2.0, 3.0, 5.0, 10.0, 20.0, 50.0])


# ---------------------------------------------------------------------------
# Independent reference: plain numpy, no mozo step code
# ---------------------------------------------------------------------------


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def _ref_law(private_logits: np.ndarray, base: np.ndarray, lam: float, w: float, pad: int = 0) -> np.ndarray:
    mixed = lam * _softmax(private_logits) + (1.0 - lam) * base[None, :]
    mixed = np.vstack([mixed] + [base[None, :]] * pad)  # missing experts are zero-shot experts
    un = np.prod(mixed ** w, axis=0)
    return un / un.sum()


def _ref_renyi(p: np.ndarray, q: np.ndarray, a: float) -> float:
    """D_a(p || q) = log sum p^a q^(1-a) / (a - 1), summed in log space (high orders overflow)."""
    t = a * np.log(p) + (1.0 - a) * np.log(q)
    top = t.max()
    return float((top + np.log(np.sum(np.exp(t - top)))) / (a - 1.0))


def _ref_base(p0: np.ndarray, mu: float) -> np.ndarray:
    return (1.0 - mu) * p0 + mu / p0.size


# ---------------------------------------------------------------------------
# The bound and its calibration
# ---------------------------------------------------------------------------


def test_calibrated_lambda_is_the_largest_within_the_per_token_budget():
    rng = np.random.default_rng(5)
    for _ in range(500):
        m1, m2 = np.sort(rng.uniform(1e-6, 0.5, size=2))
        w = float(rng.uniform(0.01, 1.0))
        eps = float(rng.uniform(0.01, 3.0))
        lam = mozo.calibrate_lambda(eps, w, m1, m2)
        assert 0.0 < lam < 1.0
        assert mozo.per_token_epsilon(lam, w, m1, m2) <= eps
        if lam < 1 - 1e-9:  # (near 1 the float lam saturates; the budget check above still holds)
            assert mozo.per_token_epsilon(lam * (1 + 1e-6), w, m1, m2) > eps * (1 - 1e-9)
        capped = mozo.calibrate_lambda(eps, w, m1, m2, lambda_max=lam / 2)
        assert capped == pytest.approx(lam / 2)
    # one formula by hand: w = 1, m1 = m2 = m: 2 log(1 + r/m) = eps -> r = m (e^{eps/2} - 1)
    r = 0.1 * math.expm1(0.5)
    assert mozo.calibrate_lambda(1.0, 1.0, 0.1, 0.1) == pytest.approx(r / (1 + r), rel=1e-12)


def test_bound_is_attained_by_point_masses_and_never_exceeded_on_random_neighbours():
    """Exact range of the log-ratio (the bounded-range quantity) on the worst pair reaches the bound;
    300 random worlds (swap one expert, or add one) stay under it, and so does the pure loss."""
    rng = np.random.default_rng(11)
    # worst case: p_j a point mass on the m2 token, p_j' on the m1 token
    v, e, w, mu = 7, 3, 0.3, 0.2
    base = _ref_base(_softmax(rng.normal(0, 2, size=v)), mu)
    m1, m2 = np.sort(base)[:2]
    i1, i2 = np.argsort(base)[:2]
    lam = mozo.calibrate_lambda(0.9, w, m1, m2)
    others = rng.normal(0, 2, size=(e - 1, v))
    pj, pj2 = np.full(v, -200.0), np.full(v, -200.0)
    pj[i2], pj2[i1] = 0.0, 0.0
    q = _ref_law(np.vstack([others, pj]), base, lam, w)
    q2 = _ref_law(np.vstack([others, pj2]), base, lam, w)
    d = np.log(q) - np.log(q2)
    assert d.max() - d.min() == pytest.approx(0.9, rel=1e-9)
    assert np.abs(d).max() <= 0.9 + 1e-12

    unpadded_violations = 0
    for _ in range(300):
        v, e = int(rng.integers(2, 30)), int(rng.integers(1, 6))
        w, mu, eps = float(rng.uniform(0.05, 1.0)), float(rng.choice([0.0, 0.1, 0.5, 1.0])), float(rng.uniform(0.05, 2.0))
        p0 = _softmax(rng.normal(0, 3, size=v))
        base = _ref_base(p0, mu)
        m1, m2 = mozo.two_smallest(base)
        lam = mozo.calibrate_lambda(eps, w, m1, m2)
        z = rng.normal(0, 5, size=(e, v))
        if rng.random() < 0.5:  # swap one expert
            z2 = z.copy()
            z2[int(rng.integers(e))] = rng.normal(0, 5, size=v) * rng.choice([0.1, 1.0, 30.0])
            q, q2 = _ref_law(z, base, lam, w, pad=1), _ref_law(z2, base, lam, w, pad=1)
        else:  # add one exemplar when n < E: a padded zero-shot expert becomes a private one
            z2 = np.vstack([z, rng.normal(0, 5, size=v) * rng.choice([1.0, 30.0])])
            q, q2 = _ref_law(z, base, lam, w, pad=1), _ref_law(z2, base, lam, w, pad=0)
            u = np.log(_ref_law(z, base, lam, w)) - np.log(q2)  # no padding: a factor b^w appears
            unpadded_violations += int(u.max() - u.min() > eps * (1 + 1e-9))
        d = np.log(q) - np.log(q2)
        assert d.max() - d.min() <= eps * (1 + 1e-9)
        # the step's own code computes the same law as the reference
        cand = np.arange(v)
        assert np.allclose(np.exp(mozo.step_log_probs(z, cand, base, lam, w, pad=1)), q, atol=1e-12)
    assert unpadded_violations > 0  # the padding is needed: without it the add-one worlds break the bound


def test_exact_renyi_within_the_composed_per_token_curve_and_unmixed_variant_outside():
    """D_alpha(q || q') computed directly stays under poe_decode.per_token_rdp(eps_tok) (the curve the
    accountant composes); the worst pair gets close to it at low orders; with the mixing dropped
    (lam = 1) the same pair is far outside the curve."""
    eps, w = 0.8, 0.5
    curve = poe_decode.per_token_rdp(ORDERS, eps)
    base = _ref_base(np.array([0.5, 0.3, 0.15, 0.05]), 0.1)
    m1, m2 = mozo.two_smallest(base)
    i1, i2 = np.argsort(base)[:2]
    lam = mozo.calibrate_lambda(eps, w, m1, m2)
    pj, pj2 = np.full(4, -200.0), np.full(4, -200.0)
    pj[i2], pj2[i1] = 0.0, 0.0
    q, q2 = _ref_law(pj[None], base, lam, w), _ref_law(pj2[None], base, lam, w)
    ratios = [max(_ref_renyi(q, q2, a), _ref_renyi(q2, q, a)) / c for a, c in zip(ORDERS, curve)]
    assert max(ratios) <= 1.0 + 1e-9
    assert max(ratios) > 0.5  # not a vacuous check
    u, u2 = _ref_law(pj[None], base, 1.0, w), _ref_law(pj2[None], base, 1.0, w)  # no mixing
    assert max(_ref_renyi(u, u2, a) / c for a, c in zip(ORDERS, curve)) > 10.0

    rng = np.random.default_rng(23)
    for _ in range(300):
        v, e = int(rng.integers(2, 25)), int(rng.integers(1, 5))
        w, eps = float(rng.uniform(0.05, 1.0)), float(rng.uniform(0.05, 2.0))
        curve = poe_decode.per_token_rdp(ORDERS, eps)
        base = _ref_base(_softmax(rng.normal(0, 3, size=v)), float(rng.choice([0.0, 0.1, 1.0])))
        lam = mozo.calibrate_lambda(eps, w, *mozo.two_smallest(base))
        z = rng.normal(0, 5, size=(e, v))
        z2 = z.copy()
        z2[int(rng.integers(e))] = rng.normal(0, 5, size=v) * 30.0
        q, q2 = _ref_law(z, base, lam, w), _ref_law(z2, base, lam, w)
        for a, c in zip(ORDERS, curve):
            assert max(_ref_renyi(q, q2, a), _ref_renyi(q2, q, a)) <= c * (1 + 1e-9) + 1e-12


# ---------------------------------------------------------------------------
# Sampled: the chooser itself, 200 000 draws per world
# ---------------------------------------------------------------------------

N = 200_000
ALPHA = 1e-6  # per check; Bonferroni over labels and directions inside sampled_epsilon_lower_bound


def _sample(private_logits, public_logits, lam_override, rng, cfg):
    """Draws of the released token from mozo's chooser (candidate set = all tokens here)."""
    cand = np.arange(public_logits.size)
    base = mozo.base_distribution(public_logits, cand, cfg.uniform_mix)
    lam = mozo.calibrate_lambda(cfg.epsilon_per_token, cfg.weight, *mozo.two_smallest(base))
    if lam_override is not None:
        lam = lam_override
    lq = mozo.step_log_probs(private_logits, cand, base, lam, cfg.weight)
    return np.argmax(lq[None, :] + rng.gumbel(size=(N, lq.size)), axis=1), lam


def test_step_sampled_within_claim_and_unmixed_variant_rejected():
    cfg = mozo.MozoConfig(experts=2, weight_experts=2, group_size=1, temperature=1.0, uniform_mix=0.1,
                          lambda_max=1.0, epsilon_per_token=1.0, tokens=1,
                          change=mozo.sens.UnitChange.SWAP_UNIT, public_top_k=None)
    v = 5
    public = np.log(np.array([0.55, 0.25, 0.12, 0.06, 0.02]))
    other = np.array([2.0, 1.0, 0.0, 0.0, 0.0])
    pj, pj2 = np.full(v, -30.0), np.full(v, -30.0)
    pj[3], pj2[4] = 0.0, 0.0  # point masses on the two least likely base tokens
    d, d2 = np.vstack([other, pj]), np.vstack([other, pj2])

    cand = np.arange(v)
    base = mozo.base_distribution(public, cand, cfg.uniform_mix)
    lam = mozo.calibrate_lambda(1.0, cfg.weight, *mozo.two_smallest(base))
    lq, lq2 = (mozo.step_log_probs(x, cand, base, lam, cfg.weight) for x in (d, d2))
    exact = float(np.max(np.abs(lq - lq2)))
    assert 0.5 < exact <= 1.0  # a near-worst case, within the per-token claim

    rng = np.random.default_rng(31)
    s1, _ = _sample(d, public, None, rng, cfg)
    s2, _ = _sample(d2, public, None, rng, cfg)
    assert sampled_epsilon_lower_bound(counts(s1, v), counts(s2, v), alpha=ALPHA).lower <= 1.0

    # Broken: the mixing dropped (lam = 1, "pure private" product) with the same claim -> rejected.
    rng = np.random.default_rng(32)
    b1, _ = _sample(d, public, 1.0, rng, cfg)
    b2, _ = _sample(d2, public, 1.0, rng, cfg)
    assert sampled_epsilon_lower_bound(counts(b1, v), counts(b2, v), alpha=ALPHA).lower > 1.0


# ---------------------------------------------------------------------------
# Configuration, accounting, errors naming the field
# ---------------------------------------------------------------------------

EX = [(f"in {i}", f"out {i}") for i in range(40)]


def _req(params=None, **kw):
    """``experts`` 32 unless given: these tests are about the charge and the errors, not the data-aware
    defaults (which refuse 40 exemplars at eps 2: tests/mechanisms/generation/test_gen_defaults.py)."""
    base = dict(epsilon=2.0, delta=1e-5, max_tokens=32)
    base.update(kw)
    return GenerationRequest.build(EX, "q", params={"experts": 32, **(params or {})}, **base)


def test_cost_within_budget_and_known_before_any_model_call():
    mech = get_generation_mechanism("mozo")
    for eps in (1.0, 2.0, 4.0, 8.0):
        c = mech.cost(_req(epsilon=eps))
        assert c["is_private"] and c["epsilon"] <= eps * (1 + 1e-9) and c["mechanism"] == "mozo"
        assert c["epsilon"] > 0.95 * eps  # the calibration uses the budget
        assert c["rdp"] is not None and c["params"]["compositions"] == 16  # private_tokens: min(16, max_tokens)
    # pure with delta 0: basic composition
    c = mech.cost(_req(delta=0.0))
    assert c["delta"] == 0.0 and c["epsilon"] == pytest.approx(2.0)
    # the cost does not depend on the candidate set or the mixing knobs
    a = mech.cost(_req({"public_top_k": 5, "uniform_mix": 0.0}))
    b = mech.cost(_req({"public_top_k": 100, "uniform_mix": 1.0}))
    assert a["epsilon"] == b["epsilon"] and a["rdp"] == b["rdp"]
    assert get_generation_mechanism("dps-mozo").name == "mozo"


@pytest.mark.parametrize("params, field", [
    ({"uniform_mix": 1.5}, "params.uniform_mix"),
    ({"uniform_mix": -0.1}, "params.uniform_mix"),
    ({"lambda_max": 0}, "params.lambda_max"),
    ({"lambda_max": 1.5}, "params.lambda_max"),
    ({"temperature": 0}, "params.temperature"),
    ({"experts": 41}, "params.experts"),
    ({"public_top_k": -1}, "params.public_top_k"),
    ({"epsilon_per_token": 1.0}, "params.epsilon_per_token"),
    ({"lambda": 0.5}, "params.lambda"),
])
def test_bad_params_name_the_field(params, field):
    with pytest.raises(MechanismParamError) as e:
        get_generation_mechanism("mozo").cost(_req(params))
    assert e.value.param == field


def test_epsilon_required():
    with pytest.raises(MechanismParamError) as e:
        get_generation_mechanism("mozo").cost(_req(epsilon=None))
    assert e.value.param == "epsilon"


# ---------------------------------------------------------------------------
# lambda_mode "per_expert": lam_i from the private p_i inside a log-ratio ball (same bound, same cost)
# ---------------------------------------------------------------------------


def _ref_ball_lambda(p: np.ndarray, base: np.ndarray, beta: float) -> float:
    """Largest lam with ptp_y log(lam p + (1 - lam) b) - log b <= beta, by plain bisection (no mozo code)."""
    def rng_of(lam: float) -> float:
        return float(np.ptp(np.log(lam * p + (1.0 - lam) * base) - np.log(base)))
    if rng_of(1.0) <= beta:
        return 1.0
    lo, hi = 0.0, 1.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if rng_of(mid) <= beta else (lo, mid)
    return lo


def _ref_law_per_expert(private_logits: np.ndarray, base: np.ndarray, eps_tok: float, w: float,
                        pad: int = 0) -> np.ndarray:
    ps = _softmax(private_logits)
    lams = np.array([_ref_ball_lambda(p, base, eps_tok / (2.0 * w)) for p in ps])
    mixed = lams[:, None] * ps + (1.0 - lams[:, None]) * base[None, :]
    mixed = np.vstack([mixed] + [base[None, :]] * pad)
    un = np.prod(mixed ** w, axis=0)
    return un / un.sum()


def test_per_expert_lambda_is_the_largest_inside_the_ball():
    rng = np.random.default_rng(41)
    for _ in range(500):
        v = int(rng.integers(2, 12))
        base = _ref_base(_softmax(rng.normal(0, 3, size=v)), float(rng.choice([0.0, 0.1, 1.0])))
        z = rng.normal(0, float(rng.choice([0.3, 3.0, 30.0])), size=(3, v))
        w, eps = float(rng.uniform(0.02, 1.0)), float(rng.uniform(0.01, 3.0))
        lams = mozo.per_expert_lambdas(z, np.arange(v), base, eps, w)
        for p, lam in zip(_softmax(z), lams):
            ref = _ref_ball_lambda(p, base, eps / (2 * w))
            assert lam == pytest.approx(ref, rel=1e-7, abs=1e-12)
            assert float(np.ptp(np.log(lam * p + (1 - lam) * base) - np.log(base))) <= eps / (2 * w) * (1 + 1e-9)
    # never below the public lam of a uniform base (the worst p_i gives it back exactly)
    v, w, eps = 11, 1 / 8, 0.3
    base = np.full(v, 1 / v)
    lam_pub = mozo.calibrate_lambda(eps, w, 1 / v, 1 / v)
    point = np.full((1, v), -300.0)
    point[0, 0] = 0.0
    assert mozo.per_expert_lambdas(point, np.arange(v), base, eps, w)[0] == pytest.approx(lam_pub, rel=1e-9)
    z = rng.normal(0, 2, size=(50, v))
    assert (mozo.per_expert_lambdas(z, np.arange(v), base, eps, w) >= lam_pub * (1 - 1e-12)).all()


def test_per_expert_exact_divergences_within_the_claim_on_random_worst_case_neighbours():
    """Brute force on small instances: for many random p_i and every replacement of one expert by a
    point mass (the extreme points) or a random p, the exact log-ratio range stays <= eps_tok and the
    exact Renyi divergences stay under the composed per-token curve; the worst found is near the claim."""
    rng = np.random.default_rng(43)
    worst = 0.0
    for _ in range(150):
        v, e = int(rng.integers(2, 7)), int(rng.integers(1, 5))
        w, eps = float(rng.uniform(0.05, 1.0)), float(rng.uniform(0.05, 2.0))
        mu = float(rng.choice([0.0, 0.1, 1.0]))
        base = _ref_base(_softmax(rng.normal(0, 2, size=v)), mu)
        curve = poe_decode.per_token_rdp(ORDERS, eps)
        z = rng.normal(0, float(rng.choice([0.5, 3.0, 30.0])), size=(e, v))
        j = int(rng.integers(e))
        alts = [np.where(np.arange(v) == k, 0.0, -300.0) for k in range(v)]
        alts += [rng.normal(0, 5, size=v) * rng.choice([0.1, 1.0, 30.0]) for _ in range(3)]
        laws = []
        for a in alts:
            z2 = z.copy()
            z2[j] = a
            laws.append(_ref_law_per_expert(z2, base, eps, w, pad=1))
        laws.append(_ref_law_per_expert(z, base, eps, w, pad=1))
        laws.append(_ref_law_per_expert(z[np.arange(e) != j], base, eps, w, pad=2))  # add-one via padding
        # the step's own code gives the same law
        lams = mozo.per_expert_lambdas(z, np.arange(v), base, eps, w)
        assert np.allclose(np.exp(mozo.step_log_probs(z, np.arange(v), base, lams, w, pad=1)), laws[-2], atol=1e-10)
        for x in range(len(laws)):
            for y in range(x + 1, len(laws)):
                d = np.log(laws[x]) - np.log(laws[y])
                worst = max(worst, float(np.ptp(d)) / eps)
                assert np.ptp(d) <= eps * (1 + 1e-9)
                for a, c in zip(ORDERS, curve):
                    assert max(_ref_renyi(laws[x], laws[y], a), _ref_renyi(laws[y], laws[x], a)) <= c * (1 + 1e-9) + 1e-12
    assert worst > 0.9  # point masses get close to the claim: the check is not vacuous


def test_per_expert_broken_ball_exceeds_the_claim():
    """The factor 2 matters: a ball of radius eps_tok / w (range of one expert only) breaks the bound."""
    v, w, eps = 4, 0.5, 0.8
    base = np.full(v, 0.25)
    pj, pj2 = np.full(v, -300.0), np.full(v, -300.0)
    pj[0], pj2[1] = 0.0, 0.0
    def law(z: np.ndarray, beta: float) -> np.ndarray:
        p = _softmax(z)
        lam = _ref_ball_lambda(p, base, beta)
        m = (lam * p + (1 - lam) * base) ** w
        return m / m.sum()
    good = np.ptp(np.log(law(pj, eps / (2 * w))) - np.log(law(pj2, eps / (2 * w))))
    bad = np.ptp(np.log(law(pj, eps / w)) - np.log(law(pj2, eps / w)))
    assert good <= eps * (1 + 1e-9) < bad


def test_per_expert_step_sampled_within_claim_and_unmixed_variant_rejected():
    cfg = mozo.MozoConfig(experts=2, weight_experts=2, group_size=1, temperature=1.0, uniform_mix=0.1,
                          lambda_max=1.0, epsilon_per_token=1.0, tokens=1,
                          change=mozo.sens.UnitChange.SWAP_UNIT, public_top_k=None, lambda_mode="per_expert")
    v = 5
    public = np.log(np.array([0.55, 0.25, 0.12, 0.06, 0.02]))
    other = np.array([2.0, 1.0, 0.0, 0.0, 0.0])
    pj, pj2 = np.full(v, -30.0), np.full(v, -30.0)
    pj[3], pj2[4] = 0.0, 0.0
    d, d2 = np.vstack([other, pj]), np.vstack([other, pj2])
    cand = np.arange(v)
    base = mozo.base_distribution(public, cand, cfg.uniform_mix)
    lam_pub = mozo.calibrate_lambda(1.0, cfg.weight, *mozo.two_smallest(base))
    lams = mozo.per_expert_lambdas(d, cand, base, 1.0, cfg.weight)
    assert lams[0] > 2 * lam_pub  # the non-extreme expert gets a larger lam than the public rule
    lq, lq2 = (mozo.step_log_probs(x, cand, base, mozo.per_expert_lambdas(x, cand, base, 1.0, cfg.weight),
                                   cfg.weight) for x in (d, d2))
    exact = float(np.ptp(lq - lq2))
    assert 0.5 < exact <= 1.0

    choose = mozo.chooser(cfg, np.random.default_rng(0), set())
    tok, info = choose(d, public)
    assert info["lambda"] == pytest.approx(float(np.mean(lams)))

    def draws(lq_: np.ndarray, seed: int) -> np.ndarray:
        return np.argmax(lq_[None, :] + np.random.default_rng(seed).gumbel(size=(N, v)), axis=1)

    assert sampled_epsilon_lower_bound(counts(draws(lq, 51), v), counts(draws(lq2, 52), v), alpha=ALPHA).lower <= 1.0
    u, u2 = (mozo.step_log_probs(x, cand, base, np.ones(2), cfg.weight) for x in (d, d2))  # mixing dropped
    assert sampled_epsilon_lower_bound(counts(draws(u, 53), v), counts(draws(u2, 54), v), alpha=ALPHA).lower > 1.0


def test_lambda_mode_param_and_cost_unchanged():
    mech = get_generation_mechanism("mozo")
    a = mech.cost(_req({"lambda_mode": "public"}))
    b = mech.cost(_req({"lambda_mode": "per_expert"}))
    assert a["epsilon"] == b["epsilon"] and a["rdp"] == b["rdp"]
    assert b["params"]["lambda_mode"] == "per_expert"
    with pytest.raises(MechanismParamError) as e:
        mech.cost(_req({"lambda_mode": "paper"}))
    assert e.value.param == "params.lambda_mode"


def test_few_shot_experts_same_charge():
    """group_size > 1 (few-shot experts, issue 18 fourth pass): one exemplar still touches one expert, and the
    per-expert bound does not depend on what is in an expert's prompt, so the charge is the one-shot charge."""
    mech = get_generation_mechanism("mozo")
    one = mech.cost(_req({"experts": 2, "lambda_mode": "per_expert"}))
    for e, g in ((2, 2), (3, 2), (1, 6)):
        few = mech.cost(_req({"experts": e, "group_size": g, "lambda_mode": "per_expert"}))
        assert few["epsilon"] == one["epsilon"] and few["rdp"] == one["rdp"]
        cfg = mozo.configure(_req({"experts": e, "group_size": g}))
        assert (cfg.experts, cfg.group_size) == (e, g)
    with pytest.raises(MechanismParamError) as err:  # more exemplars than the dataset holds
        mech.cost(_req({"experts": 21, "group_size": 2}))  # 42 > 40
    assert err.value.param == "params.group_size"

# ---------------------------------------------------------------------------
# subsample: a fresh uniform E-subset of the n exemplars per step, amplified pure-DP charge
# (Balle, Barthe & Gaboardi 2018, Table 1, substitution, without replacement:
#  eps' = log(1 + (m/n)(e^eps - 1))). The references below enumerate every subset with numpy.
# ---------------------------------------------------------------------------


def _ref_amplified(eps: float, m: int, n: int) -> float:
    return math.log(1.0 + (m / n) * (math.exp(eps) - 1.0))


def _ref_subsampled_law(private_logits: np.ndarray, base: np.ndarray, lam: float, w: float, m: int) -> np.ndarray:
    """Exact output law of one subsampled step: the average of the m-expert step over all C(n, m) subsets."""
    from itertools import combinations

    n = private_logits.shape[0]
    subsets = list(combinations(range(n), m))
    return sum(_ref_law(private_logits[list(s)], base, lam, w) for s in subsets) / len(subsets)


def _point_mass(v: int, k: int) -> np.ndarray:
    z = np.full(v, -60.0)
    z[k] = 0.0
    return z


def test_subsampled_step_exact_law_within_the_amplified_epsilon_and_fixed_subset_caught():
    """n in 4..7, m in {2, 3}, |V| in 2..4: the chosen exemplar replaced by every point mass and random
    distributions; the exact max log-ratio (both directions) of the subset-averaged law <= eps'. The
    broken variant (no subsampling: the first m exemplars every step, the same amplified charge)
    exceeds eps' on some world, so the check can fail."""
    rng = np.random.default_rng(1801)
    worst_ratio, broken_exceeds, worlds = 0.0, 0, 0
    for n in range(4, 8):
        for m in (2, 3):
            for _ in range(6):
                v = int(rng.integers(2, 5))
                eps = float(rng.uniform(0.3, 3.0))
                w = 1.0 / (m * float(rng.choice([0.25, 1.0])))
                base = _ref_base(_softmax(rng.normal(0, 2, size=v)), float(rng.choice([0.0, 0.1, 1.0])))
                m1, m2 = np.sort(base)[:2]
                lam = mozo.calibrate_lambda(eps, w, m1, m2)
                claim = _ref_amplified(eps, m, n)
                assert mozo.amplified_epsilon(eps, m / n) == pytest.approx(claim, rel=1e-12)
                z = rng.normal(0, 4, size=(n, v))
                z[0] = _point_mass(v, int(np.argsort(base)[1]))  # the changed exemplar starts as a point mass
                p = _ref_subsampled_law(z, base, lam, w, m)
                fixed = _ref_law(z[:m], base, lam, w)
                replacements = [_point_mass(v, k) for k in range(v)] + [rng.normal(0, 4, size=v) for _ in range(3)]
                for j in (0, int(rng.integers(1, n))):
                    for r in replacements:
                        z2 = z.copy()
                        z2[j] = r
                        p2 = _ref_subsampled_law(z2, base, lam, w, m)
                        loss = float(np.max(np.abs(np.log(p) - np.log(p2))))
                        assert loss <= claim * (1 + 1e-9) + 1e-12, (n, m, v, eps, loss, claim)
                        worst_ratio = max(worst_ratio, loss / claim)
                        worlds += 1
                        if j == 0:
                            fixed2 = _ref_law(z2[:m], base, lam, w)
                            broken = float(np.max(np.abs(np.log(fixed) - np.log(fixed2))))
                            assert broken <= eps * (1 + 1e-9)  # the unamplified step itself is eps-DP
                            broken_exceeds += int(broken > claim * (1 + 1e-6))
    assert worlds > 300
    assert worst_ratio > 0.7  # not vacuous: the worst pair found reaches 0.88 of eps' (seeded)
    assert broken_exceeds > 0  # dropping the subsampling but keeping the amplified charge is caught


def test_amplification_tight_in_the_two_point_extreme():
    """The bound's extreme (Balle et al.'s tightness): a step that is exactly eps-DP on one output gives
    the amplified ratio 1 - q + q e^eps when the subsets without i behave like D' (a = b')."""
    for n, m, eps in ((5, 2, 1.0), (7, 3, 2.5), (240, 32, 0.728)):
        q = m / n
        b_prime, b, a = 1.0, math.exp(eps), 1.0
        ratio = ((1 - q) * a + q * b) / ((1 - q) * a + q * b_prime)
        assert math.log(ratio) == pytest.approx(mozo.amplified_epsilon(eps, q), rel=1e-12)


SUB_EX = [(f"in {i}", f"out {i}") for i in range(240)]


def _sub_req(params=None, exemplars=SUB_EX, **kw):
    base = dict(epsilon=2.0, delta=1e-5, max_tokens=16)
    base.update(kw)
    p = {"subsample": True}
    p.update(params or {})
    return GenerationRequest.build(exemplars, "q", params=p, **base)


def test_subsampled_calibration_never_exceeds_the_target_and_matches_an_independent_accountant():
    from app.privacy.accountant import PureDPEvent, RdpAccountant

    rng = np.random.default_rng(1802)
    mech = get_generation_mechanism("mozo")
    cases = [(2.0, 1e-5, 16, 240, 32), (1.0, 1e-5, 16, 240, 32), (8.0, 1e-5, 16, 240, 32), (2.0, 0.0, 16, 240, 32)]
    cases += [(float(rng.uniform(0.2, 10)), float(rng.choice([0.0, 1e-6, 1e-5, 1e-3])), int(rng.integers(1, 64)),
               int(n), int(rng.integers(1, n + 1))) for n in rng.integers(4, 400, size=40)]
    for eps, delta, tokens, n, m in cases:
        req = _sub_req({"experts": m, "private_tokens": tokens}, exemplars=SUB_EX[:n] if n <= 240 else SUB_EX * 2, epsilon=eps, delta=delta,
                       max_tokens=tokens)
        n = len(req.exemplars)
        cfg = mozo.configure(req)
        cost = mech.cost(req)
        et = cfg.epsilon_per_token
        ep = _ref_amplified(et, m, n)
        # independent recomposition: pure-DP events through the accountant, or basic composition
        basic = tokens * ep
        indep = basic if delta == 0 else min(
            basic, RdpAccountant(adjacency="replace-one").compose(PureDPEvent(ep), count=tokens).get_epsilon(delta))
        assert indep <= eps * (1 + 1e-9)
        assert cost["epsilon"] == pytest.approx(indep, rel=1e-9) and cost["epsilon"] <= eps * (1 + 1e-9)
        assert cost["params"]["subsample"] is True and cost["params"]["sample_rate"] == pytest.approx(m / n)
        # maximal: a slightly larger eps_tok costs more than the target
        assert mozo.subsampled_total_epsilon(et * (1 + 1e-6), m / n, tokens, delta) > eps * (1 - 1e-6)
        # amplification helps (q < 1) and never hurts (q = 1 gives the unsubsampled pure-DP step)
        assert et >= eps / tokens * 0.999
    # the known-before-any-model-call cost depends on n and public params only
    a, b = mech.cost(_sub_req({"public_top_k": 5, "uniform_mix": 0.0})), mech.cost(_sub_req({"lambda_mode": "per_expert"}))
    assert a["epsilon"] == b["epsilon"] and a["rdp"] == b["rdp"]
    # eps 2 over 16 tokens, n = 240, E = 32: eps_tok ~3x the unsubsampled bounded-range 0.233
    cfg = mozo.configure(_sub_req({"experts": 32}))
    assert 0.70 < cfg.epsilon_per_token < 0.76 and cfg.weight_experts == cfg.experts == 32
    # off by default: the existing cost is unchanged
    off = mech.cost(GenerationRequest.build(SUB_EX, "q", epsilon=2.0, delta=1e-5, max_tokens=16, params={}))
    assert off["method"] == "bounded-range-rdp" and "subsample" not in off["params"]


def test_subsampled_chooser_draws_fresh_uniform_subsets_and_steps_on_them():
    n, e, v = 12, 4, 6
    cfg = mozo.configure(_sub_req({"experts": e, "public_top_k": 0, "lambda_mode": "public"}, exemplars=SUB_EX[:n],
                                  max_tokens=4))
    rng = np.random.default_rng(1803)
    logits = rng.normal(0, 3, size=(n, v))
    public = rng.normal(0, 1, size=v)
    choose = mozo.chooser(cfg, np.random.default_rng(7), frozenset())
    seen = np.zeros(n)
    steps = 3000
    for _ in range(steps):
        tok, info = choose(logits, public)
        s = np.array(info["subset"])
        assert s.size == e and np.unique(s).size == e
        seen[s] += 1
    # inclusion frequency E/n per exemplar (binomial s.e. ~0.0086 at 3000 steps)
    assert np.all(np.abs(seen / steps - e / n) < 0.05)
    # the step is the unsubsampled step on the drawn rows
    tok, info = mozo.chooser(cfg, np.random.default_rng(9), frozenset())(logits, public)
    cand = np.arange(v)
    base = mozo.base_distribution(public, cand, cfg.uniform_mix)
    lam = mozo.calibrate_lambda(cfg.epsilon_per_token, cfg.weight, *mozo.two_smallest(base))
    lq = mozo.step_log_probs(logits[info["subset"]], cand, base, lam, cfg.weight)
    assert info["log_prob"] == pytest.approx(float(lq[cand.tolist().index(tok)]), rel=1e-12)
    with pytest.raises(RuntimeError):
        choose(logits[:e], public)  # a session that is not one row per exemplar is refused


@pytest.mark.parametrize("params, kw, field", [
    ({"experts": 41}, {"exemplars": SUB_EX[:40]}, "params.subsample"),  # n < m
    ({}, {"adjacency": "add-remove"}, "params.subsample"),
    ({"group_size": 2}, {}, "params.group_size"),
    ({"subsample": "yes"}, {}, "params.subsample"),
    ({"subsample": 1}, {}, "params.subsample"),
    ({"epsilon_per_token": 3.0}, {}, "params.epsilon_per_token"),
])
def test_subsample_bad_params_name_the_field(params, kw, field):
    with pytest.raises(MechanismParamError) as e:
        get_generation_mechanism("mozo").cost(_sub_req(params, **kw))
    assert e.value.param == field


def test_subsample_given_epsilon_per_token_within_budget_is_kept():
    cfg = mozo.configure(_sub_req({"epsilon_per_token": 0.5}))
    assert cfg.epsilon_per_token == 0.5 and cfg.subsample
    assert mozo.configure(_sub_req({"subsample": "false"})).population is None


def test_subsample_served_over_http_private_and_chat_endpoints(live_server):
    """``params.subsample`` (and ``private_tokens``) pass through /v1/private/generate and the chat endpoint's
    dp_params unchanged; a bad value is a 422 naming the field, refused before any charge."""
    httpx = pytest.importorskip("httpx")
    body = {"name": "gen", "task": "generation",
            "template": {"instruction": "Summarize.", "input_prefix": "Text:", "output_prefix": "Summary:"},
            "budget": {"epsilon": 20.0, "delta": 1e-5},
            "exemplars": [{"input": f"Ann meets Bo on day {i}.", "output": f"Ann and Bo meet ({i})."} for i in range(6)]}
    r = httpx.post(f"{live_server}/v1/datasets", json=body)
    assert r.status_code == 201, r.text
    ds = r.json()["id"]
    url = f"{live_server}/v1/private/generate"
    req = dict(dataset_id=ds, query="Cy meets Di on Friday.", mechanism="mozo", epsilon=2.0, max_tokens=1,
               params={"experts": 2, "subsample": True}, return_internals=True)
    r = httpx.post(url, json=req, timeout=600)
    assert r.status_code == 200, r.text
    b = r.json()
    p = b["privacy"]
    assert 0 < p["epsilon"] <= 2.0 and p["params"]["subsample"] is True
    assert p["params"]["population"] == 6 and p["params"]["sample_rate"] == pytest.approx(2 / 6)
    assert len(b["internals"]["steps"][0]["subset"]) == 2
    for params, kw, field in (({"experts": 7, "subsample": True}, {}, "params.subsample"),
                              # (add-remove: the dataset's replace-one ledger refuses it first, naming adjacency)
                              ({"subsample": True}, {"adjacency": "add-remove"}, "adjacency"),
                              ({"subsample": "maybe"}, {}, "params.subsample"),
                              ({"experts": 2, "private_tokens": 2}, {}, "params.private_tokens")):  # > max_tokens
        r = httpx.post(url, json={**req, "params": params, **kw}, timeout=600)
        assert r.status_code == 422 and r.json()["error"]["param"] == field, r.text
    # private_tokens: one private step then the zero-shot continuation, charged as a one-token answer
    r = httpx.post(url, json={**req, "max_tokens": 3, "params": {"experts": 2, "private_tokens": 1}}, timeout=600)
    assert r.status_code == 200, r.text
    b = r.json()
    assert b["privacy"]["params"]["compositions"] == 1 and "0-DP" in b["privacy"]["params"]["public_continuation"]
    assert b["internals"]["private_steps"] == 1 and b["internals"]["public_steps"] == len(b["internals"]["steps"]) - 1

    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=f"{live_server}/v1", api_key="unused-in-open-mode", timeout=600)
    resp = client.chat.completions.create(
        model="smollm2-135m-instruct", max_tokens=1, messages=[{"role": "user", "content": "Cy meets Di."}],
        extra_body={"dataset_id": ds, "mechanism": "mozo", "epsilon": 1.0,
                    "dp_params": {"experts": 2, "subsample": True}})
    dp = resp.model_extra["dp"]
    assert dp["privacy"]["params"]["subsample"] is True and 0 < dp["privacy"]["epsilon"] <= 1.0
    with pytest.raises(openai.UnprocessableEntityError):
        client.chat.completions.create(model="smollm2-135m-instruct", messages=[{"role": "user", "content": "x"}],
                                       extra_body={"dataset_id": ds, "mechanism": "mozo", "epsilon": 1.0,
                                                   "dp_params": {"experts": 9, "subsample": True}})
    assert httpx.get(f"{live_server}/v1/datasets/{ds}/budget").json()["charges"] == 3


def test_private_tokens_charge_is_the_k_token_charge_and_bad_values_name_the_field():
    """``private_tokens`` K: the budget is spread over K steps (the rest are greedy zero-shot, 0-DP), so the
    cost at max_tokens 32 equals the cost of a K-token answer, with and without subsampling."""
    mech = get_generation_mechanism("mozo")
    for extra in ({}, {"subsample": True, "experts": 8}):
        k16 = mech.cost(_req({**extra, "private_tokens": 16}))
        short = mech.cost(_req(extra, max_tokens=16))
        full = mech.cost(_req({**extra, "private_tokens": 32}))
        assert mech.cost(_req(extra))["params"]["compositions"] == 16  # the default: min(16, max_tokens)
        assert k16["epsilon"] == short["epsilon"] and k16["rdp"] == short["rdp"]
        assert k16["params"]["compositions"] == 16 and full["params"]["compositions"] == 32
        assert k16["params"]["epsilon_per_token"] > full["params"]["epsilon_per_token"]
        assert full["params"]["public_continuation"] is None and "0-DP" in k16["params"]["public_continuation"]
    assert mech.cost(_req({"private_tokens": 32}))["params"]["public_continuation"] is None
    for bad in (0, 33, "x", 2.5):
        with pytest.raises(MechanismParamError) as e:
            mech.cost(_req({"private_tokens": bad}))
        assert e.value.param == "params.private_tokens"
