"""ICLInf on the bundled SmolLM2-135M-Instruct: the shared-prefix family equals plain calls, duplicates vs
only exemplars, a small ICLInf run, and the decoding audit below its theory."""

from __future__ import annotations

import numpy as np
import pytest

from app.audit.iclinf import iclinf, iclinf_query
from app.audit.iclinf_decoding import (
    GENERATION_TEMPLATES,
    audit_decoding,
    generation_batches,
)
from app.audit.iclinf_forward import score_family
from app.icl import load_bundled


@pytest.fixture(scope="module")
def task():
    return load_bundled()


def by_label(ds):
    out: dict[str, list[tuple[str, str]]] = {}
    for x, lab in ds.exemplars():
        out.setdefault(lab, []).append((x, lab))
    return out


def test_family_equals_plain_calls_and_computes_the_trie_minimum(lm, task):
    ex = task.exemplars()[:2]
    tpl = task.template
    q = task.test[0].input
    sets = [ex] + [ex[:i] + ex[i + 1:] for i in range(2)]
    prompts = [tpl.render(s, x, task.labels) for s in sets for x in (q, "N/A")]
    conts = tpl.continuations(task.labels) + [" " + task.labels[0] + " request"]  # one multi-token label
    lm.clear_prefix_cache()
    trie = score_family(lm, prompts, conts, full=True)
    plain = score_family(lm, prompts, conts, full=True, use_trie=False)
    assert trie.counts.path == "trie" and plain.counts.path == "plain"
    np.testing.assert_allclose(trie.label_logprobs, plain.label_logprobs, atol=2e-4)
    np.testing.assert_allclose(trie.next_logprobs, plain.next_logprobs, atol=2e-4)
    c = trie.counts
    assert c.tokens_computed == c.tokens_minimum  # every distinct position once, nothing more
    assert c.tokens_minimum < c.tokens_naive / 2 and plain.counts.tokens_computed > c.tokens_naive
    assert c.forward_calls <= 4
    again = score_family(lm, prompts, conts, full=False)  # the instruction now comes from the prefix LRU
    assert again.counts.tokens_computed == again.counts.tokens_minimum < c.tokens_minimum
    np.testing.assert_allclose(again.label_logprobs, plain.label_logprobs, atol=2e-4)


def test_removing_a_duplicate_changes_little_removing_the_only_exemplar_of_a_label_a_lot(lm, task):
    # Two labels; S = (x, x, y): without either copy of x the prompt is (x, y); without y no demonstration
    # of y's label is left. (The only exemplar is last, where recency adds to it; "y y x" behaves alike.)
    groups = by_label(task)
    for la, lb, order in ((0, 1, "xxy"), (2, 3, "yyx")):
        a, b = task.labels[la], task.labels[lb]
        x, y = groups[a][0], groups[b][0]
        ex = [x, x, y] if order == "xxy" else [y, y, x]
        query = next(e.input for e in task.test if e.output == a)
        r = iclinf_query(lm, ex, query, (a, b), task.template)
        dup, only = r.per_position[0], r.per_position[2]
        assert r.per_position[0] == r.per_position[1]  # the same neighbouring prompt
        assert dup < 1.5 and only > 2.0 and only > 3 * dup, (a, b, r.per_position)


def test_small_iclinf_runs_label_calibrated_and_full(lm, task):
    lab = iclinf(lm, task.exemplars(), task.exemplars("test"), task.labels, task.template, n_shots=2, m=1,
                 calibrate=True, seed=1)
    full = iclinf(lm, task.exemplars(), task.exemplars("test"), task.labels, task.template, n_shots=2, m=2,
                  variant="full", seed=1)
    for r in (lab, full):
        assert len(r.per_position_mean) == 2 and np.isfinite(r.mean) and r.mean > 0
        assert r.counts["tokens_computed"] == r.counts["tokens_minimum"] and r.counts["path"] == "trie"
        assert r.mean == pytest.approx(np.mean([q.loss for q in r.queries]))
    assert lab.accuracy in (0.0, 1.0) and full.accuracy is None and full.m == 2
    d = full.to_dict(queries=True)
    assert d["iclinf_mean"] == full.mean and len(d["queries"]) == 2 and "per_position" in d["queries"][0]


@pytest.mark.parametrize("neighbour", ["zero-out", "remove"])
def test_decoding_audit_on_the_model_stays_below_theory(lm, task, neighbour):
    batches, _, _ = generation_batches(task.exemplars(), batch_size=3, sequences=1, label=None,
                                           template=GENERATION_TEMPLATES["generic"], rng=np.random.default_rng(0))
    for target in (1.0, 8.0):
        res = audit_decoding(lm, batches, clip=10.0, delta=1e-5, max_tokens=3, target_epsilon=target,
                             neighbour=neighbour, rng=np.random.default_rng(1))
        assert 1 <= res.tokens <= 3 and all(x >= 0 for x in res.per_token)
        assert res.epsilon_theoretical <= target * (1 + 1e-12)
        assert res.epsilon_empirical <= res.epsilon_theoretical
        assert res.rdp_empirical <= res.rdp_theoretical * res.tokens / 3 * (1 + 1e-9)  # per-token bound, Thm C.6
