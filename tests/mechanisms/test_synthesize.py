"""DP synthetic demonstrations (``app.mechanisms.synthesize``, Tang et al. 2024 Alg. 1).

* Sampled privacy of the per-token release: over two neighbouring private sets (one partition's
  next-token distribution swapped, the worst case of the sqrt 2 sensitivity), every event's
  frequency must satisfy P(S) <= e^eps P'(S) + delta within a Hoeffding tolerance; the same
  test rejects a variant that skips the noise and one with a tenth of it.
* Calibration and accounting against ``app.privacy``.
* One real-model run (SmolLM2, 2 labels x 1 shot x 4 tokens).
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from app.mechanisms import synthesize as syn
from app.mechanisms.errors import MechanismParamError
from app.privacy.accountant import GaussianEvent, RdpAccountant
from app.privacy.gaussian import gaussian_epsilon

V = 5  # candidate tokens
M = 4  # partitions


def _neighbours() -> tuple[np.ndarray, np.ndarray]:
    """Private next-token logits of M partitions over V candidates, D and D' differing in one
    partition whose distribution moves from (almost) all mass on token 0 to all on token 1:
    ||p - p'||_2 ~ sqrt 2, the worst case. The other partitions are split 0/1 evenly so that the
    change decides the argmax."""
    big = 30.0
    rows = np.zeros((M, V))
    rows[0, 0] = rows[1, 1] = big
    rows[2, 0] = rows[3, 1] = big
    d, dp = rows.copy(), rows.copy()
    dp[0] = 0.0
    dp[0, 1] = big
    return d, dp


def _freqs(release, sums: np.ndarray, n: int, seed: int) -> np.ndarray:
    draws = release(sums, np.random.default_rng(seed), n)
    return np.bincount(draws, minlength=V) / n


def _worst_violation(p: np.ndarray, q: np.ndarray, eps: float, delta: float) -> float:
    """max over events S of P(S) - e^eps Q(S) - delta, both directions."""
    worst = -math.inf
    for r in range(1, V + 1):
        for S in itertools.combinations(range(V), r):
            a, b = p[list(S)].sum(), q[list(S)].sum()
            worst = max(worst, a - math.exp(eps) * b - delta, b - math.exp(eps) * a - delta)
    return worst


def _tolerance(n: int, eps: float, beta: float = 1e-6) -> float:
    # Hoeffding per event and side, union bound over 2 sides x 2^V events: |P_hat - P| <= t w.p. 1 - beta.
    t = math.sqrt(math.log(2 * 2 * 2**V / beta) / (2 * n))
    return t * (1 + math.exp(eps))


EPS, DELTA, N_DRAWS = 1.0, 1e-5, 200_000


def _sigma_one_token() -> float:
    cfg = syn.plan(epsilon=EPS, delta=DELTA, labels=["a"], label_counts={"a": M}, shots_per_label=1,
                   max_tokens=1, partitions=M)
    assert cfg.compositions == 1
    return cfg.sigma


def test_sampled_release_meets_the_claimed_epsilon_delta():
    sigma = _sigma_one_token()
    d, dp = _neighbours()
    s, sp = syn.aggregate(d), syn.aggregate(dp)
    assert np.linalg.norm(s - sp) == pytest.approx(math.sqrt(2), abs=1e-9)  # the worst case is reached
    rel = lambda sums, rng, n: syn.release(sums, sigma, rng, size=n)
    p, q = _freqs(rel, s, N_DRAWS, 1), _freqs(rel, sp, N_DRAWS, 2)
    assert abs(p[0] - q[0]) > 0.05  # the change is visible: the test has something to check
    assert _worst_violation(p, q, EPS, DELTA) <= _tolerance(N_DRAWS, EPS)


@pytest.mark.parametrize("scale", [0.0, 0.1])
def test_sampled_test_rejects_missing_or_tiny_noise(scale):
    sigma = _sigma_one_token()
    d, dp = _neighbours()
    s, sp = syn.aggregate(d), syn.aggregate(dp)
    if scale == 0.0:
        rel = lambda sums, rng, n: np.full(n, int(np.argmax(sums)))  # the broken variant: no noise
    else:
        rel = lambda sums, rng, n: syn.release(sums, sigma * scale, rng, size=n)
    n = N_DRAWS // 4
    p, q = _freqs(rel, s, n, 1), _freqs(rel, sp, n, 2)
    assert _worst_violation(p, q, EPS, DELTA) > 5 * _tolerance(n, EPS)


def test_aggregate_restricts_and_renormalises_on_the_candidates():
    z = np.log(np.array([[0.5, 0.25, 0.25, 0.0 + 1e-300], [0.1, 0.1, 0.4, 0.4]]))
    s = syn.aggregate(z, np.array([0, 2]))
    assert s == pytest.approx([0.5 / 0.75 + 0.1 / 0.5, 0.25 / 0.75 + 0.4 / 0.5])
    assert syn.aggregate(z).sum() == pytest.approx(2.0)


def test_calibration_meets_the_budget_and_composes_over_streams_shots_tokens():
    counts = {"a": 10, "b": 12, "c": 9}
    cfg = syn.plan(epsilon=4.0, delta=1e-5, labels=["a", "b", "c"], label_counts=counts, shots_per_label=3,
                   max_tokens=8, partitions=4, shots_per_partition=2)
    assert cfg.streams == 2 and cfg.compositions == 2 * 3 * 8  # replace-one: two label streams
    cost = syn.cost(cfg)
    assert cost["epsilon"] <= 4.0 and cost["epsilon"] == pytest.approx(4.0, rel=1e-6)
    assert gaussian_epsilon(cfg.sigma, 1e-5, math.sqrt(2), 48) == pytest.approx(4.0, rel=1e-6)
    # The RDP curve is exactly that of 48 Gaussian releases at sensitivity sqrt 2: what the ledger composes.
    acc = RdpAccountant().compose(GaussianEvent(cfg.sigma, math.sqrt(2), 48))
    assert cost["rdp"] == pytest.approx(list(acc.rdp))
    assert acc.get_epsilon(1e-5) >= cost["epsilon"]  # RDP conversion is the looser of the two
    # add/remove: one stream, less noise for the same budget.
    ar = syn.plan(epsilon=4.0, delta=1e-5, labels=["a", "b", "c"], label_counts=counts, shots_per_label=3,
                  max_tokens=8, partitions=4, shots_per_partition=2, adjacency="add-remove")
    assert ar.compositions == 24 and ar.sigma < cfg.sigma
    # Default partitions: as many as the smallest label fills, capped.
    dflt = syn.plan(epsilon=4.0, delta=1e-5, labels=["a", "b", "c"], label_counts=counts, shots_per_label=1)
    assert dflt.partitions == 9 and dflt.shots_per_partition == 1


@pytest.mark.parametrize("kwargs, param", [
    ({"epsilon": 0}, "epsilon"),
    ({"delta": 0}, "delta"),
    ({"shots_per_label": 0}, "shots_per_label"),
    ({"max_tokens": 10_000}, "max_tokens"),
    ({"partitions": 6}, "partitions"),  # 6 x 1 > the 5 exemplars of label b
    ({"shots_per_partition": 6}, "shots_per_partition"),
    ({"public_top_k": -1}, "public_top_k"),
    ({"adjacency": "sideways"}, "adjacency"),
    ({"sigma": 0.01}, "sigma"),  # far too little noise for the budget
])
def test_bad_parameters_name_the_field(kwargs, param):
    base = dict(epsilon=1.0, delta=1e-5, labels=["a", "b"], label_counts={"a": 8, "b": 5}, shots_per_label=2,
                max_tokens=4)
    with pytest.raises(MechanismParamError) as ei:
        syn.plan(**{**base, **kwargs})
    assert ei.value.param == param


def test_real_model_two_labels_one_shot(lm, one_thread):
    """SmolLM2: 2 labels x 1 shot x 4 tokens from 2 partitions each; seeded runs repeat, the texts
    come from the public candidate sets, and no exemplar text is in the internals."""
    mark = "ZQ9"
    ex = [(f"{mark} the weather is sunny today", "weather"), (f"{mark} rain is expected tomorrow", "weather"),
          (f"{mark} play some jazz music", "music"), (f"{mark} put on my rock playlist", "music")]
    cfg = syn.plan(epsilon=8.0, delta=1e-5, labels=["weather", "music"], label_counts={"weather": 2, "music": 2},
                   shots_per_label=1, max_tokens=4, partitions=2)
    seen = []
    res = syn.synthesize(lm, ex, cfg, rng=np.random.default_rng(0), on_example=lambda d, t: seen.append((d, t)))
    again = syn.synthesize(lm, ex, cfg, rng=np.random.default_rng(0))
    assert res.examples == again.examples
    assert seen == [(1, 2), (2, 2)]
    assert {y for _, y in res.examples} <= {"weather", "music"}
    assert all(r["tokens"] <= 4 for r in res.internals["examples"])
    assert res.privacy["epsilon"] <= 8.0 and res.privacy["params"]["compositions"] == 2 * 1 * 4
    assert mark not in repr(res.internals) and mark not in repr(res.privacy)
    # Every released token was a public candidate: replay the public (exemplar-free) prompt.
    from app.mechanisms.gen_decode import eos_ids, open_session, public_candidates

    eos = sorted(eos_ids(lm))
    for rec in res.internals["examples"]:
        sess = open_session(lm, [syn.synthesis_prompt(rec["label"], [])], fresh=True)
        try:
            z = sess.logits[0]
            for tok in rec["token_ids"]:
                assert tok in set(public_candidates(z, cfg.public_top_k, eos).tolist())
                z = sess.step(tok)[0]
        finally:
            sess.close()
