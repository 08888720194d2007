"""Audited systems behind one interface.

``target.observe(context, attack, rng) -> Observation``: the released label and,
where the threat model allows, the mechanism's noisy scores (white-box: the
noisy vote counts of RNM, the noisy utilities of PoE). Targets:

* :class:`MechanismTarget`: an ``app.mechanisms`` classifier in this process
  (white-box: its internals), optionally a deliberately broken private voting or PoE,
  optionally behind a heuristic defence (``app.audit.defences``: L1/L2 system prompts,
  L3 LLM judge; ContextLeak 4.1, App. B).
* :class:`RemoteTarget`: a dpicl-compatible gateway over HTTP (black-box; white-box
  too when the key may read internals). It registers every distinct context through
  ``POST /v1/datasets`` once and asks ``POST /v1/private/classify``.
* :class:`SimulatedVotingTarget`: no model; fixed clean vote vectors with and
  without the canary plus the mechanism's noise (the statistics of the audit at
  any number of trials; the votes are an assumption, not a measurement).

``clean_votes`` (internal auditor, tight-auditing 3.1 "Internal Auditing
Capabilities") gives the pre-noise votes for the bootstrap; for ``poe`` the
pre-sampling scores lam U (internals ``clean_scores``), whose noise is the
mechanism's own Gumbel(0, 1) (``noise.poe_noise``).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np

from app.audit.defences import (
    REFUSAL_LABEL,
    defend_instruction,
    judge_says_attack,
    parse_defence,
    system_prompt_of,
)
from app.audit.gateway import RetryPolicy, gateway_client, gateway_json, gateway_post
from app.audit.noise import VotingNoise, parse_bug, poe_noise, rnm_noise
from app.audit.queries import AttackQuery

if TYPE_CHECKING:
    import httpx

    from app.mechanisms.base import ClassificationResult, Mechanism, MechanismParams

Exemplar = tuple[str, str]


@dataclass(frozen=True)
class Observation:
    label: str
    noisy_scores: np.ndarray | None = None  # aligned with attack.labels; white-box only
    clean_votes: np.ndarray | None = None  # internal auditor only
    epsilon: float | None = None  # what the target says this answer cost
    delta: float | None = None


class Target(Protocol):
    name: str
    white_box: bool  # noisy scores are observable

    def observe(self, context: Sequence[Exemplar], attack: AttackQuery, rng: np.random.Generator) -> Observation: ...

    def claimed(self, n_exemplars: int) -> tuple[float | None, float | None]: ...


def _scores(internals: Mapping[str, Any] | None) -> np.ndarray | None:
    if not internals:
        return None
    for key in ("noisy_votes", "noisy_scores", "label_probs"):
        if internals.get(key) is not None:
            return np.asarray(internals[key], dtype=float)
    return None


def _clean(internals: Mapping[str, Any] | None) -> np.ndarray | None:
    """Pre-noise scores: rnm's vote histogram, or poe's lam U (``clean_scores``; older servers:
    ``clipped_utility_sums`` x ``inverse_temperature``)."""
    if not internals:
        return None
    if internals.get("clean_votes") is not None:
        return np.asarray(internals["clean_votes"], dtype=float)
    if internals.get("clean_scores") is not None:
        return np.asarray(internals["clean_scores"], dtype=float)
    if internals.get("clipped_utility_sums") is not None and internals.get("inverse_temperature") is not None:
        return float(internals["inverse_temperature"]) * np.asarray(internals["clipped_utility_sums"], dtype=float)
    return None


BOOTSTRAP_MECHANISMS = ("rnm", "poe")


# ---------------------------------------------------------------------------
# In-process mechanism
# ---------------------------------------------------------------------------


class BrokenVoting:
    """Private voting with a deliberate bug (``app.audit.noise``): the ``rnm`` code path (partition,
    one batched label-scoring call, votes) but the noise of ``VotingNoise.with_bug``, while claiming
    rnm's cost. Not registered as a mechanism: it exists to be caught."""

    name = "rnm-broken"
    is_private = True

    def __init__(self, bug: Any) -> None:
        self.bug = parse_bug(bug)

    def cost(self, params: Mapping[str, Any] | MechanismParams | None = None,
             n_exemplars: int | None = None) -> dict[str, Any]:
        from app.mechanisms import get_mechanism

        return get_mechanism("rnm").cost(params, n_exemplars)  # the claim the bug breaks

    def classify(self, lm: Any, exemplars: Sequence[Any], query: str, labels: Sequence[str], template: Any = None,
                 params: Mapping[str, Any] | MechanismParams | None = None,
                 rng: np.random.Generator | None = None) -> ClassificationResult:
        from app.icl import (
            get_template,
            partition_exemplars,
            partition_label_distribution,
        )
        from app.mechanisms import get_mechanism
        from app.mechanisms.base import (
            ClassificationResult,
            check_labels,
            normalize_exemplars,
        )
        from app.mechanisms.rng import resolve_rng
        from app.mechanisms.rnm import RNMParams, resolve_partitions

        rnm = get_mechanism("rnm")
        p = RNMParams.from_mapping(params)
        ex = normalize_exemplars(exemplars)
        labs = check_labels(labels)
        g = resolve_rng(rng)
        t = resolve_partitions(p, len(ex))
        # Index arrays, which the scorer iterates like the index sequences it declares.
        units = cast("list[Sequence[int]]", partition_exemplars(len(ex), t, p.shots_per_partition, g))
        probs = partition_label_distribution(lm, ex, units, query, labs, template=get_template(template),
                                             calibrate=p.calibrate)
        votes = np.bincount(np.argmax(probs, axis=1), minlength=len(labs)).astype(float)
        noise = rnm_noise(p, len(ex), self.bug)
        noisy = noise.sample(votes, g)
        idx = int(np.argmax(noisy))
        internals = {"clean_votes": votes, "noisy_votes": noisy, "noise": noise.to_dict()}
        return ClassificationResult(labs[idx], idx, self.name, rnm.cost(p, len(ex)), internals)


class BrokenPoE:
    """PoE with a deliberate bug: the ``poe`` code path (experts, one batched scoring call, clipped
    utilities summed, lam from its own calibration) but the released label is the argmax of
    lam U + the noise of ``poe_noise(..., bug)``, while claiming poe's cost. ``noise_quarter``:
    Gumbel(0, 1/4), i.e. the exponential mechanism with lambda x4 (pure 4 eps instead of eps)."""

    name = "poe-broken"
    is_private = True

    def __init__(self, bug: Any) -> None:
        self.bug = parse_bug(bug)

    def cost(self, params: Mapping[str, Any] | MechanismParams | None = None,
             n_exemplars: int | None = None) -> dict[str, Any]:
        from app.mechanisms import get_mechanism

        return get_mechanism("poe").cost(params, n_exemplars)  # the claim the bug breaks

    def classify(self, lm: Any, exemplars: Sequence[Any], query: str, labels: Sequence[str], template: Any = None,
                 params: Mapping[str, Any] | MechanismParams | None = None,
                 rng: np.random.Generator | None = None) -> ClassificationResult:
        from app.mechanisms import _icl
        from app.mechanisms import aggregate as agg
        from app.mechanisms.base import ClassificationResult, check_labels, normalize_exemplars
        from app.mechanisms.poe import PoEParams, _clip, inverse_temperature, resolve_experts
        from app.mechanisms.rng import resolve_rng

        p = PoEParams.from_mapping(params)
        ex = normalize_exemplars(exemplars)
        labs = check_labels(labels)
        g = resolve_rng(rng)
        # Index arrays, which the scorer iterates like the index sequences it declares.
        units = cast("list[Sequence[int]]", _icl.partition(len(ex), resolve_experts(p, len(ex)), p.group_size, g))
        probs = _icl.unit_label_probs(lm, ex, units, query, labs, template, calibrate=p.calibrate)
        utility = agg.clipped_log_probs(probs, _clip(p)).sum(axis=0)
        lam = inverse_temperature(p)
        noise = poe_noise(p, len(ex), self.bug)
        noisy = noise.sample(lam * utility, g)
        idx = int(np.argmax(noisy))
        internals = {"clipped_utility_sums": utility, "inverse_temperature": lam, "clean_scores": lam * utility,
                     "noisy_scores": noisy, "noise": noise.to_dict()}
        return ClassificationResult(labs[idx], idx, self.name, self.cost(p, len(ex)), internals)


_BROKEN: dict[str, type[BrokenVoting] | type[BrokenPoE]] = {"rnm": BrokenVoting, "poe": BrokenPoE}


class MechanismTarget:
    """An ``app.mechanisms`` classifier run here, on ``lm``. ``bug`` (rnm, poe) swaps in
    :class:`BrokenVoting` / :class:`BrokenPoE`. ``defence`` (``app.audit.defences``): ``none``/``L0``,
    ``L1``/``L2`` (the defence prompt appended to the instruction every prompt carries, the attack
    query's instruction included) or ``L3`` (L2's prompt plus the LLM judge on every release;
    'Attack' replaces the released label by ``REFUSAL_LABEL``; ``judge_calibrate``: contextual
    calibration of the judge, see ``app.audit.defences``). ``judge_calls`` counts the judge's
    model calls (cached per distinct system prompt and output: the judge is deterministic);
    ``refusals`` the releases it replaced."""

    white_box = True

    def __init__(self, lm: Any, mechanism: str = "rnm", params: Mapping[str, Any] | None = None,
                 template: Mapping[str, Any] | None = None, bug: Any = None, defence: str | None = None,
                 judge_calibrate: bool = True) -> None:
        from app.mechanisms import get_mechanism

        self.lm = lm
        self.params = dict(params or {})
        self.template = dict(template or {})
        self.bug = None if bug in (None, "none") else bug
        self.defence = parse_defence(defence)
        base = get_mechanism(mechanism)
        self.base_name = base.name
        self.mechanism: Mechanism | BrokenVoting | BrokenPoE
        if self.bug is not None:
            if base.name not in _BROKEN:
                raise ValueError(f"bugs are implemented for {', '.join(_BROKEN)} only")
            self.mechanism = _BROKEN[base.name](self.bug)
        else:
            self.mechanism = base
        self.name = f"in-process:{self.mechanism.name}" + ("" if self.defence == "none" else f"+{self.defence}")
        self.judge_calibrate = bool(judge_calibrate)
        self.judge_calls = 0
        self.refusals = 0
        self._judged: dict[tuple[str, str], tuple[bool, float]] = {}

    def prompt_template(self, attack: AttackQuery) -> dict[str, Any]:
        """The template fields the model sees: the attack's instruction, then the defence prompt."""
        t = attack.template(self.template)
        if self.defence != "none":
            from app.icl import get_template

            t["instruction"] = defend_instruction(get_template(t).instruction, self.defence)
        return t

    def _classify(self, context: Sequence[Exemplar], attack: AttackQuery,
                  rng: np.random.Generator) -> ClassificationResult:
        return self.mechanism.classify(self.lm, list(context), attack.query, attack.labels,
                                       self.prompt_template(attack), self.params, rng)

    def judge(self, context: Sequence[Exemplar], attack: AttackQuery, output: str) -> tuple[bool, float]:
        """L3 on one release (ContextLeak App. B): the system prompt (instruction + exemplars) and the output."""
        sp = system_prompt_of(self.prompt_template(attack), list(context), attack.labels)
        key = (sp, output)
        if key not in self._judged:
            self._judged[key] = judge_says_attack(self.lm, sp, output, calibrate=self.judge_calibrate)
            self.judge_calls += 1
        return self._judged[key]

    def observe(self, context: Sequence[Exemplar], attack: AttackQuery, rng: np.random.Generator) -> Observation:
        res = self._classify(context, attack, rng)
        label = res.label
        if self.defence == "L3":
            if REFUSAL_LABEL in attack.labels:
                raise ValueError(f"the refusal {REFUSAL_LABEL!r} is one of the attack's labels")
            said_attack, _p = self.judge(context, attack, label)
            if said_attack:
                label = REFUSAL_LABEL  # counts as "not the positive label"; white-box internals unchanged
                self.refusals += 1
        return Observation(label, _scores(res.internals), _clean(res.internals),
                           res.privacy.get("epsilon"), res.privacy.get("delta"))

    def clean_votes(self, context: Sequence[Exemplar], attack: AttackQuery, rng: np.random.Generator) -> np.ndarray:
        """The non-private M' of tight-auditing Algorithm 1 line 1: the pre-noise scores of one call
        (rnm: the vote histogram; poe: lam U, whose noise is Gumbel(0, 1))."""
        res = self._classify(context, attack, rng)
        cv = _clean(res.internals)
        if cv is None:
            raise ValueError(f"{self.mechanism.name} has no pre-noise scores to bootstrap")
        return cv

    def noise(self, n_exemplars: int) -> VotingNoise:
        if self.defence == "L3":
            raise ValueError("the L3 judge filters each release after the noise; the bootstrap cannot re-apply "
                             "it: use direct mode")
        if self.base_name == "rnm":
            return rnm_noise(self.params, n_exemplars, self.bug)
        if self.base_name == "poe":
            return poe_noise(self.params, n_exemplars, self.bug)
        raise ValueError(f"the bootstrap re-applies the mechanism's noise: use one of {', '.join(BOOTSTRAP_MECHANISMS)}")

    def claimed(self, n_exemplars: int) -> tuple[float | None, float | None]:
        if not self.mechanism.is_private:
            return None, None
        c = self.mechanism.cost(self.params, n_exemplars)
        return c.get("epsilon"), c.get("delta")


# ---------------------------------------------------------------------------
# Simulated votes
# ---------------------------------------------------------------------------


class SimulatedVotingTarget:
    """Fixed clean votes (aligned with ``attack.labels``) with and without the canary, plus the
    noise. The canary's presence is read from the context (it is there or not)."""

    white_box = True

    def __init__(self, votes_with: Sequence[float], votes_without: Sequence[float], noise: VotingNoise) -> None:
        self.votes_with = np.asarray(votes_with, dtype=float)
        self.votes_without = np.asarray(votes_without, dtype=float)
        if self.votes_with.shape != self.votes_without.shape or self.votes_with.ndim != 1:
            raise ValueError("votes_with and votes_without must be 1-d of the same length")
        self.noise_model = noise
        self.name = "simulated-voting"

    def _votes(self, context: Sequence[Exemplar], attack: AttackQuery) -> np.ndarray:
        if self.votes_with.size != len(attack.labels):
            raise ValueError(f"the simulated votes have {self.votes_with.size} labels, the query {len(attack.labels)}")
        present = tuple(attack.canary.exemplar()) in [tuple(e) for e in context]
        return self.votes_with if present else self.votes_without

    def observe(self, context: Sequence[Exemplar], attack: AttackQuery, rng: np.random.Generator) -> Observation:
        v = self._votes(context, attack)
        noisy = self.noise_model.sample(v, rng)
        return Observation(attack.labels[int(np.argmax(noisy))], noisy, v.copy(),
                           self.noise_model.epsilon, self.noise_model.delta)

    def clean_votes(self, context: Sequence[Exemplar], attack: AttackQuery, rng: np.random.Generator) -> np.ndarray:
        return self._votes(context, attack).copy()

    @property
    def partitions(self) -> int:
        """T: the votes cast (every partition votes once)."""
        return int(round(float(self.votes_without.sum())))

    def noise(self, n_exemplars: int) -> VotingNoise:
        return self.noise_model

    def claimed(self, n_exemplars: int) -> tuple[float | None, float | None]:
        return self.noise_model.epsilon, self.noise_model.delta


# ---------------------------------------------------------------------------
# Remote gateway
# ---------------------------------------------------------------------------


@dataclass
class RemoteTarget:
    """A dpicl gateway: ``POST /v1/datasets`` (admin scope) per distinct context, then
    ``POST /v1/private/classify``. ``white_box`` asks for internals (needs the 'internals' scope);
    ``seeded`` sends a noise seed per trial (only servers with seeded noise allowed accept it).
    ``budget_epsilon``: the budget each registered set gets (an audit spends one answer per trial).
    ``transport``: the httpx transport under every connection (the job layer's egress policy);
    ``retry``: connection errors, timeouts and 5xx are retried, then TargetUnavailableError (app.audit.gateway)."""

    base_url: str
    mechanism: str = "rnm"
    params: dict[str, Any] = field(default_factory=dict)
    template: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)  # never in a repr, a log line or a message
    white_box: bool = False
    seeded: bool = False
    budget_epsilon: float = 1e6
    budget_delta: float = 0.5
    timeout: float = 300.0
    client: Any = None
    transport: Any = None
    retry: RetryPolicy | None = None
    name: str = "remote"
    datasets: dict[str, str] = field(default_factory=dict)
    last_privacy: dict[str, Any] | None = None
    # (released label, clean scores, noisy scores) of every clean call: the gateway's own noise,
    # which the bootstrap's re-applied noise never shows (app.audit.conformance tests it).
    released_log: list[tuple[str, np.ndarray, np.ndarray | None]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.client is None:
            self.client = gateway_client(self.base_url, self.api_key, self.timeout, self.transport)
        self.name = f"remote:{self.base_url}"

    def close(self) -> None:
        self.client.close()

    def _check(self, r: httpx.Response, what: str) -> dict[str, Any]:
        return gateway_json(r, what)

    def dataset_for(self, context: Sequence[Exemplar], attack: AttackQuery) -> str:
        tmpl = {k: v for k, v in attack.template(self.template).items()
                if k in ("instruction", "input_prefix", "output_prefix")}
        body: dict[str, Any] = {
            "name": "canary-audit",
            "task": "classification",
            "labels": list(attack.labels),
            "template": tmpl,
            "budget": {"epsilon": self.budget_epsilon, "delta": self.budget_delta},
            "exemplars": [{"input": a, "output": b} for a, b in context],
            # Every trial must draw fresh noise: identical queries must not get a stored answer back.
            "answer_reuse": False,
        }
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if key not in self.datasets:
            adj = self.params.get("adjacency")
            if adj:
                body["budget"]["adjacency"] = adj
            self.datasets[key] = gateway_post(self.client, "/v1/datasets", body, "register dataset", self.retry,
                                               expect=("id",))["id"]
        return self.datasets[key]

    def _ask(self, context: Sequence[Exemplar], attack: AttackQuery, rng: np.random.Generator,
             internals: bool) -> dict[str, Any]:
        body: dict[str, Any] = {"dataset_id": self.dataset_for(context, attack), "query": attack.query,
                                "mechanism": self.mechanism, "return_internals": internals}
        known = ("epsilon", "delta", "partitions", "shots_per_partition", "adjacency", "calibrate")
        body.update({k: v for k, v in self.params.items() if k in known})
        extra = {k: v for k, v in self.params.items() if k not in known}
        if extra:
            body["params"] = extra
        if self.seeded:
            body["seed"] = int(rng.integers(0, 2**53))  # the API takes JSON-safe integers (<= 2**53 - 1)
        out = gateway_post(self.client, "/v1/private/classify", body, "private classify", self.retry,
                           expect=("label",))
        self.last_privacy = out.get("privacy")
        return out

    def observe(self, context: Sequence[Exemplar], attack: AttackQuery, rng: np.random.Generator) -> Observation:
        out = self._ask(context, attack, rng, self.white_box)
        internals = out.get("internals") if self.white_box else None
        priv = out.get("privacy") or {}
        return Observation(out["label"], _scores(internals), _clean(internals),
                           priv.get("epsilon"), priv.get("delta"))

    def clean_votes(self, context: Sequence[Exemplar], attack: AttackQuery, rng: np.random.Generator) -> np.ndarray:
        out = self._ask(context, attack, rng, True)
        cv = _clean(out.get("internals"))
        if cv is None:
            raise ValueError(f"the gateway returned no pre-noise scores for {self.mechanism}")
        self.released_log.append((out["label"], cv, _scores(out.get("internals"))))
        return cv

    def _mechanism_params(self) -> dict[str, Any]:
        from app.mechanisms import get_mechanism

        fields = get_mechanism(self.mechanism).params_type.__dataclass_fields__
        return {k: v for k, v in self.params.items() if k in fields}

    def noise(self, n_exemplars: int) -> VotingNoise:
        if self.mechanism == "rnm":
            return rnm_noise(self.params, n_exemplars)
        if self.mechanism == "poe":  # Gumbel(0, 1) on the gateway's clean_scores = lam U
            return poe_noise(self._mechanism_params(), n_exemplars)
        raise ValueError(f"the bootstrap re-applies the mechanism's noise: use one of {', '.join(BOOTSTRAP_MECHANISMS)}")

    def claimed(self, n_exemplars: int) -> tuple[float | None, float | None]:
        if self.last_privacy:
            return self.last_privacy.get("epsilon"), self.last_privacy.get("delta")
        return self.params.get("epsilon"), self.params.get("delta")


class ReleasedLabelOnly:
    """A target seen black-box: each observation keeps the released label only (no votes, no noisy scores,
    no reported cost), whatever the wrapped target could show. A ``threat_model`` "black-box" audit of an
    in-process mechanism sees what an outside auditor of the same gateway would."""

    white_box = False

    def __init__(self, target: Any) -> None:
        self._target = target
        self.name = target.name

    def __getattr__(self, key: str) -> Any:  # the mechanism, its params, calls...: the wrapped target's
        return getattr(self._target, key)

    def observe(self, context: Sequence[Exemplar], attack: AttackQuery, rng: np.random.Generator) -> Observation:
        return Observation(self._target.observe(context, attack, rng).label)
