"""The sequential audits' one-partition probe (``app.audit.sequential``, design arms; for generation,
``gen_probe_target`` and ``app.audit.gen_sequential``).

With T partitions the canary moves one vote of T, so a gross violation (no noise, a tenth of the
noise) moves the released label only where the other T - 1 votes are split: the configured design
sees it through the release floor, a few bits per T model calls. On one partition holding every
exemplar the canary decides the only vote (tight-auditing Lemma 3.1 with T = 1): a target without
enough noise then releases the canary's label with the canary and the other label without it, which
the "both right" pair statistic detects within a few pairs, one model call per trial. The probe is
the same mechanism, claim and noise (``rnm``'s noise does not depend on T), on that design.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from app.audit.noise import VotingNoise
from app.audit.sequential import Arm
from app.audit.target_info import target_noise

PROBE_MAX_SHOTS = 32  # one partition holds every exemplar of the audit's dataset: a prompt of this many shots


def probe_arm(target: Any, n_exemplars: int, noise: VotingNoise | None, partitions: int | None) -> Arm | None:
    """The one-partition probe of ``target``, or None where it does not apply: no noise model, a
    design already on one partition, more than ``PROBE_MAX_SHOTS`` exemplars, a mechanism other
    than rnm, a defence (a judge after the noise changes the release law)."""
    from app.audit.targets import MechanismTarget, RemoteTarget, SimulatedVotingTarget

    if noise is None or not partitions or partitions <= 1 or not 1 <= n_exemplars <= PROBE_MAX_SHOTS:
        return None
    one = {"partitions": 1, "shots_per_partition": n_exemplars}
    probe: Any
    if isinstance(target, SimulatedVotingTarget):
        up = np.flatnonzero(target.votes_with > target.votes_without)
        down = np.flatnonzero(target.votes_without > target.votes_with)
        if up.size != 1 or down.size != 1:
            return None  # not the one-vote design: no one-partition analogue
        vw, vo = np.zeros(target.votes_with.size), np.zeros(target.votes_with.size)
        vw[up[0]], vo[down[0]] = 1.0, 1.0
        probe = SimulatedVotingTarget(list(vw), list(vo), target.noise_model)
        return Arm(probe, 1, noise, "probe")
    if isinstance(target, MechanismTarget):
        if target.base_name != "rnm" or target.defence != "none":
            return None
        probe = MechanismTarget(target.lm, "rnm", {**target.params, **one}, target.template, bug=target.bug)
    elif isinstance(target, RemoteTarget):
        if target.mechanism != "rnm":
            return None
        # the same connection and registered contexts; only the classify call's partitions differ
        probe = dataclasses.replace(target, params={**target.params, **one})
    else:
        return None
    probe_noise = target_noise(probe, n_exemplars)
    if probe_noise is None or probe_noise.kind != noise.kind:
        return None
    return Arm(probe, 1, probe_noise, "probe")


# A generation mechanism's unit count and shots-per-unit parameters (its own names).
GEN_UNITS = {"esa": ("partitions", "shots_per_partition"), "clip_softmax": ("prompts", "shots_per_prompt"),
             "poe": ("experts", "group_size"), "mozo": ("experts", "group_size")}


def gen_probe_target(target: Any, n_exemplars: int, units: int | None) -> Any | None:
    """The one-unit probe of a generation ``target`` (``app.audit.gen_sequential``'s module docstring):
    the same mechanism, claim and params on one unit holding every exemplar, or None where it does
    not apply: a design already on one unit, more than ``PROBE_MAX_SHOTS`` exemplars, a mechanism
    without units, a defence. ``units``: the configured design's (the design model's ``units``)."""
    from app.audit.gen_targets import GenerationMechanismTarget, RemoteGenerationTarget

    if not units or units <= 1 or not 1 <= n_exemplars <= PROBE_MAX_SHOTS:
        return None
    if isinstance(target, GenerationMechanismTarget):
        mech = target.mechanism.name
        if mech not in GEN_UNITS or target.defence != "none":
            return None
        count, shots = GEN_UNITS[mech]
        return GenerationMechanismTarget(target.lm, target.embedder, mech, {**target.params, count: 1,
                                                                            shots: n_exemplars},
                                         target.template, target.max_tokens, target.decider)
    if isinstance(target, RemoteGenerationTarget):
        if target.mechanism not in GEN_UNITS:
            return None
        count, shots = GEN_UNITS[target.mechanism]
        # the same connection and registered contexts; only the generate call's units differ
        return dataclasses.replace(target, params={**target.params, count: 1, shots: n_exemplars})
    return None


__all__ = ["GEN_UNITS", "PROBE_MAX_SHOTS", "gen_probe_target", "probe_arm"]
