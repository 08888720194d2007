"""The ``canary_mia`` job's sequential mode: wiring only (the test is ``app.audit.sequential``).

``"mode": "sequential"`` with ``"trials": "auto"`` (cap ``DEFAULT_CAP``) or a number (the cap):
the audit draws pairs of trials in batches and stops at a violation (e-value >= 1/alpha, alpha =
1 - confidence), a pass (every ``power.alternatives`` rejected at 1/(1 - ``power.min_detection``),
the miss rate the fixed design's plan promises: ``sequential.pass_threshold``) or the cap; the
result carries the trials used, the e-values, ``pass_level`` and the reason, and the verdict is the test's.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from app.jobs.context import JobContext
from app.jobs.errors import JobConfigError, JobError


@contextmanager
def target_failures(target: Any) -> Iterator[None]:
    """A canary audit's run against its target, fixed-design or sequential: the target's failures as job
    errors (the gateway's, not a bug in dpicl), and the target closed whatever happens."""
    from app.audit import TargetError, TargetUnavailableError
    from app.jobs import egress

    try:
        yield
    except TargetUnavailableError as exc:  # the gateway's failure, after retries
        raise JobError(str(exc), code="target_unavailable") from None
    except TargetError as exc:  # the gateway refused (4xx) or answered what is not its API
        raise JobError(str(exc), code="target_error") from None
    except egress.EgressRefused as exc:  # the policy changed since submit, or the name resolves elsewhere now
        raise JobError(f"config.target.url: {exc}", code="egress_refused", param="config.target.url") from None
    except RuntimeError as exc:  # the remote gateway refused
        raise JobError(str(exc), code="target_error") from None
    except ValueError as exc:
        raise JobConfigError(str(exc), param="config") from None
    finally:
        if hasattr(target, "close"):
            target.close()


def cap(trials: int | str) -> int:
    from app.audit.sequential import DEFAULT_CAP

    return DEFAULT_CAP if trials == "auto" else int(trials)


def claim_of(ctx: JobContext, config: Any, target: Any, n: int) -> tuple[float, float, float | None]:
    """(the claim tested, its delta, the epsilon the target states): the job's claimed_epsilon, else
    the target's; a sequential audit without either is a 422 on claimed_epsilon."""
    eps_claimed, delta_claimed = target.claimed(n)
    claim = ctx.claimed_epsilon if ctx.claimed_epsilon is not None else eps_claimed
    if claim is None:
        raise JobConfigError("a sequential audit tests a claim: give claimed_epsilon (the target states none)",
                             param="claimed_epsilon")
    return float(claim), float(config.delta if config.delta is not None else (delta_claimed or 0.0)), eps_claimed


def run(ctx: JobContext, config: Any, target: Any, exemplars: list[tuple[str, str]], attack: Any, rng: Any,
        partitions: int | None) -> dict[str, Any]:
    from app.audit.power import claimed_noise
    from app.audit.probe import probe_arm
    from app.audit.sequential import run_sequential
    from app.audit.target_info import mechanism_name, target_noise

    claim, delta, eps_claimed = claim_of(ctx, config, target, len(exemplars))
    noise = target_noise(target, len(exemplars))
    noise = None if noise is None else claimed_noise(noise)
    floor = mechanism_name(target) == "rnm" and getattr(target, "defence", "none") != "L3"
    probe = probe_arm(target, len(exemplars), noise, partitions) if config.probe else None
    if config.threat_model == "black-box" and getattr(target, "white_box", False):
        from app.audit.targets import ReleasedLabelOnly

        # asked for black-box: the released labels only, what an outside auditor of the same gateway sees
        target = ReleasedLabelOnly(target)
        if probe is not None:
            probe.target = ReleasedLabelOnly(probe.target)
    with target_failures(target):
        res = run_sequential(target, exemplars, attack, claimed_epsilon=float(claim), delta=delta, noise=noise,
                             partitions=partitions, alternatives=list(config.power.alternatives),
                             alpha=1.0 - config.confidence, cap=cap(config.trials), rng=rng, release_floor=floor,
                             progress=lambda f, m: ctx.progress(0.02 + 0.9 * f, m), probe=probe,
                             min_detection=config.power.min_detection)
    seq = {**res.to_dict(), "claimed_epsilon": float(claim)}
    spec = config.dataset.decoy_labels
    decoys = config.dataset.decoy_count()
    if decoys and res.vote_model == "assumed":
        seq["notes"].append(
            f"{decoys} decoy label(s) (no exemplar carries them): their floor tests hold for any votes, but a pass "
            "assumes the model gives them none; "
            + ("counted decoys extend a label ('L (decoy i)') and get no vote from a target that scores labels by "
               "summed log-probs, as dpicl does" if isinstance(spec, int) else
               "named decoys carry no such guarantee: a model that votes for one can let winner-only noise pass")
            + " (docs/audit.md#decoy-labels)")
    return {"mode": "sequential", "target": target.name, "epsilon": None,
            "epsilon_claimed": eps_claimed, "delta": delta, "confidence": config.confidence,
            "model_calls": res.trials, "trials_total": res.trials, "sequential": seq, "power": None,
            "exemplar_count": len(exemplars)}


def verdict(result: dict[str, Any], claim: float | None) -> str | None:
    seq = result["sequential"]
    if claim is not None and abs(float(seq["claimed_epsilon"]) - float(claim)) > 1e-12 * max(1.0, abs(float(claim))):
        result["verdict_reason"] = "the sequential test ran against another claim"
        return "inconclusive"
    result["verdict_reason"] = seq["reason"]
    return str(seq["verdict"])
