"""What one exemplar can change, and the noise scales that follow.

Both private classifiers split the exemplars into disjoint *units* (RNM's
partitions, PoE's experts or expert groups), query the model once per unit and
aggregate per-label scores: votes (RNM) or clipped log-probabilities (PoE).
Under either neighbouring relation one exemplar touches exactly one unit, so
the aggregate moves in one of two ways (the derivation is in docs/mechanisms.md):

* ``ADD_UNIT``: a unit appears or disappears whole. This happens only under
  add/remove when every exemplar is its own unit and every exemplar is used
  (``partitions``/``experts`` left to default to n, one exemplar per unit):
  the neighbour has one voter/expert more or less.
* ``SWAP_UNIT``: one unit's input changes while the number of units stays.
  Always under replace-one; under add/remove too whenever units hold several
  exemplars or only a subset of the exemplars is used (the added exemplar lands
  in, or displaces one of, the fixed number of units).

For the subset / partition randomness: exemplars are placed by a uniformly
random permutation (``app.icl.partition_exemplars``), which is independent of
the data. Coupling D' = D + x with D by letting x take the slot of whichever
exemplar of D the permutation would have put there (the displaced one goes to
the unused tail) gives partitions that differ in one slot only, with the right
marginals; the mechanism conditioned on the permutation is DP, and so is the
mixture over permutations.
"""

from __future__ import annotations

import enum
import math

from app.mechanisms.errors import MechanismParamError
from app.privacy.adjacency import Adjacency
from app.privacy.errors import PrivacyInputError


class UnitChange(str, enum.Enum):
    ADD_UNIT = "add-unit"
    SWAP_UNIT = "swap-unit"


def parse_adjacency(value: Adjacency | str) -> Adjacency:
    try:
        return Adjacency.parse(value, param="adjacency")
    except PrivacyInputError as exc:
        raise MechanismParamError(exc.message, param="adjacency") from None


def unit_change(adjacency: Adjacency | str, *, exemplars_per_unit: int, uses_every_exemplar: bool) -> UnitChange:
    """How the units' aggregate moves between neighbouring exemplar sets (see module doc)."""
    adj = parse_adjacency(adjacency)
    if adj == Adjacency.ADD_REMOVE and exemplars_per_unit == 1 and uses_every_exemplar:
        return UnitChange.ADD_UNIT
    return UnitChange.SWAP_UNIT


# ---------------------------------------------------------------------------
# RNM (vote histogram)
# ---------------------------------------------------------------------------


def vote_l2_sensitivity(change: UnitChange) -> float:
    """L2 sensitivity of the vote histogram: one vote added (1) or moved between two
    labels (sqrt 2). The sqrt 2 is what Algorithm 2 of the tight-auditing paper
    (Xia et al.) uses: sigma = 2 sqrt(log(1.25/delta))/eps = sqrt(2 ln(1.25/delta)) sqrt(2)/eps,
    the classical Gaussian (Dwork & Roth 2014 Thm A.1) at Delta_2 = sqrt 2."""
    return 1.0 if change == UnitChange.ADD_UNIT else math.sqrt(2.0)


def vote_range(change: UnitChange) -> float:
    """R = max_y dv_y - min_y dv_y of the vote change dv: e_y (R = 1) or e_a - e_b (R = 2)."""
    return 1.0 if change == UnitChange.ADD_UNIT else 2.0


def laplace_rnm_scale(epsilon: float, change: UnitChange) -> float:
    """Laplace scale b for eps-DP report-noisy-max on the votes.

    ADD_UNIT: the counts move monotonically by at most 1 each, so Lap(1/eps) is
    eps-DP (Dwork & Roth 2014, Claim 3.9). SWAP_UNIT: e_a - e_b is an increase
    followed by a decrease, each eps/2-DP at b = 2/eps (composition over the two
    steps, Dwork & Roth Thm 2.2 group privacy)."""
    return (1.0 if change == UnitChange.ADD_UNIT else 2.0) / epsilon


def gumbel_rnm_scale(epsilon: float, change: UnitChange) -> float:
    """Gumbel scale b for eps-DP report-noisy-max on the votes.

    argmax_y(v_y + Gumbel(b)) has law softmax(v / b) (Gumbel-max trick), i.e. the
    exponential mechanism with inverse temperature 1/b on utility v, which is
    (R/b)-DP for a utility change of range R (:func:`em_epsilon`). So
    b = R / eps: 1/eps (ADD_UNIT) or 2/eps (SWAP_UNIT)."""
    return vote_range(change) / epsilon


# ---------------------------------------------------------------------------
# Exponential mechanism and PoE
# ---------------------------------------------------------------------------


def em_epsilon(inverse_temperature: float, utility_range: float) -> float:
    """Pure eps of sampling y with probability proportional to exp(lam u(y)).

    If every neighbouring pair changes u by a vector du with
    max_y du_y - min_y du_y <= R, then
        p'(y)/p(y) = e^{lam du_y} / sum_z p(z) e^{lam du_z}
                   in [e^{lam (du_y - max du)}, e^{lam (du_y - min du)}],
    so eps = lam R (the "bounded range" view of Durfee & Rogers 2019; the
    textbook eps = 2 lam Delta, Dwork & Roth 2014 Thm 3.10, is R = 2 Delta, and the
    monotone case eps = lam Delta is R = Delta)."""
    return inverse_temperature * utility_range


def poe_utility_range(clip: float, change: UnitChange) -> float:
    """Range R of the change of PoE's summed clipped utilities.

    Each expert contributes a_e(y) = max(log p_e(y), -c) in [-c, 0] for every label.
    ADD_UNIT: du = a_x in [-c, 0]^K, so R <= c. SWAP_UNIT: du = a'_e - a_e in
    [-c, c]^K with R <= 2c. Both bounds are attained (docs/mechanisms.md)."""
    return (1.0 if change == UnitChange.ADD_UNIT else 2.0) * clip


def poe_inverse_temperature(epsilon: float, clip: float, change: UnitChange) -> float:
    """lam = eps / R: eps/c (ADD_UNIT) or eps/(2c) (SWAP_UNIT)."""
    return epsilon / poe_utility_range(clip, change)
