"""Generation audits of the bundled SmolLM2-135M + MiniLM with real calls (few: CPU).

ESA answers with free text; the campaign turns it into decisions with the auditor's embedder.
What is asserted is the code path and its bookkeeping (decisions equal recomputed distances,
the model is called exactly as often as claimed, the gateway answers like the in-process
mechanism); the leakage the small model shows is printed for docs/audit.md, not asserted.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from app.audit import CampaignConfig, make_canary, run_campaign
from app.audit.gen_targets import GenerationMechanismTarget, RemoteGenerationTarget

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = {"instruction": "Summarize the dialogue in one sentence.", "input_prefix": "Dialogue:",
            "output_prefix": "Summary:"}
ESA = {"epsilon": 4.0, "delta": 1e-5, "partitions": 2, "shots_per_partition": 1, "candidates": 3}


@pytest.fixture(scope="module")
def exemplars():
    rows = [json.loads(x) for x in (ROOT / "app/icl/data/gen_dialogsum.jsonl").read_text().splitlines() if x.strip()]
    short = sorted((r for r in rows if r["split"] == "train"), key=lambda r: len(r["input"]))[:2]
    return [(r["input"], r["output"]) for r in short]


def _canary():
    c = make_canary("false_fact", np.random.default_rng(0), label="unused")
    return type(c)(c.kind, c.text, c.text)  # a generation record: the canary is its own output


def test_esa_direct_signal_text_decisions_match_the_embeddings(lm, embedder, exemplars):
    # 6 tokens: the decisions are checked against distances recomputed from the answers, at any length
    target = GenerationMechanismTarget(lm, embedder, "esa", ESA, TEMPLATE, max_tokens=6)
    res = run_campaign(target, exemplars, _canary(), "signal_text", task_labels=[], template=TEMPLATE,
                       config=CampaignConfig(trials=4, threshold_fraction=0.5), rng=np.random.default_rng(0))
    assert target.calls == 4 and res.model_calls == 4
    assert res.epsilon_claimed == pytest.approx(4.0, rel=1e-6)
    assert set(res.estimates) == {"black-box", "white-box"}
    y1, y0 = res.attack.labels
    assert all(t["released"] in (y1, y0) for t in res.trials)
    # The white-box statistic is d0 - d1 of the noisy mean: recompute it for one observation.
    obs = target.observe(exemplars, res.attack, np.random.default_rng(1))
    e = np.asarray(embedder.embed([y1, y0]), dtype=float)
    d = np.linalg.norm(e - obs.noisy_vector[None, :], axis=1)
    np.testing.assert_allclose(obs.noisy_scores, -d, rtol=1e-9)
    et = np.asarray(embedder.embed([obs.text]), dtype=float)[0]
    assert obs.label == (y1 if np.linalg.norm(et - e[0]) < np.linalg.norm(et - e[1]) else y0)
    print("esa direct signal_text:", {k: (v.tpr, v.fpr, v.epsilon_lower) for k, v in res.estimates.items()})


def test_esa_bootstrap_calls_the_model_2_n_llm_times(lm, embedder, exemplars):
    target = GenerationMechanismTarget(lm, embedder, "esa", ESA, TEMPLATE, max_tokens=12)
    cfg = CampaignConfig(mode="bootstrap", n_llm=2, n_sample=50_000, statistic="reference_vector")
    res = run_campaign(target, exemplars, _canary(), "signal_text", task_labels=[], template=TEMPLATE, config=cfg,
                       rng=np.random.default_rng(2))
    assert target.calls == 4 and res.model_calls == 4
    assert res.naive_model_calls == 50_000 * 2 * (2 + 3)  # draws x hypotheses x (partitions + candidates)
    assert res.bootstrap is not None and res.bootstrap.convergence[-1]["n_sample"] == 50_000
    # Validity for the simulated mechanism: below the claim (95% confidence, Bonferroni over 2).
    assert res.epsilon <= 4.0
    print("esa bootstrap:", {k: (v.tpr, v.fpr, v.epsilon_lower, v.epsilon_gdp) for k, v in res.estimates.items()})


def test_repeat_attack_scores_black_box(lm, embedder, exemplars):
    target = GenerationMechanismTarget(lm, embedder, "full_context", {}, TEMPLATE, max_tokens=12)
    assert not target.white_box
    res = run_campaign(target, exemplars, _canary(), "repeat", task_labels=[], template=TEMPLATE,
                       config=CampaignConfig(trials=4), rng=np.random.default_rng(3))
    assert set(res.estimates) == {"black-box"} and res.epsilon_claimed is None
    bb = res.estimates["black-box"]
    assert bb.threshold is not None and bb.selection_trials >= 2
    assert all("black_box_score" in t and t["black_box_score"] <= 0 for t in res.trials)
    print("full_context repeat scores:", [(t["member"], round(t["black_box_score"], 3)) for t in res.trials])


def test_remote_gateway_generation_equals_in_process(live_server, lm, embedder, exemplars, database_url):
    if not database_url.startswith("sqlite"):
        # 25 s of model calls; the answers compared do not touch the database (the remote path through a
        # live server on PostgreSQL: test_remote_gateway_sequential_generation[postgres-*])
        pytest.skip("the answer-by-answer comparison runs once, against the SQLite server")
    # 6 tokens, not the 12 of the other tests here: the test compares the two paths answer by answer (the
    # same per-trial seeds: released label and white-box statistic), which any answer length shows; the
    # trials stay 4
    remote = RemoteGenerationTarget(live_server, embedder, "esa", dict(ESA), TEMPLATE, white_box=True, seeded=True,
                                    max_tokens=6)
    cfg = CampaignConfig(trials=4)
    try:
        rr = run_campaign(remote, exemplars, _canary(), "signal_text", task_labels=[], template=TEMPLATE,
                          config=cfg, rng=np.random.default_rng(5))
    finally:
        remote.close()
    assert len(remote.datasets) == 2 and rr.epsilon_claimed == pytest.approx(4.0, rel=1e-6)

    class SeededLocal(GenerationMechanismTarget):
        def observe(self, context, attack, rng):
            return super().observe(context, attack, np.random.default_rng(int(rng.integers(0, 2**53))))

    local = SeededLocal(lm, embedder, "esa", ESA, TEMPLATE, max_tokens=6)
    lr = run_campaign(local, exemplars, _canary(), "signal_text", task_labels=[], template=TEMPLATE, config=cfg,
                      rng=np.random.default_rng(5))
    assert [t["released"] for t in rr.trials] == [t["released"] for t in lr.trials]
    np.testing.assert_allclose([t["statistic"] for t in rr.trials], [t["statistic"] for t in lr.trials], rtol=1e-6)


def test_defences_on_a_generation_target(lm, embedder, exemplars):
    """L1 puts ContextLeak's App. B text in the prompt the model sees; L3 asks the judge about every
    answer and a refusal is decided as "not a member" (the lowest repeat score)."""
    from app.audit.defences import L1_PROMPT
    from app.audit.gen_queries import resolve_generation_query

    attack = resolve_generation_query("repeat", _canary())
    l1 = GenerationMechanismTarget(lm, embedder, "full_context", {}, TEMPLATE, max_tokens=8, defence="L1")
    assert L1_PROMPT in l1.request(exemplars, attack).template.instruction
    l3 = GenerationMechanismTarget(lm, embedder, "full_context", {}, TEMPLATE, max_tokens=8, defence="L3")
    res = run_campaign(l3, exemplars, _canary(), "repeat", task_labels=[], template=TEMPLATE,
                       config=CampaignConfig(trials=4), rng=np.random.default_rng(3))
    assert l3.judge_calls == 4 and 0 <= l3.refusals <= 4
    refused = [t for t in res.trials if t["black_box_score"] == -2.0]
    assert len(refused) == l3.refusals
    print("L3 on full_context repeat: refusals", l3.refusals, "of", l3.judge_calls)
