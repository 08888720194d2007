"""Data-aware defaults of ``mozo`` (issue 29, item 6): what a call with parameters left out runs.

The rule, from the issue-18 measurements (docs/generation.md, "mozo defaults"; ROUGE-L on the bundled
dialogue task, n = 240, SmolLM2-135M and Gemma 3 270M):

* ``group_size`` 4 and ``experts`` = min(60, n // 4) when ``experts`` is left out (60 four-shot experts,
  ``lambda_mode: per_expert``, ``private_tokens: 16`` met the eps-2 goal at 16 and 32 tokens on both
  models; one-shot experts cap near 0.40, eight-shot ones collapsed);
* ``lambda_mode`` ``per_expert`` (second and fourth passes: 0.263 against 0.221 with the public lam);
* ``private_tokens`` min(16, ``max_tokens``) (sixth pass: +0.069 / +0.089 over 32 private steps).

**Usability check.** Under the per-expert ball each expert moves log q(y) by at most eps_tok / 2 nats,
so E experts that agree lead a token by at most the *consensus margin* E x eps_tok / 2 (fourth pass).
Measured: 60 x 4 at eps 2 / 16 private tokens (margin 6.98 nats) and 80 x 3 at eps 2 / 32 tokens
(6.58) met the goal, 60 x 4 at eps 2 / 32 tokens (4.94) was 3.6 standard errors above zero-shot;
60 x 4 at eps 1 / 16 tokens (3.71) and 30 x 8 at eps 2 / 16 tokens (3.49) scored at the zero-shot level
(which costs nothing). So when ``experts`` is derived, a margin under :data:`MIN_MARGIN` (4.5 nats,
between the two groups; nothing between 3.7 and 4.9 was measured) is refused with a 422 naming
``params.experts`` that says what to change. The margin is a function of public parameters only
(the budget, the token count, E), never of the exemplars' content; under replace-one n is public.

**Adjacency.** Under add-remove n is private and differs between neighbours; an expert count that
followed it would change every unit (``gen_common.resolve_units``). There the derived count is the
constant 60 (never n // 4), refused when n < 60 x ``group_size``. Given ``experts``, nothing is derived
(``group_size`` keeps its earlier default 1, the one-shot experts padded with zero-shot ones).
Explicitly given parameters are never overridden; the privacy charge is computed from what runs, and
``privacy.params`` reports it.
"""

from __future__ import annotations

import math

from app.mechanisms.errors import MechanismParamError
from app.mechanisms.gen_common import GenerationRequest, Params, parse_adjacency, resolve_units
from app.privacy.adjacency import Adjacency

DEFAULT_EXPERTS = 60  # cap of the derived count (the measured 60 x 4)
DEFAULT_GROUP_SIZE = 4  # exemplars per expert when ``experts`` is derived
GIVEN_EXPERTS_GROUP_SIZE = 1  # ``experts`` given, ``group_size`` not: one-shot experts (unchanged)
DEFAULT_LAMBDA_MODE = "per_expert"
DEFAULT_PRIVATE_TOKENS = 16
MIN_MARGIN = 4.5  # nats: consensus margin E x eps_tok / 2 below which a derived setting is refused
SUBSAMPLE_DEFAULT_EXPERTS = 32  # ``subsample: true`` (third pass, one-shot experts): unchanged


def default_private_tokens(max_tokens: int) -> int:
    return min(DEFAULT_PRIVATE_TOKENS, max_tokens)


def consensus_margin(experts: int, epsilon_per_token: float) -> float:
    """E x eps_tok / 2: the most E agreeing experts can lead one token by, in nats (per-expert ball)."""
    return experts * epsilon_per_token / 2.0


def mozo_units(req: GenerationRequest, p: Params, epsilon: float, epsilon_per_token: float,
               tokens: int) -> tuple[int, int, int]:
    """(experts built, E in the product weight, group_size) for the unsubsampled mechanism."""
    n = len(req.exemplars)
    given_e = p.count("experts", None)
    given_g = p.count("group_size", None)
    if given_e is not None:  # nothing derived: the earlier rule (one-shot default, zero-shot padding)
        e, g = resolve_units(n, given_e, given_g, given_e, GIVEN_EXPERTS_GROUP_SIZE, "experts", "group_size",
                             adjacency=req.adjacency)
        return e, given_e, g
    if n < 1:
        raise MechanismParamError("the dataset has no exemplars", param="dataset_id")
    g = given_g if given_g is not None else DEFAULT_GROUP_SIZE
    add_remove = parse_adjacency(req.adjacency) == Adjacency.ADD_REMOVE
    e = DEFAULT_EXPERTS if add_remove else min(DEFAULT_EXPERTS, n // g)
    margin = consensus_margin(e, epsilon_per_token)
    if margin < MIN_MARGIN:
        need_e = math.ceil(MIN_MARGIN / (epsilon_per_token / 2.0) - 1e-9)
        more = (f"add exemplars (at least {need_e * g} at this budget), " if not add_remove and need_e <= DEFAULT_EXPERTS
                else "")
        raise MechanismParamError(
            (f"under add-remove the default is the constant {e} experts x {g} exemplars; " if add_remove else
             f"the dataset has {n} exemplars, so the default is {e} experts x {g} exemplars ({n} // {g}, at most "
             f"{DEFAULT_EXPERTS}); ")
            + f"their consensus margin E x epsilon_per_token / 2 = {margin:.2f} nats at epsilon {epsilon:g} over "
            f"{tokens} private tokens is under the {MIN_MARGIN:g} nats the benchmarks found better than zero-shot "
            f"(docs/generation.md, 'mozo defaults'): {more}raise epsilon, lower params.private_tokens, or set "
            "params.experts (and params.group_size) explicitly to run anyway",
            param="params.experts",
        )
    if e * g > n:  # add-remove only (replace-one's e <= n // g)
        raise MechanismParamError(
            f"under add-remove adjacency the default is the constant {e} experts x {g} exemplars = {e * g} "
            f"(an expert count that followed the private exemplar count would differ between neighbouring "
            f"datasets and change every expert); the dataset has {n}: set params.experts explicitly (one-shot "
            "experts, padded), or add exemplars",
            param="params.experts",
        )
    return e, e, g


__all__ = ["DEFAULT_EXPERTS", "DEFAULT_GROUP_SIZE", "DEFAULT_LAMBDA_MODE", "DEFAULT_PRIVATE_TOKENS", "MIN_MARGIN",
           "SUBSAMPLE_DEFAULT_EXPERTS", "consensus_margin", "default_private_tokens", "mozo_units"]
