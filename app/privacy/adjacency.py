"""Neighbouring relations and the translations between them.

Two relations are in use in DP-ICL:

* ``add-remove`` ("unbounded"): D' = D with one record added or removed.
* ``replace-one`` ("bounded"): D' = D with one record replaced; |D| is public.

A replace is a remove followed by an add, so any guarantee under add/remove
gives one under replace-one by group privacy over 2 steps. The converse does
not hold in general: ``M(D) = |D|`` is 0-DP under replace-one and not DP at all
under add/remove. ICLInf (Theorem C.9, citing Kulesza et al. 2024) states the
converse "bounded eps => unbounded eps/2"; we refuse it (it needs extra
structure of the mechanism, which a number alone cannot certify).
"""

from __future__ import annotations

import enum
import math

from app.privacy import _validate as v
from app.privacy.errors import PrivacyInputError


class Adjacency(str, enum.Enum):
    ADD_REMOVE = "add-remove"  # unbounded
    REPLACE_ONE = "replace-one"  # bounded

    @classmethod
    def parse(cls, value: Adjacency | str, param: str = "adjacency") -> Adjacency:
        if isinstance(value, Adjacency):
            return value
        key = str(value).strip().lower().replace("_", "-")
        aliases = {
            "add-remove": cls.ADD_REMOVE,
            "add-or-remove": cls.ADD_REMOVE,
            "add-or-remove-one": cls.ADD_REMOVE,
            "unbounded": cls.ADD_REMOVE,
            "replace-one": cls.REPLACE_ONE,
            "replace": cls.REPLACE_ONE,
            "bounded": cls.REPLACE_ONE,
            "change-one": cls.REPLACE_ONE,
        }
        if key not in aliases:
            raise PrivacyInputError(
                f"unknown adjacency {value!r}; use 'add-remove' (unbounded) or 'replace-one' (bounded)", param=param
            )
        return aliases[key]


def _check_direction(source: Adjacency, target: Adjacency, param: str) -> bool:
    """True when a translation (add-remove -> replace-one) is needed, False for identity."""
    if source == target:
        return False
    if source == Adjacency.REPLACE_ONE and target == Adjacency.ADD_REMOVE:
        raise PrivacyInputError(
            "a replace-one (bounded) guarantee does not imply an add-remove (unbounded) one in general "
            "(M(D)=|D| is 0-DP bounded, not DP unbounded); only add-remove -> replace-one is supported",
            param=param,
        )
    return True


def translate_pure_dp(epsilon: float, source: Adjacency | str, target: Adjacency | str) -> float:
    """Pure eps-DP under ``source`` -> pure DP under ``target``.

    add-remove eps => replace-one 2 eps (ICLInf Thm C.9, first half; group
    privacy over 2 steps, Dwork & Roth 2014 Thm 2.2).
    """
    eps = v.nonnegative(epsilon, "epsilon")
    src, dst = Adjacency.parse(source), Adjacency.parse(target, "to_adjacency")
    return 2.0 * eps if _check_direction(src, dst, "to_adjacency") else eps


def translate_approx_dp(epsilon: float, delta: float, source: Adjacency | str, target: Adjacency | str) -> tuple[float, float]:
    """(eps, delta) add-remove => (2 eps, (1 + e^eps) delta) replace-one.

    Apply the (eps, delta) inequality twice along D -> D - x -> D - x + y
    (group privacy for k = 2; Vadhan 2017 Lemma 2.2 gives the looser 2 e^eps delta).
    """
    eps = v.nonnegative(epsilon, "epsilon")
    d = v.delta_halfopen(delta)
    src, dst = Adjacency.parse(source), Adjacency.parse(target, "to_adjacency")
    if not _check_direction(src, dst, "to_adjacency"):
        return eps, d
    if d == 0.0:
        return 2.0 * eps, 0.0
    # (1 + e^eps) delta in logs: e^eps overflows above eps = 709.
    log_d = math.log(d) + eps + math.log1p(math.exp(-eps))
    return 2.0 * eps, math.exp(min(0.0, log_d))


def translate_zcdp(rho: float, source: Adjacency | str, target: Adjacency | str) -> float:
    """rho-zCDP add-remove => 4 rho-zCDP replace-one (zCDP group privacy k^2 rho,
    Bun & Steinke 2016 Prop. 1.9, with k = 2)."""
    r = v.nonnegative(rho, "rho")
    src, dst = Adjacency.parse(source), Adjacency.parse(target, "to_adjacency")
    return 4.0 * r if _check_direction(src, dst, "to_adjacency") else r


def translate_gdp(mu: float, source: Adjacency | str, target: Adjacency | str) -> float:
    """mu-GDP add-remove => 2 mu-GDP replace-one (GDP group privacy k mu,
    Dong, Roth & Su 2022 Thm 2.14, with k = 2)."""
    m = v.nonnegative(mu, "mu")
    src, dst = Adjacency.parse(source), Adjacency.parse(target, "to_adjacency")
    return 2.0 * m if _check_direction(src, dst, "to_adjacency") else m
