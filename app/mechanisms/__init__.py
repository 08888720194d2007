"""DP-ICL classification mechanisms (library: no FastAPI, no SQL, no settings).

    from app.mechanisms import get_mechanism
    res = get_mechanism("poe").classify(lm, exemplars, query, labels, params={"epsilon": 1.0})

Registered: ``zero_shot`` and ``icl`` (non-private baselines), ``rnm`` (private
voting / report-noisy-max, Gaussian, Laplace or Gumbel noise) and ``poe``
(Private PoEtry). See docs/mechanisms.md for the derivations.
"""

from app.mechanisms.base import (
    ClassificationResult,
    Mechanism,
    MechanismParams,
    get_mechanism,
    mechanism_names,
    register,
)
from app.mechanisms.errors import MechanismParamError, UnknownMechanismError
from app.mechanisms.poe import DEFAULT_CLIP, DEFAULT_CLIP_CALIBRATED, PoE, PoEParams
from app.mechanisms.rng import resolve_rng, secure_rng
from app.mechanisms.rnm import RNM, RNMParams
from app.mechanisms.sensitivity import UnitChange

from app.mechanisms.baselines import ICL, BaselineParams, ZeroShot

__all__ = [
    "BaselineParams",
    "ClassificationResult",
    "ICL",
    "ZeroShot",
    "DEFAULT_CLIP",
    "DEFAULT_CLIP_CALIBRATED",
    "Mechanism",
    "MechanismParamError",
    "MechanismParams",
    "PoE",
    "PoEParams",
    "RNM",
    "RNMParams",
    "UnitChange",
    "UnknownMechanismError",
    "get_mechanism",
    "mechanism_names",
    "register",
    "resolve_rng",
    "secure_rng",
]
