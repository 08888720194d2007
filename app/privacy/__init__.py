"""Privacy math for dpicl: accountants, conversions, calibration, empirical bounds.

Pure numpy/scipy; no FastAPI, no SQL. See docs/privacy.md for the formulas,
their sources, and which bounds are rigorous.
"""

from app.privacy.accountant import (
    ClipSoftmaxEvent,
    DpEvent,
    EpsilonReport,
    ExponentialMechanismEvent,
    GaussianEvent,
    PrivacyCost,
    PureDPEvent,
    RdpAccountant,
    RDPCurveEvent,
    ZCDPEvent,
)
from app.privacy.adjacency import (
    Adjacency,
    translate_approx_dp,
    translate_gdp,
    translate_pure_dp,
    translate_zcdp,
)
from app.privacy.calibration import Calibration, calibrate_clip_softmax, calibrate_gaussian
from app.privacy.clip_softmax import clip_softmax_em_epsilon, clip_softmax_rdp, clip_softmax_rho
from app.privacy.empirical import (
    AccuracyBound,
    CountsBound,
    accuracy_epsilon_bound,
    accuracy_to_epsilon,
    clopper_pearson_lower,
    clopper_pearson_upper,
    epsilon_lower_bound,
    gdp_mu_from_rates,
    gdp_mu_lower_bound,
    rate_bounds,
)
from app.privacy.errors import PrivacyInputError
from app.privacy.gaussian import (
    gaussian_delta,
    gaussian_epsilon,
    gaussian_sigma_analytic,
    gaussian_sigma_classical,
)
from app.privacy.gdp import gaussian_mu, gdp_compose, gdp_delta, gdp_epsilon, gdp_mu
from app.privacy.rdp import (
    DEFAULT_ORDERS,
    ICLINF_ORDERS,
    RdpConversion,
    compose_rdp,
    convert_rdp,
    parse_orders,
    rdp_exponential_mechanism,
    rdp_gaussian,
    rdp_on_grid,
    rdp_pure_dp,
    rdp_to_delta,
    rdp_to_epsilon,
    rdp_zcdp,
)

__all__ = [name for name in dir() if not name.startswith("_")]
