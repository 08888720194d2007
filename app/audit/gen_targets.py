"""Generation targets: the same campaign code (``app.audit.campaign``) against text answers.

* :class:`GenerationMechanismTarget`: an ``app.mechanisms.generation`` mechanism run
  here (white-box for ``esa``: the noisy mean embedding is observable; for ``clip_softmax``, ``poe``
  and ``mozo`` in a white-box sequential audit: each step's clean statistic, ``trace_token_steps``;
  for ``ksa`` its internals' gaps, k* and test outcome).
* :class:`RemoteGenerationTarget`: a dpicl gateway, ``POST /v1/datasets`` (task
  generation) then ``POST /v1/private/generate`` (white-box with the 'internals' scope).

Both turn an answer into a :class:`GenerationObservation` with the auditor's embedder
(:class:`SignalDecider`): the nearest signal text (black-box decision of Prompts 2/3),
the repeat attack's similarity score, and the white-box statistics of the noisy mean.
The auditor's embedder must be the mechanism's (MiniLM here) for the white-box
statistics to mean what the paper means; the black-box decision works with any.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np

from app.audit.gen_queries import GenerationAttack
from app.audit.gateway import RetryPolicy, gateway_client, gateway_json, gateway_post
from app.audit.targets import Observation

if TYPE_CHECKING:
    import httpx

    from app.mechanisms.gen_common import GenerationRequest, GenerationResult

Exemplar = tuple[str, str]
REFUSAL = "None"  # ContextLeak App. B: "replace your answer with None"
PRIVACY_KEYS = ("epsilon", "delta", "adjacency")
NEAREST_TOL = 1e-4  # SignalDecider.nearest: distance slack, relative to 1 + |noisy mean|
# What the nearest-candidate check embeds at most per answer (esa's own cap on ``candidates``; a remote
# gateway's internals are the audited system's words: more, or non-text, is "not checkable")
NEAREST_MAX_CANDIDATES, NEAREST_MAX_CHARS = 200, 20_000


@dataclass(frozen=True)
class GenerationObservation(Observation):
    text: str = ""
    score: float | None = None  # black-box score (repeat attack): larger = more like a member
    noisy_vector: np.ndarray | None = None  # white-box: the noisy mean embedding (ESA)
    clean_vector: np.ndarray | None = None  # white-box: the clean mean it was noised from (ESA's noise = the difference)
    # white-box: the released text is the reported candidate nearest the noisy mean (ESA, Algorithm 3 line 11) in
    # the auditor's embedding; None: not checked (no candidates or no noisy mean reported)
    nearest: bool | None = None
    # white-box, in-process token mechanisms only (``app.mechanisms.step_trace``): per private step the
    # clean statistic over the candidates and the released token's position among them
    # (``gen_noise.compact_step``); exemplar-derived: never serialised, never in a trial row
    token_steps: tuple[tuple[np.ndarray, int], ...] | None = None
    # white-box ksa (``gen_noise_ksa``): its internals' clean count gaps, the chosen k* and PTR's outcome
    ksa_release: tuple[np.ndarray, int, bool] | None = None


@dataclass(frozen=True)
class CleanDraw:
    """What the bootstrap keeps of one noise-free call (tight-auditing Algorithm 1 line 1 for ESA):
    the clean mean embedding and the zero-shot candidates' embeddings (public: no exemplar is read)."""

    clean_mean: np.ndarray
    candidates: np.ndarray
    sigma: float


class SignalDecider:
    """Embeds texts once (cache) and makes the decisions of ``app.audit.gen_queries``."""

    def __init__(self, embedder: Any) -> None:
        if embedder is None:
            raise ValueError("a generation audit needs an embedder (the auditor's; MiniLM is bundled)")
        self.embedder = embedder
        self._cache: dict[str, np.ndarray] = {}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self._cache]
        if missing:
            for t, e in zip(missing, np.asarray(self.embedder.embed(list(missing)), dtype=float)):
                self._cache[t] = e
        return np.vstack([self._cache[t] for t in texts]) if texts else np.zeros((0, 0))

    def points(self, attack: GenerationAttack) -> np.ndarray:
        """Rows: the texts the statistics measure distances to ((y1, y0), or (reference,))."""
        if attack.decision == "similarity":
            return self.embed([attack.reference or ""])
        return self.embed(list(attack.labels[:2]))

    def nearest(self, text: str, noisy_mean: np.ndarray, candidates: Sequence[str] | None,
                reported: Sequence[float] | None = None) -> bool | None:
        """Is ``text`` the candidate nearest ``noisy_mean`` in L2 of the embedder's vectors (ESA's
        selection, Algorithm 3 line 11)? False where another candidate is nearer than the released
        text by more than ``NEAREST_TOL`` x (1 + |noisy mean|) (slack for embedding float error, batch
        padding, another machine's MiniLM), or the text is no candidate. None: not checkable -- no
        candidates, a noisy mean of another dimension, or ``reported`` (the target's own
        ``candidate_distances``) that the auditor's embedder does not reproduce within the same slack:
        the target embeds with another model, and "nearest" in the auditor's space would say nothing
        about its selection (a false violation). The candidates (zero-shot, fresh every answer) are
        embedded without the cache."""
        if not candidates or not isinstance(candidates, (list, tuple)) or len(candidates) > NEAREST_MAX_CANDIDATES:
            return None
        if not all(isinstance(c, str) and len(c) <= NEAREST_MAX_CHARS for c in candidates):
            return None
        if text not in candidates:
            return False
        e = np.asarray(self.embedder.embed(list(candidates)), dtype=float)
        if e.ndim != 2 or e.shape[1] != noisy_mean.shape[-1]:
            return None
        d = np.linalg.norm(e - noisy_mean[None, :], axis=1)
        slack = NEAREST_TOL * (1.0 + float(np.linalg.norm(noisy_mean)))
        if reported is not None:
            r = np.asarray(reported, dtype=float).ravel()
            if r.shape != d.shape or not bool(np.all(np.abs(r - d) <= slack)):
                return None
        return bool(d[list(candidates).index(text)] - d.min() <= slack)

    def observe(self, text: str, noisy_mean: Any, attack: GenerationAttack, epsilon: float | None = None,
                delta: float | None = None, clean: Any = None,
                candidates: Sequence[str] | None = None,
                reported: Sequence[float] | None = None) -> GenerationObservation:
        e = self.embed([text])[0]
        pts = self.points(attack)
        m = None if noisy_mean is None else np.asarray(noisy_mean, dtype=float)
        c = None if clean is None or m is None else np.asarray(clean, dtype=float)
        near = None if m is None or c is None else self.nearest(text, m, candidates, reported)
        if attack.decision == "similarity":
            score = -float(np.linalg.norm(e - pts[0]))
            scores = None if m is None else np.array([-float(np.linalg.norm(m - pts[0])), 0.0])
            # The label slot never carries the answer: results and trial rows stay free of generated text.
            return GenerationObservation(attack.labels[1], scores, None, epsilon, delta, text=text, score=score,
                                         noisy_vector=m, clean_vector=c, nearest=near)
        d = np.linalg.norm(pts - e[None, :], axis=1)
        label = attack.labels[0] if d[0] < d[1] else attack.labels[1]
        scores = None if m is None else -np.linalg.norm(pts - m[None, :], axis=1)  # margin = d0 - d1
        return GenerationObservation(label, scores, None, epsilon, delta, text=text, noisy_vector=m, clean_vector=c,
                                     nearest=near)


def esa_claimed_sigma(mechanism: str, params: Mapping[str, Any], n_exemplars: int, max_tokens: int) -> float | None:
    """sigma of ``esa.configure`` for the claim (epsilon, delta, adjacency, params): what the noise a
    white-box audit observes (noisy mean - clean mean) must be drawn with; None for other mechanisms."""
    if mechanism != "esa":
        return None
    from app.mechanisms import esa
    from app.mechanisms.generation import GenerationRequest

    pp, mech = _split_privacy(params)
    req = GenerationRequest.build([("x", "y")] * max(1, n_exemplars), "q", epsilon=pp.get("epsilon"),
                                  delta=pp.get("delta", 1e-5), adjacency=pp.get("adjacency", "replace-one"),
                                  max_tokens=max_tokens, params=mech)
    return float(esa.configure(req).noise.sigma)


def generation_conformance(target: Any, n_exemplars: int, observations: Sequence[Any], confidence: float) -> Any:
    """White-box ESA noise conformance (``app.audit.conformance.noise_conformance``): the residuals
    noisy mean - clean mean of every trial are i.i.d. N(0, sigma^2) draws on every dimension for a
    correct ESA (Algorithm 3 line 9), tested against the claimed sigma (chi-square scale pivot, KS,
    exact zeros) at ``conformance_confidence(confidence)`` (the audit's, as for classification). None
    where a trial lacks either vector or the target claims no ESA sigma."""
    from app.audit.conformance import conformance_confidence, noise_conformance
    from app.audit.noise import VotingNoise

    noisy = [v for o in observations if (v := getattr(o, "noisy_vector", None)) is not None]
    clean = [v for o in observations if (v := getattr(o, "clean_vector", None)) is not None]
    if not observations or len(noisy) < len(observations) or len(clean) < len(observations):
        return None
    sigma = getattr(target, "claimed_sigma", lambda n: None)(n_exemplars)
    if sigma is None:
        return None
    eps, delta = target.claimed(n_exemplars)
    return noise_conformance(np.vstack(clean), np.vstack(noisy), None,
                             VotingNoise("gaussian", sigma, float(eps or 0.0), float(delta or 0.0)),
                             confidence=conformance_confidence(confidence))


def _split_privacy(params: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    p = dict(params or {})
    priv = {k: p.pop(k) for k in PRIVACY_KEYS if k in p}
    return priv, p


class GenerationMechanismTarget:
    """A generation mechanism in this process. ``params``: epsilon, delta, adjacency and the
    mechanism's own parameters (partitions, candidates, ...). ``defence`` (ContextLeak 4.1, App. B;
    ``app.audit.defences``): L1/L2 append the defence prompt to the instruction; L3 also asks the
    LLM judge about each answer and releases the refusal ``"None"`` on 'Attack' (decided as "not a
    member": the y0 signal, the lowest repeat score)."""

    task = "generation"

    def __init__(self, lm: Any, embedder: Any, mechanism: str = "esa", params: Mapping[str, Any] | None = None,
                 template: Mapping[str, Any] | None = None, max_tokens: int = 24,
                 decider: SignalDecider | None = None, defence: str | None = None) -> None:
        from app.audit.defences import parse_defence
        from app.mechanisms.generation import get_generation_mechanism

        self.lm = lm
        self.embedder = embedder
        self.mechanism = get_generation_mechanism(mechanism)
        self.params = dict(params or {})
        self.privacy_params, self.mech_params = _split_privacy(self.params)
        self.template = dict(template or {})
        self.max_tokens = int(max_tokens)
        self.decider = decider or SignalDecider(embedder)
        self.white_box = self.mechanism.name == "esa"
        self.tracing = False  # token mechanisms: collect each step's statistic (a white-box sequential audit)
        self.defence = parse_defence(defence)
        self.name = f"in-process:{self.mechanism.name}" + ("" if self.defence == "none" else f"+{self.defence}")
        self.calls = 0
        self.judge_calls = 0
        self.refusals = 0

    def prompt_template(self, attack: GenerationAttack) -> dict[str, Any]:
        from app.audit.defences import defend_instruction
        from app.mechanisms.gen_common import PromptTemplate

        t = attack.template(self.template)
        if self.defence != "none":
            t["instruction"] = defend_instruction(PromptTemplate.from_any(t).instruction, self.defence)
        return t

    def request(self, context: Sequence[Exemplar], attack: GenerationAttack) -> GenerationRequest:
        from app.mechanisms.generation import GenerationRequest

        pp = self.privacy_params
        return GenerationRequest.build(
            list(context), attack.query, epsilon=pp.get("epsilon") if self.mechanism.is_private else None,
            delta=pp.get("delta", 1e-5), adjacency=pp.get("adjacency", "replace-one"), max_tokens=self.max_tokens,
            template=self.prompt_template(attack), params=self.mech_params)

    def trace_token_steps(self, on: bool) -> None:
        """Hand each private step's statistic to the audit (``gen_sequential`` for a white-box audit of a
        token mechanism): ``app.mechanisms.step_trace``'s collector, set around this target's own
        mechanism call only; the result, its internals and the trial rows stay as they are."""
        from app.audit.gen_noise import TOKEN

        self.tracing = bool(on) and self.mechanism.name in TOKEN

    def _run(self, context: Sequence[Exemplar], attack: GenerationAttack,
             rng: np.random.Generator) -> GenerationResult:
        from app.mechanisms.generation import generate

        self.calls += 1
        return generate(self.mechanism.name, self.request(context, attack), self.lm, self.embedder, rng)

    def _traced(self, context: Sequence[Exemplar], attack: GenerationAttack,
                rng: np.random.Generator) -> tuple[GenerationResult, tuple[tuple[np.ndarray, int], ...] | None]:
        if not self.tracing:
            return self._run(context, attack, rng), None
        from app.audit.gen_noise import compact_step
        from app.mechanisms import step_trace

        with step_trace.collect() as steps:
            res = self._run(context, attack, rng)
        return res, tuple(compact_step(st.statistic, st.token) for st in steps)

    def observe(self, context: Sequence[Exemplar], attack: GenerationAttack,
                rng: np.random.Generator) -> GenerationObservation:
        res, steps = self._traced(context, attack, rng)
        obs = self.decider.observe(res.text, res.internals.get("noisy_mean"), attack,
                                   res.privacy.get("epsilon"), res.privacy.get("delta"), res.internals.get("clean_mean"),
                                   res.internals.get("candidates"), res.internals.get("candidate_distances"))
        if steps is not None:
            obs = replace(obs, token_steps=steps)
        if self.mechanism.name == "ksa":
            from app.audit.gen_noise_ksa import release_of

            obs = replace(obs, ksa_release=release_of(res.internals))
        if self.defence == "L3" and self._judge(context, attack, res.text):
            self.refusals += 1
            # The refusal says nothing: decided "not a member"; white-box internals unchanged.
            return GenerationObservation(attack.labels[1], obs.noisy_scores, None, obs.epsilon, obs.delta,
                                         text=REFUSAL, score=None if obs.score is None else -2.0,
                                         noisy_vector=obs.noisy_vector, clean_vector=obs.clean_vector,
                                         nearest=None)  # the judge replaced the release after the noise
        return obs

    def _judge(self, context: Sequence[Exemplar], attack: GenerationAttack, output: str) -> bool:
        """L3 (ContextLeak App. B): the system prompt (instruction + exemplars) and the answer."""
        from app.audit.defences import judge_says_attack
        from app.mechanisms.gen_common import PromptTemplate

        t = PromptTemplate.from_any(self.prompt_template(attack))
        demos = [f"{t.input_prefix} {a}\n{t.output_prefix} {b}".strip() for a, b in context]
        self.judge_calls += 1
        return judge_says_attack(self.lm, "\n\n".join([t.instruction, *demos]), output)[0]

    def clean_votes(self, context: Sequence[Exemplar], attack: GenerationAttack,
                    rng: np.random.Generator) -> CleanDraw:
        """One call with its noise discarded: the clean mean and the public candidates."""
        if self.defence == "L3":
            raise ValueError("the L3 judge filters each answer after the noise; use direct mode")
        if not self.white_box:
            raise ValueError(f"the bootstrap re-applies ESA's Gaussian noise: {self.mechanism.name} has no clean mean")
        res = self._run(context, attack, rng)
        cands = self.decider.embed(list(res.internals["candidates"]))
        return CleanDraw(np.asarray(res.internals["clean_mean"], dtype=float), cands, float(res.internals["sigma"]))

    def claimed(self, n_exemplars: int) -> tuple[float | None, float | None]:
        if not self.mechanism.is_private:
            return None, None
        from app.mechanisms.generation import GenerationRequest

        pp = self.privacy_params
        req = GenerationRequest.build([("x", "y")] * max(1, n_exemplars), "q", epsilon=pp.get("epsilon"),
                                      delta=pp.get("delta", 1e-5), adjacency=pp.get("adjacency", "replace-one"),
                                      max_tokens=self.max_tokens, params=self.mech_params)
        c = self.mechanism.cost(req)
        return c.get("epsilon"), c.get("delta")

    def partitions(self, n_exemplars: int) -> int | None:
        p = self.mech_params
        return int(p["partitions"]) if p.get("partitions") else None

    def claimed_sigma(self, n_exemplars: int) -> float | None:
        """ESA's sigma for the claim (its own calibration), None for other mechanisms."""
        return esa_claimed_sigma(self.mechanism.name, self.params, n_exemplars, self.max_tokens)

    def prompts_per_call(self, n_exemplars: int) -> int | None:
        """Model prompts one answer costs (ESA: partitions + zero-shot candidates)."""
        t = self.partitions(n_exemplars)
        if self.mechanism.name == "esa":
            from app.mechanisms import esa

            return (t or esa.DEFAULT_PARTITIONS) + int(self.mech_params.get("candidates", esa.DEFAULT_CANDIDATES))
        return t


@dataclass
class RemoteGenerationTarget:
    """A dpicl gateway's ``/v1/private/generate``. Each distinct context is registered once as a
    generation dataset (admin scope). ``white_box`` asks for internals (the 'internals' scope)."""

    base_url: str
    embedder: Any
    mechanism: str = "esa"
    params: dict[str, Any] = field(default_factory=dict)
    template: dict[str, Any] = field(default_factory=dict)
    api_key: str | None = field(default=None, repr=False)  # never in a repr, a log line or a message
    white_box: bool = False
    seeded: bool = False
    max_tokens: int = 24
    budget_epsilon: float = 1e6
    budget_delta: float = 0.5
    timeout: float = 600.0
    client: Any = None
    transport: Any = None
    retry: RetryPolicy | None = None
    datasets: dict[str, str] = field(default_factory=dict)
    last_privacy: dict[str, Any] | None = None
    task = "generation"

    def __post_init__(self) -> None:
        if self.client is None:
            self.client = gateway_client(self.base_url, self.api_key, self.timeout, self.transport)
        self.decider = SignalDecider(self.embedder)
        self.name = f"remote:{self.base_url}"
        self.calls = 0

    def close(self) -> None:
        self.client.close()

    def _check(self, r: httpx.Response, what: str) -> dict[str, Any]:
        return gateway_json(r, what)

    def dataset_for(self, context: Sequence[Exemplar], attack: GenerationAttack) -> str:
        tmpl = {k: v for k, v in attack.template(self.template).items()
                if k in ("instruction", "input_prefix", "output_prefix")}
        budget: dict[str, Any] = {"epsilon": self.budget_epsilon, "delta": self.budget_delta}
        if self.params.get("adjacency"):
            budget["adjacency"] = self.params["adjacency"]
        body = {"name": "canary-audit", "task": "generation", "template": tmpl, "budget": budget,
                "exemplars": [{"input": a, "output": b} for a, b in context],
                "answer_reuse": False}  # every trial draws fresh noise (no stored answer of an identical query)
        key = hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()
        if key not in self.datasets:
            self.datasets[key] = gateway_post(self.client, "/v1/datasets", body, "register dataset", self.retry,
                                               expect=("id",))["id"]
        return self.datasets[key]

    def _ask(self, context: Sequence[Exemplar], attack: GenerationAttack, rng: np.random.Generator,
             internals: bool) -> dict[str, Any]:
        priv, mech = _split_privacy(self.params)
        body: dict[str, Any] = {"dataset_id": self.dataset_for(context, attack), "query": attack.query,
                                "mechanism": self.mechanism, "max_tokens": self.max_tokens,
                                "return_internals": internals, "params": mech, **priv}
        if self.seeded:
            body["seed"] = int(rng.integers(0, 2**53))  # the API takes JSON-safe integers (<= 2**53 - 1)
        self.calls += 1
        out = gateway_post(self.client, "/v1/private/generate", body, "private generate", self.retry,
                           expect=("text",))
        self.last_privacy = out.get("privacy")
        return out

    def observe(self, context: Sequence[Exemplar], attack: GenerationAttack,
                rng: np.random.Generator) -> GenerationObservation:
        out = self._ask(context, attack, rng, self.white_box)
        internals = out.get("internals") or {}
        priv = out.get("privacy") or {}
        obs = self.decider.observe(out["text"], internals.get("noisy_mean") if self.white_box else None, attack,
                                   priv.get("epsilon"), priv.get("delta"),
                                   internals.get("clean_mean") if self.white_box else None,
                                   internals.get("candidates") if self.white_box else None,
                                   internals.get("candidate_distances") if self.white_box else None)
        if self.white_box and self.mechanism == "ksa":
            from app.audit.gen_noise_ksa import release_of

            obs = replace(obs, ksa_release=release_of(internals))
        return obs

    def clean_votes(self, context: Sequence[Exemplar], attack: GenerationAttack,
                    rng: np.random.Generator) -> CleanDraw:
        out = self._ask(context, attack, rng, True)
        i = out.get("internals") or {}
        if "clean_mean" not in i:
            raise RuntimeError("private generate: no clean_mean in internals (mechanism esa and the 'internals' "
                               "scope are needed for the bootstrap)")
        return CleanDraw(np.asarray(i["clean_mean"], dtype=float), self.decider.embed(list(i["candidates"])),
                         float(i["sigma"]))

    def claimed(self, n_exemplars: int) -> tuple[float | None, float | None]:
        if self.last_privacy:
            return self.last_privacy.get("epsilon"), self.last_privacy.get("delta")
        return self.params.get("epsilon"), self.params.get("delta")

    def partitions(self, n_exemplars: int) -> int | None:
        return int(self.params["partitions"]) if self.params.get("partitions") else None

    def claimed_sigma(self, n_exemplars: int) -> float | None:
        """The sigma a correct ESA gateway uses for these params (the auditor's own calibration)."""
        return esa_claimed_sigma(self.mechanism, self.params, n_exemplars, self.max_tokens)

    def prompts_per_call(self, n_exemplars: int) -> int | None:
        t = self.partitions(n_exemplars)
        if self.mechanism == "esa" and t:
            return t + int(self.params.get("candidates", 20))
        return t
