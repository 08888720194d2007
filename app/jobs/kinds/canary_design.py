"""Submit-time checks of a ``canary_mia`` design: a config that cannot run is a 422 naming the
field, not a job that fails minutes later (issue 28)."""

from __future__ import annotations

from typing import Any

from app.audit.estimates import SPLIT_FAILURE, min_split_trials, split_failure_probability
from app.jobs.errors import JobConfigError

__all__ = ["SPLIT_FAILURE", "check_runnable", "check_sequential", "min_split_trials", "split_failure_probability"]


def _white_box_runs(config: Any) -> bool:
    t = config.target
    if config.threat_model == "black-box":
        return False
    if config.task == "generation":
        return t.type == "remote" and t.white_box or t.type == "mechanism" and t.mechanism == "esa"
    return t.type != "remote" or t.white_box


def check_runnable(config: Any) -> None:
    """The design fits the dataset, and the trials can fill the white-box threshold split."""
    t = config.target
    ds = config.dataset
    if ds.exemplars is not None and len(ds.exemplars) < ds.size:
        raise JobConfigError(f"the dataset has {len(ds.exemplars)} exemplars, fewer than size {ds.size}",
                             param="config.dataset.size")
    if config.task == "classification" and t.mechanism == "rnm" and t.type != "simulated":
        p = t.params
        try:
            shots = int(p.get("shots_per_partition") or 1)
            parts = p.get("partitions")
        except (TypeError, ValueError):
            return  # the mechanism's own validation names the parameter
        n = config.dataset.size
        if isinstance(parts, int) and not isinstance(parts, bool) and parts * shots > n:
            raise JobConfigError(f"partitions x shots_per_partition = {parts} x {shots} = {parts * shots} exceeds "
                                 f"dataset.size {n}: every trial would fail at the target (POST /v1/audits/plan "
                                 "proposes designs that fit)", param="config.target.params.partitions")
        if shots > n:
            raise JobConfigError(f"shots_per_partition {shots} exceeds dataset.size {n}",
                                 param="config.target.params.shots_per_partition")
    if config.mode == "direct" and config.trials != "auto" and _white_box_runs(config):
        trials = int(config.trials)
        p_fail = split_failure_probability(trials, config.threshold_fraction)
        if p_fail > SPLIT_FAILURE:
            need = min_split_trials(config.threshold_fraction)
            raise JobConfigError(
                f"{trials} trials: the white-box threshold is chosen on a share {config.threshold_fraction:g} of "
                f"them and the rest lack one hypothesis with probability {p_fail:.2g}; use at least {need} "
                "trials (or threat_model black-box, which counts every trial)", param="config.trials")


def check_sequential(config: Any) -> None:
    if config.task == "generation":
        from app.jobs.kinds import canary_gen_seq

        canary_gen_seq.check(config)
        return
    if config.task != "classification":
        raise JobConfigError("sequential audits cover classification targets (the released label) and generation "
                             "targets (the signal text)", param="config.mode")
    if config.trials != "auto" and int(config.trials) < 2:
        raise JobConfigError("the sequential cap needs at least 2 trials (one pair)", param="config.trials")
