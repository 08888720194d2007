"""The canary audit of the synthesizer (``app.audit.synthesis``): the attack's statistic, and its
power against a synthesizer that leaks (a fake that copies the canary) vs one that cannot."""

from __future__ import annotations

import numpy as np
import pytest

from app.audit.synthesis import SynthesisAttack, canary_similarity, run_synthesis_audit

CANARY = "the secret code is 7f3a9c1e"
CONTEXT = [("turn the lamp on", "lights"), ("dim the lights", "lights"), ("play jazz", "music"),
           ("skip this song", "music")]


def test_statistic_exact_copy_and_label():
    assert canary_similarity(CANARY, f"hello {CANARY.upper()} bye") == 1.0
    assert canary_similarity(CANARY, "play some jazz music") < 0.2
    a = SynthesisAttack.read(CANARY, "lights", [("play jazz", "music"), (CANARY, "lights")])
    assert a.exact and a.label_copied and a.statistic == 1.0
    b = SynthesisAttack.read(CANARY, "lights", [(CANARY, "music")])
    assert b.exact and not b.label_copied


def _leaky(context, rng):
    """A broken synthesizer: releases an exemplar verbatim (always the canary when present)."""
    texts = [x for x, _ in context]
    return [(CANARY, "lights")] if CANARY in texts else [(texts[int(rng.integers(len(texts)))], "lights")]


def _blind(context, rng):
    """Reads nothing: epsilon 0."""
    return [("a request about " + ("lights" if rng.random() < 0.5 else "music"), "lights")]


def test_audit_refutes_a_leaky_synthesizer_and_not_a_blind_one():
    leaky = run_synthesis_audit(_leaky, CONTEXT, CANARY, "lights", trials=200, rng=np.random.default_rng(0),
                                epsilon_claimed=1.0, delta=1e-5)
    assert leaky.epsilon > 1.0  # the rigorous bound exceeds the (false) claim
    assert leaky.summary["exact_rate_member"] == 1.0 and leaky.summary["exact_rate_nonmember"] == 0.0
    blind = run_synthesis_audit(_blind, CONTEXT, CANARY, "lights", trials=200, rng=np.random.default_rng(0),
                                epsilon_claimed=1.0, delta=1e-5)
    assert blind.epsilon <= 1.0


def test_too_few_trials_and_missing_label_are_refused():
    with pytest.raises(ValueError):
        run_synthesis_audit(_blind, CONTEXT, CANARY, "weather", trials=10, rng=np.random.default_rng(0),
                            epsilon_claimed=1.0, delta=1e-5)
