"""``canary_mia``'s configuration: the target, the dataset, the canary, the power requirement and
the audit's design (``app.jobs.kinds.canary_mia`` runs it)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.jobs import secrets
from app.jsonbody import JSONBody, VisibleText


class TargetConfig(secrets.TargetCredentials):
    model_config = ConfigDict(extra="forbid")

    type: Literal["mechanism", "remote", "simulated"] = "mechanism"
    mechanism: str | None = Field(default=None, description="classification: rnm (default) | poe | icl | zero_shot; "
                                  "generation: esa (default) | ksa | clip_softmax | poe | zero_shot | full_context")
    params: dict[str, Any] = Field(default_factory=dict, description="epsilon, delta, partitions, shots_per_partition...")
    model: str | None = Field(default=None, description="a model this worker serves (mechanism targets)")
    embedder: str | None = Field(default=None, description="generation: the embedder model (the mechanism's and "
                                 "the auditor's; default: the first this worker serves)")
    bug: str | dict[str, Any] | None = Field(default=None, description="rnm, poe: noise_quarter | noise_tenth | "
                                             "winner_only | {noise_multiplier, winner_only} (to show it is caught; "
                                             "poe: noise_quarter = lambda x4)")
    defence: Literal["none", "L0", "L1", "L2", "L3"] = Field(
        default="none", description="mechanism targets: heuristic defence (ContextLeak 4.1, App. B): L1/L2 system "
        "prompts, L3 = L2 + LLM judge that refuses on 'Attack' (direct mode only)")
    url: str | None = Field(default=None, description="remote: the gateway's base URL")
    white_box: bool = Field(default=False, description="remote: ask for internals")
    seeded: bool = Field(default=False, description="remote: send a noise seed per trial")
    retries: int = Field(default=3, ge=0, le=10, description="remote: retries of a connection error, timeout or "
                         "5xx answer, with exponential back-off; then the job fails with target_unavailable")
    retry_backoff_seconds: float = Field(default=0.25, gt=0, le=60, description="remote: wait before the first "
                                         "retry, doubled before each next one (at most 8 s, or this if larger)")
    timeout_seconds: float | None = Field(default=None, gt=0, le=3600, description="remote: per-request timeout "
                                          "(default 300 s classification, 600 s generation)")
    votes_with: list[float] | None = Field(default=None, max_length=100,
                                           description="simulated: clean votes with the canary")
    votes_without: list[float] | None = Field(default=None, max_length=100)

    @model_validator(mode="after")
    def _shape(self) -> TargetConfig:
        if self.type == "remote" and not self.url:
            raise ValueError("url: required for a remote target")
        if (self.votes_with is None) != (self.votes_without is None):
            raise ValueError("votes_with and votes_without go together")
        return self


class DatasetConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    bundled: str | None = Field(default=None, description="a bundled task (default: the first bundled one)")
    size: int = Field(default=8, ge=1, le=1000, description="exemplars in the audited context")
    exemplars: list[dict[str, str]] | None = Field(default=None, description="[{input, output}] instead of bundled")
    labels: list[str] | None = Field(default=None, max_length=100)  # as a registered set's
    decoy_labels: Annotated[int, Field(ge=0, le=8)] | Annotated[list[VisibleText], Field(max_length=8)] | \
        Literal["auto"] = Field(
        default="auto", description=(
            "classification: labels that no exemplar carries, added to the query's label set (a count: each "
            "named after a label L, 'L (decoy i)', which a model that scores labels by summed log-probs never "
            "votes for; or the names); black-box they make winner-only noise a violation, if the model gives "
            "them no votes. 'auto' (default): one where the audit of an rnm target sees released labels only "
            "(a remote target without white_box, or threat_model black-box; direct or sequential mode), "
            "none otherwise (docs/audit.md#decoy-labels)"))
    pick: Literal["auto", "random", "one_label"] = Field(
        default="auto", description=(
            "how the audited context's size exemplars are drawn from the pool: 'random', or 'one_label' (all of "
            "the pool's most common label other than the canary's: every partition without the canary then votes "
            "alike, the vote model the black-box power assumes); 'auto' (default): one_label where decoys are "
            "auto-added (a black-box audit of rnm) and the pool has enough of one label, random otherwise"))
    template: dict[str, Any] | None = None
    heldout: list[dict[str, str]] | None = Field(default=None, description="for the held-out canary")

    def decoy_count(self) -> int:
        """How many decoy labels the query gets (after CanaryMIAConfig resolved "auto")."""
        d = self.decoy_labels
        return d if isinstance(d, int) else 0 if d == "auto" else len(d)

    @model_validator(mode="after")
    def _distinct_decoys(self) -> DatasetConfig:
        if isinstance(self.decoy_labels, list):
            from app.audit.queries import with_decoys

            try:  # inline labels: checked here; a bundled task's when the job runs
                with_decoys(self.labels or [], self.decoy_labels)
            except ValueError as exc:
                raise ValueError(f"decoy_labels: {exc}") from None
        return self


class CanaryConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    type: Literal["hex", "unigram", "false_fact", "heldout"] = "hex"
    label: str | None = Field(default=None, description="the canary's label (default: the rarest task label)")
    text: str | None = Field(default=None, description="a fixed canary text instead of a generated one")


class PowerConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    alternatives: list[Literal["noise_half", "noise_quarter", "noise_tenth", "winner_only", "no_noise",
                               "non_private"]] | None = Field(
        default=None, min_length=1,
        description="broken implementations the audit must be able to detect for a 'pass' (app.audit.power; "
        "generation: app.audit.gen_power). Default: classification noise_quarter, no_noise; generation "
        "noise_tenth, no_noise, non_private. winner_only is classification only, noise_tenth and non_private "
        "generation only")
    min_detection: float = Field(default=0.9, gt=0, lt=1, description="required P(detect) of each alternative")


class CanaryMIAConfig(JSONBody):
    model_config = ConfigDict(extra="forbid")

    target: TargetConfig = Field(default_factory=TargetConfig)
    dataset: DatasetConfig = Field(default_factory=DatasetConfig)
    canary: CanaryConfig = Field(default_factory=CanaryConfig)
    task: Literal["classification", "generation", "synthesize"] = Field(
        default="classification", description="generation: esa/ksa/clip_softmax/poe/zero_shot/full_context targets, "
        "answers decided by signal texts (tight-auditing 3.4) or the repeat attack; synthesize: the DP synthesizer "
        "(target.params: epsilon, delta, shots_per_label, max_tokens, partitions, shots_per_partition, "
        "public_top_k, adjacency); the attack reads the synthetic set (app.audit.synthesis)")
    query: str | dict[str, Any] | None = Field(default=None, description="default: inquiry (classification), "
                                               "signal_text (generation)")
    signals: list[str] | None = Field(default=None, min_length=2, max_length=2,
                                      description="generation: the signal texts [y1, y0]")
    max_tokens: int = Field(default=24, ge=1, le=256, description="generation: tokens per answer")
    insertion: Literal["contextleak", "paired"] = "paired"
    threat_model: Literal["black-box", "white-box", "both"] = "both"
    mode: Literal["direct", "bootstrap", "sequential"] = Field(
        default="direct", description="sequential: anytime-valid, stops at a violation, a pass or the cap "
        "(app.audit.sequential; generation: app.audit.gen_sequential)")
    trials: Annotated[int, Field(ge=2, le=1_000_000)] | Literal["auto"] = Field(
        default=40, description="trials (direct mode), or 'auto': the planner's count for power.alternatives "
        "(classification rnm; generation esa, clip_softmax, poe, mozo); "
        "sequential: the cap ('auto': 10000)")
    probe: bool = Field(default=True, description="sequential, rnm: draw a one-partition probe first (one model call "
                        "per trial; catches gross violations in a few pairs; app.audit.probe); generation, "
                        "black-box, a design of several units (esa, clip_softmax, poe, mozo): a one-unit probe, "
                        "where the canary decides the release (noise left out: a violation in a few pairs)")
    power: PowerConfig = Field(default_factory=PowerConfig)
    n_llm: int = Field(default=16, ge=1, le=10_000)
    n_sample: int = Field(default=400_000, ge=4, le=4_000_000)
    confidence: float = Field(default=0.95, gt=0, lt=1)
    delta: float | None = Field(default=None, ge=0, lt=1, description="default: the target's delta")
    statistic: Literal["margin", "positive", "reference_vector"] = "margin"
    objective: Literal["epsilon", "mu"] = "epsilon"
    threshold_fraction: float = Field(default=0.5, gt=0, lt=1)
    seed: int | None = Field(default=None, ge=0, le=2**53 - 1)

    @field_validator("n_sample")
    @classmethod
    def _bootstrap_size(cls, n_sample: int, info: ValidationInfo) -> int:
        # At submit where the label count is in the config (simulated votes, inline labels); the job checks the
        # bundled task's (app.jobs.kinds.canary_mia) and the library itself (app.audit.bootstrap).
        target, dataset = info.data.get("target"), info.data.get("dataset")
        labels = target.votes_with if target is not None and target.votes_with is not None else \
            (dataset.labels if dataset is not None else None)
        if info.data.get("mode") == "bootstrap" and labels:
            from app.audit.bootstrap import check_bootstrap_size

            try:
                check_bootstrap_size(n_sample, len(labels))
            except ValueError as exc:
                raise ValueError(str(exc).removeprefix("n_sample: ")) from None
        return n_sample

    @model_validator(mode="after")
    def _default_mechanism(self) -> CanaryMIAConfig:
        if self.dataset.decoy_labels not in (0, [], "auto") and self.task != "classification":
            raise ValueError("dataset.decoy_labels: decoy labels are for classification audits (a label set)")
        if self.target.mechanism is None:
            self.target.mechanism = {"generation": "esa", "synthesize": "synthesize"}.get(self.task, "rnm")
        if self.dataset.decoy_labels == "auto":
            self.dataset.decoy_labels = 1 if self.black_box_rnm() else 0
        if self.dataset.pick == "one_label" and self.task != "classification":
            raise ValueError("dataset.pick: one_label is for classification audits (a label per exemplar)")
        if self.power.alternatives is None:
            from app.audit.gen_power import DEFAULT_GEN_REQUIRED
            from app.audit.power import DEFAULT_REQUIRED

            self.power.alternatives = list(DEFAULT_GEN_REQUIRED if self.task == "generation" else DEFAULT_REQUIRED)
        return self

    def requested_pick(self) -> str:
        """``dataset.pick`` with "auto" decided: one_label for a black-box audit of rnm, random otherwise (the
        job still draws at random where the pool has no label with ``size`` exemplars: canary_data.pick_context)."""
        if self.dataset.pick == "auto":
            return "one_label" if self.black_box_rnm() else "random"
        return self.dataset.pick

    def black_box_rnm(self) -> bool:
        """Whether ``decoy_labels: "auto"`` adds a decoy: a classification audit of report-noisy-max (its
        release floor is what a decoy tests) by a design that uses the floor (direct, sequential), whose
        evidence is the released labels alone. White-box evidence (an in-process mechanism's votes and
        noise, a remote one's internals) sees winner-only noise in one answer without a decoy; simulated
        votes are given per label by the caller."""
        t = self.target
        if self.task != "classification" or t.mechanism != "rnm" or self.mode == "bootstrap":
            return False
        if self.threat_model == "black-box":
            return t.type in ("mechanism", "remote")
        return self.threat_model == "both" and t.type == "remote" and not t.white_box
