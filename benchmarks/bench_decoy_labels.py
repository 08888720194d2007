"""Decoy labels in black-box sequential canary audits (docs/audit.md#decoy-labels, issue 28).

Simulated report-noisy-max targets seen black-box (the released label only) on the compare design of
``benchmarks/ci_sequential_compare.py`` (12 exemplars, the planner's T at claims 1 and 2), the query's
labels ``weather, music`` plus N decoys (``app.audit.queries.with_decoys``); the one-vote design model
(with the canary one partition votes ``weather``, the rest ``music``; decoys get no votes). Per target
mode and probe off/on: mean prompts and verdicts over REPS audits (seeds 0..REPS-1)::

    PYTHONPATH=. OMP_NUM_THREADS=1 python benchmarks/bench_decoy_labels.py 40 1 noise_quarter,no_noise,winner_only
"""

from __future__ import annotations

import sys
import time

import numpy as np

from app.audit import SimulatedVotingTarget, resolve_query, rnm_noise
from app.audit.probe import probe_arm
from app.audit.queries import with_decoys
from app.audit.sequential import run_sequential
from benchmarks.ci_sequential_compare import CANARY, EXEMPLARS, N, BlackBox, _params, plan

MODES = {"correct": None, "sigma_quarter": "noise_quarter", "sigma_tenth": "noise_tenth", "winner_only": "winner_only",
         "no_noise": {"noise_multiplier": 1e-12}}


def main() -> None:
    reps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    decoys = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [0, 1]
    alts = sys.argv[3].split(",") if len(sys.argv) > 3 else ["noise_quarter", "no_noise", "winner_only"]
    print(f"alternatives: {', '.join(alts)}; {reps} audits per row; cap 4000 trials")
    for eps in (1.0, 2.0):
        t = plan(eps)["partitions"]
        for d in decoys:
            attack = resolve_query("input_output", CANARY, with_decoys(["weather", "music"], d), EXEMPLARS, None)
            vw, vo = np.zeros(len(attack.labels)), np.zeros(len(attack.labels))
            vw[0], vw[1], vo[1] = 1.0, t - 1.0, float(t)
            for mode, bug in MODES.items():
                for probe in (False, True):
                    res, t0 = [], time.time()
                    for s in range(reps):
                        nz = rnm_noise(_params(eps, t), N)
                        sim = SimulatedVotingTarget(vw, vo, nz.with_bug(bug))
                        arm = probe_arm(sim, N, nz, t) if probe else None
                        if arm is not None:
                            arm.target = BlackBox(arm.target)
                        r = run_sequential(BlackBox(sim), EXEMPLARS, attack, claimed_epsilon=eps, delta=1e-5, noise=nz,
                                           partitions=t, alternatives=alts, alpha=0.05, cap=4000,
                                           rng=np.random.default_rng(s), probe=arm)
                        res.append((r.verdict, r.prompts))
                    vs = [v for v, _ in res]
                    print(f"eps={eps:g} T={t} decoys={d} {mode:14s} probe={probe!s:5s} "
                          f"prompts={np.mean([p for _, p in res]):7.1f} "
                          + " ".join(f"{v}:{vs.count(v)}" for v in sorted(set(vs))) + f"  ({time.time() - t0:.0f}s)",
                          flush=True)


if __name__ == "__main__":
    main()
