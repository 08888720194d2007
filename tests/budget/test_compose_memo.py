"""compose() remembers its last inputs (issue 27: an answer's precheck and its charge compose the same
state; the PLD route's root finding costs ~1-2 ms). The memo must return exactly what a fresh
composition returns, and never an answer for other inputs."""

from __future__ import annotations

import pytest

from app.budget import composition
from app.budget.composition import BudgetState, _compose, compose
from app.budget.ledger import charge_of
from app.mechanisms.rnm import RNM
from app.privacy.accountant import PrivacyCost


def _cost(noise: str, epsilon: float) -> PrivacyCost:
    return PrivacyCost.from_dict(RNM().cost({"epsilon": epsilon, "delta": 1e-5, "noise": noise, "partitions": 8,
                                             "shots_per_partition": 4, "adjacency": "replace-one"}))


def _states() -> list[BudgetState]:
    """Gaussian (PLD route), pure (RDP / basic), mixed, and the same with one more answer."""
    out = []
    for mix in (["gaussian"] * 3, ["gumbel"] * 3, ["gaussian", "gumbel", "gaussian", "laplace"]):
        s = BudgetState()
        for i, noise in enumerate(mix):
            s = s.add(charge_of(_cost(noise, 0.5 + 0.25 * i)))
            out.append(s)
    return out


@pytest.mark.parametrize("delta", [1e-5, 1e-6])
def test_memo_returns_what_a_fresh_composition_returns(delta):
    composition._MEMO.clear()
    states = _states()
    fresh = [_compose(s, delta) for s in states]
    first = [compose(s, delta) for s in states]  # computed and remembered
    again = [compose(s.copy(), delta) for s in states]  # equal inputs, other objects: from the memo
    assert first == fresh and again == fresh
    # A state one answer further on, or another delta, is another key: never a remembered answer.
    for mix in range(3):
        eps = [e for e, _ in fresh[3 * mix:3 * mix + 3]] if mix < 2 else [e for e, _ in fresh[6:]]
        assert all(a < b for a, b in zip(eps, eps[1:]))
    assert compose(states[1], delta * 10)[0] < fresh[1][0]


def test_memo_is_bounded_and_keyed_by_every_input():
    composition._MEMO.clear()
    base = _states()[1]
    seen = set()
    for i in range(composition._MEMO_SIZE + 20):
        s = base.copy()
        s.basic_epsilon += i * 1e-9  # a different input, even where the result may not change
        seen.add(composition._memo_key(s, 1e-5))
        compose(s, 1e-5)
    assert len(seen) == composition._MEMO_SIZE + 20
    assert len(composition._MEMO) == composition._MEMO_SIZE
    s = base.copy()
    s.pld_counts = {**s.pld_counts, "other": 1}
    assert composition._memo_key(s, 1e-5) != composition._memo_key(base, 1e-5)
