"""Decoy labels in black-box canary audits, fixed design vs sequential (docs/audit.md#decoy-labels, issue 28).

Simulated report-noisy-max targets seen black-box (the released label only), 12 exemplars, the query's
labels ``weather, music`` plus N decoys (``app.audit.queries.with_decoys``), the one-vote design model
(with the canary one partition votes ``weather``, the rest ``music``; decoys get no votes). The design is
the planner's recommendation for these labels and ALTERNATIVES (``plan_audit``, as ``dpicl audit plan``
gives it); per target mode: the fixed design's campaign and verdict, the sequential audit on the same
partitions alone and with its probe; mean prompts (model calls) and verdicts over REPS audits::

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/bench_decoy_labels.py 40 1 noise_quarter,no_noise,winner_only
"""

from __future__ import annotations

import sys
import time
from typing import Any

import numpy as np

from app.audit import SimulatedVotingTarget, resolve_query, rnm_noise
from app.audit.planner import plan_audit
from app.audit.probe import probe_arm
from app.audit.queries import with_decoys
from app.audit.sequential import run_sequential
from benchmarks.ci_sequential_compare import CANARY, EXEMPLARS, N, BlackBox, _fixed, _params

MODES = {"correct": None, "sigma_quarter": "noise_quarter", "sigma_tenth": "noise_tenth", "winner_only": "winner_only",
         "no_noise": {"noise_multiplier": 1e-12}}


def _plan(eps: float, labels: int, alts: list[str]) -> dict[str, Any]:
    def noise_for(t: int, s: int) -> Any:
        return rnm_noise({"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": s}, N)

    return plan_audit(noise_for, labels=labels, exemplars=N, partitions=4, shots_per_partition=3, claimed_epsilon=eps,
                      confidence=0.95, delta=1e-5, alternatives=alts, white_box=False)["recommended"]


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    decoys = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [0, 1]
    alts = sys.argv[3].split(",") if len(sys.argv) > 3 else ["noise_quarter", "no_noise", "winner_only"]
    print(f"alternatives: {', '.join(alts)}; {reps} audits per row; sequential cap 4000 trials")
    for eps in (1.0, 2.0):
        for d in decoys:
            labels = with_decoys(["weather", "music"], d)
            rec = _plan(eps, len(labels), alts)
            t, trials = rec["partitions"], rec["trials"]
            print(f"eps={eps:g} decoys={d}: planned design {t} partitions x {rec['shots_per_partition']} shots, "
                  f"{trials} trials ({rec['model_calls']} prompts), predicted detection {rec['detection']}", flush=True)
            attack = resolve_query("input_output", CANARY, labels, EXEMPLARS, None)
            vw, vo = np.zeros(len(attack.labels)), np.zeros(len(attack.labels))
            vw[0], vw[1], vo[1] = 1.0, t - 1.0, float(t)
            for mode, bug in MODES.items():
                for run in ("fixed", "seq", "seq+probe"):
                    res, t0 = [], time.time()
                    for s in range(reps):
                        nz = rnm_noise(_params(eps, t), N)
                        sim = SimulatedVotingTarget(vw, vo, nz.with_bug(bug))
                        if run == "fixed":
                            verdict = _fixed(BlackBox(sim), attack, eps, trials, s, labels, alts)[0]
                            res.append((verdict, (trials // 2 * 2) * t))
                            continue
                        arm = probe_arm(sim, N, nz, t) if run == "seq+probe" else None
                        if arm is not None:
                            arm.target = BlackBox(arm.target)
                        r = run_sequential(BlackBox(sim), EXEMPLARS, attack, claimed_epsilon=eps, delta=1e-5, noise=nz,
                                           partitions=t, alternatives=alts, alpha=0.05, cap=4000,
                                           rng=np.random.default_rng(s), probe=arm)
                        res.append((r.verdict, r.prompts))
                    vs = [v for v, _ in res]
                    print(f"  {mode:14s} {run:9s} prompts={np.mean([p for _, p in res]):7.1f} "
                          + " ".join(f"{v}:{vs.count(v)}" for v in sorted(set(vs))) + f"  ({time.time() - t0:.0f}s)",
                          flush=True)


if __name__ == "__main__":
    main()
