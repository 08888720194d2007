"""Privacy of the clipped-logit softmax sampler of Amin et al. 2024 (ICLInf Algorithm 1).

Per token: clip every prompt's logits to clip_c(z)_i = max(-c, z_i - max_j z_j + c),
average over the batch of s prompts, sample from softmax(mean / tau).

Sensitivity of the mean logits, per coordinate, is Delta = c / (s tau) when a
removed prompt contributes zero logits with s fixed (add/remove in the
"zero-out" sense), and 2 c / (s tau) under replace-one. ICLInf's formulas
(Thm C.2 rho = (c/(s tau))^2 / 2, EM epsilon = 2 c/(s tau)) are the first case; we apply
group privacy for replace-one (zCDP: 4 rho, Bun & Steinke 2016 Prop. 1.9; pure DP: 2 eps).
A two-token example shows the replace-one loss really is about 4 rho: one prompt's
clipped logits flip from (c, -c) to (-c, c) and the log-odds move by 4 c/(s tau).
"""

from __future__ import annotations

import numpy as np

from app.privacy import _validate as v
from app.privacy.adjacency import Adjacency
from app.privacy.rdp import _em_sinh_rdp


def _sensitivity(clip: float, batch_size: float, temperature: float, adjacency: Adjacency) -> float:
    x = clip / (batch_size * temperature)
    return 2.0 * x if adjacency == Adjacency.REPLACE_ONE else x


def clip_softmax_rho(
    clip: float, batch_size: int, temperature: float, adjacency: Adjacency | str = Adjacency.ADD_REMOVE
) -> float:
    """Per-token zCDP rho = (c/(s tau))^2 / 2 (ICLInf Thm C.2; Amin et al. 2024, Lemma 4);
    4x that under replace-one."""
    c = v.positive(clip, "clip")
    s = v.count(batch_size, "batch_size", minimum=1)
    t = v.positive(temperature, "temperature")
    d = _sensitivity(c, s, t, Adjacency.parse(adjacency))
    return 0.5 * d * d


def clip_softmax_em_epsilon(
    clip: float, batch_size: int, temperature: float, adjacency: Adjacency | str = Adjacency.ADD_REMOVE
) -> float:
    """Per-token pure epsilon of the exponential-mechanism view: 2 Delta with Delta = c/(s tau)
    (ICLInf C.3.1: Amin et al. Lemma 3 plus Thm C.4); doubled under replace-one."""
    c = v.positive(clip, "clip")
    s = v.count(batch_size, "batch_size", minimum=1)
    t = v.positive(temperature, "temperature")
    return 2.0 * _sensitivity(c, s, t, Adjacency.parse(adjacency))


def _rdp_per_token(orders: np.ndarray, sens: float) -> np.ndarray:
    # ICLInf C.3.1: min(alpha/2 Delta^2, sinh form at eps_EM = 2 Delta).
    return np.minimum(orders * sens * sens / 2.0, _em_sinh_rdp(orders, 2.0 * sens))


def clip_softmax_rdp(
    orders: np.ndarray,
    clip: float,
    batch_size: int,
    temperature: float,
    compositions: int = 1,
    adjacency: Adjacency | str = Adjacency.ADD_REMOVE,
) -> np.ndarray:
    """Total RDP after ``compositions`` tokens (sequences x tokens), ICLInf C.3.1:
    eps(alpha) <= N_gen T_max min(alpha/2 (c/(s tau))^2, (1/(alpha-1)) log[(sinh(2 alpha c/(s tau))
    - sinh(2 (alpha-1) c/(s tau))) / sinh(2 c/(s tau))]), composed by ICLInf Thm C.7."""
    c = v.positive(clip, "clip")
    s = v.count(batch_size, "batch_size", minimum=1)
    t = v.positive(temperature, "temperature")
    k = v.count(compositions, "compositions", minimum=1)
    sens = _sensitivity(c, s, t, Adjacency.parse(adjacency))
    return k * _rdp_per_token(np.asarray(orders, dtype=float), sens)
