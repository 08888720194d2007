"""What an audit reads off a target without asking it anything: its re-appliable noise, its
partitions and its base mechanism (the campaign, the sequential design and its probe, the jobs).

Targets are duck-typed (``app.audit.targets``, ``app.audit.gen_targets``, simulated ones): each
reader says what it falls back to when a target lacks the attribute.
"""

from __future__ import annotations

from typing import Any

from app.audit.noise import VotingNoise


def mechanism_name(target: Any) -> str:
    """rnm | poe | ...: a remote target's string, an in-process target's base mechanism; simulated
    targets vote (rnm)."""
    m = getattr(target, "base_name", None) or getattr(target, "mechanism", "rnm")
    return m if isinstance(m, str) else getattr(m, "name", "")


def target_noise(target: Any, n: int) -> VotingNoise | None:
    """The target's re-appliable noise (``VotingNoise``), or None where it has none."""
    try:
        return target.noise(n)
    except Exception:
        return None


def noise_kind(target: Any, n: int) -> str | None:
    nz = target_noise(target, n)
    return None if nz is None else nz.kind


def gaussian_votes(target: Any, n: int) -> bool:
    """Whether every vote count gets Gaussian noise (not the winner's alone): the GDP reading applies."""
    nz = target_noise(target, n)
    return nz is not None and nz.kind == "gaussian" and not nz.winner_only


def target_partitions(target: Any, n: int) -> int | None:
    """The target's partition count for ``n`` exemplars: its own ``partitions``, its params', or
    n // shots_per_partition; None for a target without params."""
    if isinstance(getattr(target, "partitions", None), int):
        return target.partitions
    params = getattr(target, "params", None) or {}
    t = params.get("partitions")
    if t:
        return int(t)
    shots = int(params.get("shots_per_partition", 1) or 1)
    return max(1, n // shots) if params else None
