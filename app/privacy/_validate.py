"""Input checks shared by the privacy functions (each raises PrivacyInputError naming the field)."""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np

from app.privacy.errors import PrivacyInputError


def finite(x: Any, param: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (numbers.Real, np.floating, np.integer)):
        try:
            x = float(x)
        except (TypeError, ValueError):
            raise PrivacyInputError(f"must be a number, got {x!r}", param=param) from None
    x = float(x)
    if not math.isfinite(x):
        raise PrivacyInputError(f"must be a finite number, got {x}", param=param)
    return x


def positive(x: Any, param: str) -> float:
    x = finite(x, param)
    if x <= 0:
        raise PrivacyInputError(f"must be > 0, got {x:g}", param=param)
    return x


# The smallest target epsilon a calibration or a charge accepts. Below it the number is
# representable but meaningless: float64 carries about 16 digits, so such a charge vanishes
# next to a budget of order 1 (1.0 + 1e-17 == 1.0), and the noise it calls for is over 1e12
# times the sensitivity. Refused the same way everywhere (PrivacyInputError, HTTP 422).
MIN_EPSILON = 1e-12


def target_epsilon(x: Any, param: str = "target_epsilon") -> float:
    """A privacy target: finite, > 0 and >= MIN_EPSILON (see above)."""
    x = positive(x, param)
    if x < MIN_EPSILON:
        raise PrivacyInputError(
            f"must be >= {MIN_EPSILON:g}, got {x:g}: a smaller epsilon vanishes in float64 rounding of a "
            f"privacy budget (1 + 1e-17 == 1) and calls for noise over 1e12 times the sensitivity",
            param=param,
        )
    return x


def nonnegative(x: Any, param: str) -> float:
    x = finite(x, param)
    if x < 0:
        raise PrivacyInputError(f"must be >= 0, got {x:g}", param=param)
    return x


def delta_open(x: Any, param: str = "delta") -> float:
    """delta in the open interval (0, 1)."""
    x = finite(x, param)
    if not 0.0 < x < 1.0:
        raise PrivacyInputError(f"must lie in (0, 1), got {x:g}", param=param)
    return x


def delta_halfopen(x: Any, param: str = "delta") -> float:
    """delta in [0, 1) (empirical bounds, where delta = 0 means a pure-DP bound)."""
    x = finite(x, param)
    if not 0.0 <= x < 1.0:
        raise PrivacyInputError(f"must lie in [0, 1), got {x:g}", param=param)
    return x


def probability_open(x: Any, param: str) -> float:
    x = finite(x, param)
    if not 0.0 < x < 1.0:
        raise PrivacyInputError(f"must lie in (0, 1), got {x:g}", param=param)
    return x


# The largest count (trials, compositions, batch size, ...) the math takes: integers stay exact in float64
# up to here, and it is the largest JSON-safe integer (the API's seeds have the same bound). Past it, JSON's
# unbounded integers reached float(10**400) (OverflowError, a 500) and counts from about 2**60 on gave
# wrong refusals ("accuracy: got nan"). The request schemas (app/privacy/schemas.py) declare it too.
MAX_COUNT = 2**53 - 1


def count(x: Any, param: str, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    if isinstance(x, bool):
        raise PrivacyInputError(f"must be an integer, got {x!r}", param=param)
    if isinstance(x, (float, np.floating)) and (not math.isfinite(x) or x != int(x)):
        raise PrivacyInputError(f"must be an integer, got {x!r}", param=param)
    try:
        i = int(x)
    except (TypeError, ValueError, OverflowError):
        raise PrivacyInputError(f"must be an integer, got {x!r}", param=param) from None
    if i < minimum:
        raise PrivacyInputError(f"must be >= {minimum}, got {i}", param=param)
    if i > maximum:
        shown = str(i) if i < 10**30 else f"an integer of about {int(i.bit_length() * 0.30103)} digits"
        raise PrivacyInputError(f"must be <= {maximum}, got {shown}", param=param)
    return i
