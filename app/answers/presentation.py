"""How a private answer is shown: the compact ``privacy`` block, internals only when asked.

Pure functions over the answer body the ledger stores (the full body, RDP curve and internals
included); what the caller receives is derived from it here, at release and at every replay.
"""

from __future__ import annotations

from typing import Any


# The accountant's native form of a cost: RDP curves (~100 orders each) and the dominating pair
# (app.privacy.pld). The ledger composes them; an answer carries them only with ``?include=accounting``.
ACCOUNTING_KEYS = ("orders", "rdp", "pld")
ACCOUNTING_PARAMS = ("rdp_without_ptr_delta",)


def noise_of(privacy: dict[str, Any]) -> dict[str, Any] | None:
    """The noise an answer got, from its cost's parameters: distribution, which parameter the
    scale is (sigma, b or a sampling temperature) and its value. None for non-private answers."""
    if not privacy.get("is_private", privacy.get("epsilon") is not None):
        return None
    mech = str(privacy.get("mechanism") or "")
    p = privacy.get("params") or {}

    def block(distribution: str, parameter: str, scale: Any, **extra: Any) -> dict[str, Any]:
        return {"distribution": distribution, "parameter": parameter, "scale": scale, **extra}

    if mech.startswith("rnm") and p.get("scale") is not None:
        dist = str(p.get("noise") or mech.removeprefix("rnm-"))
        return block(dist, "sigma" if dist == "gaussian" else "b", p["scale"])
    if mech == "ksa":
        # Gumbel on the keyword-count gaps (report-noisy-max), Gaussian in the PTR test.
        return block("gumbel", "b", p.get("gumbel_scale"),
                     ptr=block("gaussian", "sigma", p.get("ptr_noise_std")))
    if p.get("sigma") is not None:
        return block("gaussian", "sigma", p["sigma"])
    if p.get("inverse_temperature"):
        # Exponential mechanism (PoE): sampling from softmax(inverse_temperature * utility).
        return block("exponential-mechanism", "temperature", 1.0 / float(p["inverse_temperature"]))
    if p.get("temperature") is not None:
        return block("exponential-mechanism", "temperature", p["temperature"])
    return None


def compact_privacy(privacy: dict[str, Any] | None, include_accounting: bool = False) -> dict[str, Any] | None:
    """An answer's ``privacy``: epsilon, delta, adjacency, mechanism, its parameters and ``noise``;
    the RDP curve only when asked (it is always on the ledger entry)."""
    if not isinstance(privacy, dict):
        return privacy
    out = {k: v for k, v in privacy.items() if include_accounting or k not in ACCOUNTING_KEYS}
    if not include_accounting and isinstance(out.get("params"), dict):
        out["params"] = {k: v for k, v in out["params"].items() if k not in ACCOUNTING_PARAMS}
    out["noise"] = noise_of(privacy)
    return out


def presented(body: dict[str, Any], include_accounting: bool) -> dict[str, Any]:
    """The answer as released to the caller (the ledger keeps the full body)."""
    if "privacy" not in body:
        return body
    return {**body, "privacy": compact_privacy(body["privacy"], include_accounting)}


def visible(body: dict[str, Any], return_internals: bool) -> dict[str, Any]:
    out = dict(body)
    if not return_internals:
        out.pop("internals", None)
    return out
