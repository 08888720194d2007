"""Fixed design vs sequential audit: model calls, wall time and verdicts (issue 28).

Model calls = classify calls x partitions (the prompts the target's model answers).

Run through ``python benchmarks/bench_ci_audit.py --compare`` (see there). Library level, one
process: the fixed design is the planner's recommended design (``app.audit.planner``) run by
``run_campaign`` with the verdict of the canary_mia job; the sequential audit is
``app.audit.sequential.run_sequential`` on the same design, alone ("sequential_T<T>") and with the
one-partition probe drawn first ("sequential_T<T>+probe", the job's default: ``app.audit.probe``).
Targets: simulated voting (the audited noise code, many repetitions) seen white-box (its clean
and noisy scores: the noise evidence) and black-box (the released label only: ``BlackBox``), and
the independent HTTP gateway of ``tests/audit/standalone_gateway.py``, black-box (a few
repetitions). Model calls = prompts = classify calls x partitions.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from app.audit import Canary, CampaignConfig, RemoteTarget, SimulatedVotingTarget, resolve_query, rnm_noise, run_campaign
from app.audit.campaign import assess_power
from app.audit.planner import plan_audit
from app.audit.probe import probe_arm
from app.audit.sequential import run_sequential
from app.audit.targets import ReleasedLabelOnly
from app.jobs.kinds.canary_mia import CanaryMIAKind
from tests.audit.standalone_gateway import StandaloneGateway

N = 12
EXEMPLARS = [(f"play some music number {i}", "music") for i in range(N)]
CANARY = Canary("hex", "00ff00ff00ff00ff", "weather")
ALTS = ["noise_quarter", "no_noise"]
CAP = 2000  # sequential cap (trials); the job's "auto" is 10000
# simulated bug per gateway mode (sigma/10 only simulated: the standalone gateway has no such mode)
SIM_MODES = {"correct": None, "sigma_quarter": "noise_quarter", "sigma_tenth": "noise_tenth",
             "winner_only": "winner_only", "no_noise": {"noise_multiplier": 1e-12}}
GW_MODES = ("correct", "sigma_quarter", "winner_only", "no_noise", "swapped_no_noise", "non_private")


class BlackBox(ReleasedLabelOnly):
    """A target seen black-box (``app.audit.targets.ReleasedLabelOnly``), named so in the results."""

    def __init__(self, target: Any) -> None:
        super().__init__(target)
        self.name = f"black-box:{target.name}"


def _params(eps: float, t: int) -> dict[str, Any]:
    return {"epsilon": eps, "delta": 1e-5, "partitions": t, "shots_per_partition": N // t}


def plan(eps: float) -> dict[str, Any]:
    out = plan_audit(lambda t, s: rnm_noise({**_params(eps, t), "shots_per_partition": s}, N), labels=2, exemplars=N,
                     partitions=4, shots_per_partition=3, claimed_epsilon=eps, confidence=0.95, delta=1e-5,
                     alternatives=ALTS, threat_models=1, floor=True, white_box=False)
    return out["recommended"]


def _fixed(target: Any, attack: Any, eps: float, trials: int, seed: int, labels: Sequence[str] = ("weather", "music"),
           alternatives: Sequence[str] = ALTS) -> tuple[str, int, str]:
    """(verdict, model calls, reason) of the fixed design's campaign and the job's verdict on it."""
    res = run_campaign(target, EXEMPLARS, CANARY, "input_output", task_labels=list(labels),
                       config=CampaignConfig(trials=trials, threat_models=("black-box",)),
                       rng=np.random.default_rng(seed))
    out = res.to_dict()
    rep = assess_power(res, target, N, eps, required=list(alternatives), min_detection=0.9)
    out["power"] = None if rep is None else rep.to_dict()
    v = CanaryMIAKind().verdict(out, eps, None)
    return str(v), res.model_calls, out.get("verdict_reason", "")


def _seq(target: Any, attack: Any, eps: float, t: int, seed: int, probe: bool) -> tuple[str, int, str, float]:
    noise = rnm_noise(_params(eps, t), N)
    arm = probe_arm(getattr(target, "_target", target), N, noise, t) if probe else None  # the wrapped simulation
    if arm is not None and isinstance(target, BlackBox):
        arm.target = BlackBox(arm.target)
    r = run_sequential(target, EXEMPLARS, attack, claimed_epsilon=eps, delta=1e-5, noise=noise, partitions=t,
                       alternatives=ALTS, alpha=0.05, cap=CAP, rng=np.random.default_rng(seed), probe=arm)
    return r.verdict, r.prompts, r.reason, r.e_violation


def _measure(target: Any, attack: Any, eps: float, t: int, trials: int, seed: int,
             probe: bool | None) -> tuple[str, int, float]:
    """(verdict, prompts, seconds) of one audit: the planner's fixed design (``probe`` None) or the
    sequential audit (with the one-partition probe or without)."""
    t0 = time.perf_counter()
    if probe is None:
        v, calls, _ = _fixed(target, attack, eps, trials, seed)
        calls *= t
    else:
        v, calls, _, _ = _seq(target, attack, eps, t, seed, probe)
    return v, calls, time.perf_counter() - t0


def _row(runs: list[tuple[str, int, float]]) -> dict[str, Any]:
    verdicts = [v for v, _, _ in runs]
    return {"runs": len(runs), "mean_model_calls": float(np.mean([c for _, c, _ in runs])),
            "mean_seconds": float(np.mean([s for _, _, s in runs])),
            "verdicts": {v: verdicts.count(v) for v in sorted(set(verdicts))}}


def compare(epsilons: tuple[float, ...] = (1.0, 2.0), sim_reps: int = 200, gw_reps: int = 3) -> dict[str, Any]:
    attack = resolve_query("input_output", CANARY, ["weather", "music"], EXEMPLARS, None)
    out: dict[str, Any] = {}
    for eps in epsilons:
        rec = plan(eps)
        t, trials = rec["partitions"], rec["trials"]
        block: dict[str, Any] = {"design": {"partitions": t, "shots_per_partition": rec["shots_per_partition"],
                                            "trials": trials, "predicted_detection": rec["detection"]}}
        if attack.positive_index != 0:
            raise RuntimeError("the simulated votes put the canary label first")
        # the sequential audit on the fixed design's partitions, alone and with the probe first
        runs: tuple[tuple[str, bool | None], ...] = (
            ("fixed", None), (f"sequential_T{t}", False), (f"sequential_T{t}+probe", True))
        for view in ("white-box", "black-box"):
            for mode, bug in SIM_MODES.items():
                acc: dict[str, list[tuple[str, int, float]]] = {name: [] for name, _ in runs}
                for s in range(sim_reps):
                    for name, probe in runs:
                        nz = rnm_noise(_params(eps, t), N).with_bug(bug)
                        sim: Any = SimulatedVotingTarget([1.0, t - 1.0], [0.0, float(t)], nz)  # weather 0, music 1
                        target = sim if view == "white-box" else BlackBox(sim)
                        acc[name].append(_measure(target, attack, eps, t, trials, s, probe))
                block[f"simulated {view}/{mode}"] = {name: _row(rows) for name, rows in acc.items()}
        for mode in GW_MODES:
            acc = {name: [] for name, _ in runs}
            for s in range(gw_reps):
                for name, probe in runs:
                    with StandaloneGateway(mode, seed=100 + s) as gw:
                        target = RemoteTarget(gw.url, "rnm", _params(eps, t), {})
                        try:
                            v, _, seconds = _measure(target, attack, eps, t, trials, s, probe)
                        finally:
                            target.close()
                        # classify calls x their partitions, counted by the gateway itself
                        acc[name].append((v, gw.prompts, seconds))
            block[f"gateway black-box/{mode}"] = {name: _row(rows) for name, rows in acc.items()}
        out[f"epsilon={eps:g}"] = block
    return out


def inprocess(lm: Any, epsilons: tuple[float, ...] = (1.0, 2.0), reps: int = 1,
              black_box_modes: tuple[str, ...] = ("correct", "no_noise")) -> dict[str, Any]:
    """The real bundled model behind in-process ``rnm`` (``MechanismTarget``; bugs through
    ``BrokenVoting``): the fixed planned design vs the sequential audit with its probe. White-box
    (the auditor runs the mechanism: clean votes and noisy scores observed) for every mode;
    black-box for ``black_box_modes``. Model calls = prompts (classify calls x partitions)."""
    from app.audit import MechanismTarget

    attack = resolve_query("input_output", CANARY, ["weather", "music"], EXEMPLARS, None)
    out: dict[str, Any] = {}
    for eps in epsilons:
        rec = plan(eps)
        t, trials = rec["partitions"], rec["trials"]
        block: dict[str, Any] = {"design": {"partitions": t, "trials": trials}}
        for view in ("white-box", "black-box"):
            for mode, bug in SIM_MODES.items():  # the same bugs, through BrokenVoting
                if view == "black-box" and mode not in black_box_modes:
                    continue
                runs: dict[str, bool | None] = {"fixed": None, f"sequential_T{t}+probe": True}
                acc: dict[str, list[tuple[str, int, float]]] = {name: [] for name in runs}
                for s in range(reps):
                    for name, probe in runs.items():
                        mt = MechanismTarget(lm, "rnm", _params(eps, t), {}, bug=bug)
                        target: Any = mt if view == "white-box" else BlackBox(mt)
                        acc[name].append(_measure(target, attack, eps, t, trials, s, probe))
                block[f"in-process rnm {view}/{mode}"] = {name: _row(rows) for name, rows in acc.items()}
        out[f"epsilon={eps:g}"] = block
    return out
