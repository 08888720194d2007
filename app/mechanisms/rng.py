"""Random generators for noise that protects real data.

The default generator is seeded from the operating system's secure source
(``os.urandom`` through ``secrets``): its state cannot be predicted from
earlier outputs or from the time. A caller-supplied ``numpy.random.Generator``
(a seeded one, for tests and audits) is accepted by every mechanism; the API
layer decides whether a caller may pass a seed (``settings.allow_seeded_noise``).
"""

from __future__ import annotations

import secrets

import numpy as np


def secure_rng() -> np.random.Generator:
    """A PCG64 generator seeded with 256 bits from the OS's secure random source."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(secrets.randbits(256))))


def resolve_rng(rng: np.random.Generator | None) -> np.random.Generator:
    """``rng`` when given (test/audit mode), else a fresh :func:`secure_rng`."""
    if rng is None:
        return secure_rng()
    if not isinstance(rng, np.random.Generator):
        from app.mechanisms.errors import MechanismParamError

        raise MechanismParamError(f"must be a numpy.random.Generator, got {type(rng).__name__}", param="rng")
    return rng


def seeded_rng(seed: int) -> np.random.Generator:
    """A reproducible generator (tests and audits only)."""
    return np.random.default_rng(seed)
