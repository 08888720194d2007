"""The mechanisms end to end with the real bundled model (SmolLM2-135M-Instruct), kept small."""

from __future__ import annotations

import statistics
import time

import numpy as np
import pytest

from app.mechanisms import get_mechanism
from app.mechanisms.verify import max_log_ratio

from .conftest import CountingLM

pytestmark = pytest.mark.usefixtures("one_thread")


def _setup(task, n=4):
    return task.exemplars()[:n], task.test[0].input, task.labels, task.template


@pytest.mark.parametrize(
    "name,params,batch",
    [
        ("zero_shot", {}, 1),
        ("icl", {}, 1),
        ("rnm", {"epsilon": 2.0}, 4),  # 4 one-shot partitions
        ("rnm", {"epsilon": 2.0, "shots_per_partition": 2, "noise": "laplace"}, 2),
        ("poe", {"epsilon": 2.0}, 4),  # 4 experts
    ],
)
def test_one_batched_model_call_and_result_shape(lm, task, name, params, batch):
    ex, q, labels, tpl = _setup(task)
    counting = CountingLM(lm)
    res = get_mechanism(name).classify(counting, ex, q, labels, tpl, params, np.random.default_rng(0))
    assert counting.calls == [("continuation_logprobs", batch)]
    assert res.label in labels and res.label == labels[res.label_index] and res.mechanism == name
    assert {"epsilon", "delta", "adjacency", "mechanism", "params", "is_private"} <= set(res.privacy)
    if name == "rnm":
        assert res.internals["clean_votes"].sum() == batch
        assert res.internals["noisy_votes"].shape == (len(labels),)
        assert sorted(i for u in res.internals["partitions"] for i in u) == list(range(batch * (4 // batch)))
    if name == "poe":
        assert res.internals["clipped_utility_sums"].shape == (len(labels),)
        assert np.all(res.internals["clipped_utility_sums"] >= -batch * res.privacy["params"]["clip"])
        assert sum(res.distribution.values()) == pytest.approx(1.0)
    if name == "icl":
        assert res.privacy["epsilon"] is None  # no guarantee
    if name == "zero_shot":
        assert res.privacy["epsilon"] == 0.0


def test_calibrated_partitions_still_one_call(lm, task):
    ex, q, labels, tpl = _setup(task, 2)
    counting = CountingLM(lm)
    res = get_mechanism("rnm").classify(counting, ex, q, labels, tpl, {"calibrate": True}, np.random.default_rng(0))
    # 2 partitions, each with its 3 content-free twins (N/A, "", [MASK]): one call of 8 prompts.
    assert counting.calls == [("continuation_logprobs", 8)]
    assert res.internals["partition_label_probs"].shape == (2, len(labels))


def test_classify_is_release_of_the_scored_partitions(lm, task):
    """classify = partition + scoring + release: the same generator state gives the same answer."""
    ex, q, labels, tpl = _setup(task)
    for name in ("rnm", "poe"):
        mech = get_mechanism(name)
        res = mech.classify(lm, ex, q, labels, tpl, {"epsilon": 1.0}, np.random.default_rng(11))
        key = "partition_label_probs" if name == "rnm" else "expert_label_probs"
        g = np.random.default_rng(11)
        g.permutation(len(ex))  # the partition draw consumes the generator first
        again = mech.release(res.internals[key], labels, {"epsilon": 1.0}, len(ex), g)
        assert again.label == res.label
        assert np.allclose(again.internals.get("noisy_votes", again.internals.get("noisy_scores")),
                           res.internals.get("noisy_votes", res.internals.get("noisy_scores")))


def test_real_neighbouring_exemplar_sets_exact_ratio(lm, task):
    """PoE's exact output law on real neighbouring exemplar sets (the model's own outputs):
    every ratio within e^eps under both adjacencies; RNM-Gumbel on the same outputs too.
    Each set goes through ``classify`` once; the other adjacency's law is ``release`` of the
    same scored experts (the private step classify runs)."""
    pool = task.exemplars()[:3]
    d = pool[:2]
    q, labels, tpl = task.test[1].input, task.labels, task.template
    poe, rnm = get_mechanism("poe"), get_mechanism("rnm")
    eps = 1.0
    sets = {"replace-one": [[pool[2], d[1]], [d[0], pool[2]]], "add-remove": [[d[0]], [d[1]], d + [pool[2]]]}
    scored = {}
    for s in [d] + sets["replace-one"] + sets["add-remove"]:
        res = poe.classify(lm, s, q, labels, tpl, {"epsilon": eps, "clip": 2.0}, np.random.default_rng(0))
        scored[tuple(s)] = res.internals["expert_label_probs"]

    def law(mech, s, params):
        r = mech.release(scored[tuple(s)], labels, params, len(s), np.random.default_rng(0))
        return np.array([r.distribution[y] for y in labels])

    for adjacency, neighbours in sets.items():
        for mech, params in (
            (poe, {"epsilon": eps, "adjacency": adjacency, "clip": 2.0}),
            (rnm, {"epsilon": eps, "adjacency": adjacency, "noise": "gumbel"}),
        ):
            p0 = law(mech, d, params)
            for s in neighbours:
                assert max_log_ratio(p0, law(mech, s, params)) <= eps * (1 + 1e-9)


def test_rnm_latency_within_1_5x_icl(lm, task):
    """Issue 3: rnm with T = 4 costs at most 1.5x icl with the same 4 exemplars in one prompt
    (same process, interleaved, ratio of medians, prefix cache cleared before each call).

    Runs on CUDA, or on CPU when DPICL_TEST_LATENCY=1: on the shared 2-core CPU a wall-clock
    ratio needs ~30 s and is at the mercy of the other processes' load, so the default CPU run
    leaves it to ``benchmarks/bench_classify.py latency`` (docs/mechanisms.md has the numbers)."""
    import os

    import torch

    on_gpu = lm.capabilities().device != "cpu" and torch.cuda.is_available()
    if not on_gpu and os.environ.get("DPICL_TEST_LATENCY") != "1":
        pytest.skip("CPU wall-clock ratio is opt-in (DPICL_TEST_LATENCY=1); see bench_classify.py latency")
    ex, _, labels, tpl = _setup(task)
    rnm, icl = get_mechanism("rnm"), get_mechanism("icl")
    queries = [e.input for e in task.test[:5]]
    times: dict[str, list[float]] = {"rnm": [], "icl": []}
    for i, q in enumerate([queries[0]] + queries):  # the first round warms up
        for name, mech in (("rnm", rnm), ("icl", icl)):
            lm.clear_prefix_cache()
            t = time.perf_counter()
            mech.classify(lm, ex, q, labels, tpl, {"epsilon": 1.0} if name == "rnm" else {}, np.random.default_rng(0))
            if i:
                times[name].append(time.perf_counter() - t)
    assert statistics.median(times["rnm"]) <= 1.5 * statistics.median(times["icl"])
