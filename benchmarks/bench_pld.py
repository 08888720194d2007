"""Issue 30: answers per default budget by RDP (the ledger before) vs PLD (now), and the cost of one
charge after N entries. Pure math in one process (no database: the ledger's own ``compose`` on its
own ``BudgetState``, the per-answer costs from the real ``rnm`` mechanism).

    python benchmarks/bench_pld.py            # table
    python benchmarks/bench_pld.py --json     # machine-readable

Goals: >= 10% more Gaussian rnm answers per budget (epsilon 8, delta 1e-5) at per-answer
epsilon 0.25, 0.5, 1; one charge (compose the state plus one answer) < 2 ms after 10,000 entries.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.budget.composition import BudgetState, Charge, compose, fits  # noqa: E402
from app.budget.forecast import count_answers, repeat  # noqa: E402
from app.mechanisms.rnm import RNM  # noqa: E402

BUDGET_EPS, BUDGET_DELTA = 8.0, 1e-5


def rnm_charge(noise: str, epsilon: float, pld: bool = True) -> Charge:
    """One rnm answer's charge, as ``app.budget.ledger.charge_of`` builds it (pld=False: the old ledger)."""
    c = RNM().cost({"epsilon": epsilon, "delta": BUDGET_DELTA, "noise": noise, "adjacency": "replace-one",
                    "partitions": 4, "shots_per_partition": 1})
    spec = None
    if pld and c.get("pld"):
        from app.privacy.pld import PldSpec

        spec = PldSpec.from_dict(c["pld"])
    return Charge(c["epsilon"], c["delta"], c["orders"], c["rdp"], spec)


def answers_per_budget() -> list[dict]:
    rows = []
    for noise in ("gaussian", "laplace"):
        for eps in (1.0, 0.5, 0.25):
            old = count_answers(BudgetState(), rnm_charge(noise, eps, pld=False), BUDGET_EPS, BUDGET_DELTA)
            new = count_answers(BudgetState(), rnm_charge(noise, eps), BUDGET_EPS, BUDGET_DELTA)
            rows.append({"noise": noise, "epsilon_per_answer": eps, "answers_rdp": old.answers,
                         "answers_pld": new.answers, "gain": new.answers / old.answers - 1.0,
                         "route_after": new.method, "epsilon_spent_after": new.epsilon_spent_after})
    return rows


def _time_charge(state: BudgetState, c: Charge, repeats: int) -> float:
    """Median seconds of what a charge computes: add one answer, compose at the budget's delta, test the fit.
    Each repeat is a fresh count (the cache holds the previous ones), as consecutive charges are."""
    times = []
    for i in range(repeats):
        s = repeat(state, c, i)
        t0 = time.perf_counter()
        spent, _ = compose(s.add(c), BUDGET_DELTA)
        fits(spent, 1e9)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def charge_cost(repeats: int) -> list[dict]:
    rows = []
    gauss, lap = rnm_charge("gaussian", 0.05), rnm_charge("laplace", 0.05)
    # A history with no PLD (an RDP-only curve: the gumbel/exponential-mechanism rnm) for the mixed case.
    other = replace(rnm_charge("gumbel", 0.05), pld=None)
    for n in (10, 1_000, 10_000):
        row: dict = {"entries": n}
        for name, hist, c in (("gaussian", [gauss], gauss), ("laplace", [lap], lap),
                              ("mixed", [gauss, lap, other], gauss), ("rdp_only", [replace(gauss, pld=None)],
                                                                        replace(gauss, pld=None))):
            s = BudgetState()
            for h in hist:
                s = repeat(s, h, n // len(hist))
            row[f"{name}_ms"] = 1e3 * _time_charge(s, c, repeats)
        rows.append(row)
    return rows


def dp_accounting_cost(repeats: int) -> dict | None:
    """What dp_accounting would cost per charge at 10,000 Gaussian answers (the runtime-dependency option):
    rebuild by self-composition, or keep the composed PLD and compose one more answer; each then converts."""
    try:
        from dp_accounting.pld import privacy_loss_distribution as pld_lib
    except ImportError:
        return None
    sigma = RNM().cost({"epsilon": 0.05, "delta": BUDGET_DELTA, "partitions": 4})["params"]["sigma"]
    one = pld_lib.from_gaussian_mechanism(sigma, sensitivity=2**0.5, value_discretization_interval=1e-4)
    big = one.self_compose(10_000)

    def rebuild() -> None:
        one.self_compose(10_001).get_epsilon_for_delta(BUDGET_DELTA)

    def incremental() -> None:
        big.compose(one).get_epsilon_for_delta(BUDGET_DELTA)

    out = {}
    for name, fn in (("rebuild_ms", rebuild), ("incremental_ms", incremental)):
        ts = []
        for _ in range(max(3, repeats // 3)):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        out[name] = 1e3 * statistics.median(ts)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--repeats", type=int, default=15)
    a = ap.parse_args()
    out = {"python": platform.python_version(), "machine": platform.machine(), "budget": [BUDGET_EPS, BUDGET_DELTA],
           "answers": answers_per_budget(), "charge": charge_cost(a.repeats),
           "dp_accounting_10000": dp_accounting_cost(a.repeats)}
    if a.json:
        print(json.dumps(out, indent=2))
        return
    print(f"answers per budget (epsilon {BUDGET_EPS}, delta {BUDGET_DELTA}), rnm replace-one:")
    print(f"{'noise':9} {'eps/answer':>10} {'RDP':>6} {'PLD':>6} {'gain':>7}  route")
    for r in out["answers"]:
        print(f"{r['noise']:9} {r['epsilon_per_answer']:>10} {r['answers_rdp']:>6} {r['answers_pld']:>6} "
              f"{100 * r['gain']:>6.1f}%  {r['route_after']}")
    print("\none charge (compose + fit), median ms:")
    keys = [k for k in out["charge"][0] if k != "entries"]
    print(f"{'entries':>8} " + " ".join(f"{k:>12}" for k in keys))
    for r in out["charge"]:
        print(f"{r['entries']:>8} " + " ".join(f"{r[k]:>12.3f}" for k in keys))
    if out["dp_accounting_10000"]:
        d = out["dp_accounting_10000"]
        print(f"\ndp_accounting at 10,000 Gaussian answers: rebuild {d['rebuild_ms']:.1f} ms, "
              f"compose one more into a kept PLD {d['incremental_ms']:.1f} ms (each + conversion)")


if __name__ == "__main__":
    main()
