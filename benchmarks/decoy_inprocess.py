"""Decoy labels on the real bundled model (docs/audit.md#decoy-labels): in-process ``rnm`` on SmolLM2
seen black-box (the released label only), the compare design's claims, one decoy, the sequential
audit with its probe; one audit per row. Also: how often the model's partitions vote for the decoy
(the design vote model assumes never), counted white-box on the same contexts. The decoy's name is
the first argument (default: ``with_decoys``' counted name, "weather (decoy 1)")::

    PYTHONPATH=. OMP_NUM_THREADS=2 python benchmarks/decoy_inprocess.py
    PYTHONPATH=. OMP_NUM_THREADS=2 python benchmarks/decoy_inprocess.py other
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np

from app.audit import MechanismTarget, resolve_query, rnm_noise
from app.audit.insertion import paired_contexts
from app.audit.probe import probe_arm
from app.audit.queries import with_decoys
from app.audit.sequential import run_sequential
from benchmarks.bench_audit import load_lm
from benchmarks.ci_sequential_compare import CANARY, EXEMPLARS, N, BlackBox, _params, plan

ALTS = ["noise_quarter", "no_noise", "winner_only"]


def main() -> None:
    lm = load_lm(1)
    decoys: int | list[str] = sys.argv[1:2] or 1
    attack = resolve_query("input_output", CANARY, with_decoys(["weather", "music"], decoys), EXEMPLARS, None)
    rows = []
    for eps in (1.0, 2.0):
        t = plan(eps)["partitions"]
        nz = rnm_noise(_params(eps, t), N)
        # votes of the real model on the paired contexts (white-box view of the correct mechanism)
        c1, c0 = paired_contexts(EXEMPLARS, attack.canary.exemplar(), 0)
        mt = MechanismTarget(lm, "rnm", _params(eps, t), {})
        rng = np.random.default_rng(0)
        votes = {m: mt.observe(c, attack, rng).clean_votes for m, c in (("with", c1), ("without", c0))}
        for mode, bug in (("correct", None), ("winner_only", "winner_only")):
            target = MechanismTarget(lm, "rnm", _params(eps, t), {}, bug=bug)
            arm = probe_arm(target, N, nz, t)
            if arm is not None:
                arm.target = BlackBox(arm.target)
            t0 = time.perf_counter()
            r = run_sequential(BlackBox(target), EXEMPLARS, attack, claimed_epsilon=eps, delta=1e-5, noise=nz,
                               partitions=t, alternatives=ALTS, alpha=0.05, cap=2000, rng=np.random.default_rng(1),
                               probe=arm)
            row = {"decoy": attack.labels[2], "epsilon": eps, "partitions": t, "mode": mode, "verdict": r.verdict, "prompts": r.prompts,
                   "seconds": round(time.perf_counter() - t0, 1), "reason": r.reason[:300],
                   "clean_votes": {k: [float(x) for x in v] for k, v in votes.items()}}
            print(json.dumps(row), flush=True)
            rows.append(row)


if __name__ == "__main__":
    main()
