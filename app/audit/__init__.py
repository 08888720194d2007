"""Canary membership-inference audits of DP-ICL (library: no FastAPI, no SQL, no settings).

    from app.audit import CampaignConfig, MechanismTarget, make_canary, run_campaign
    canary = make_canary("hex", rng, label="refund")
    res = run_campaign(MechanismTarget(lm, "rnm", {"epsilon": 1, "partitions": 4}), exemplars, canary,
                       "input_output", task_labels=labels, template=template, config=CampaignConfig(), rng=rng)
    res.epsilon            # rigorous Clopper-Pearson lower bound (headline)
    res.estimates          # per threat model: TPR/FPR, accuracy epsilon, GDP estimate, ratios

Papers: ContextLeak (canaries, queries, replace-one coin-flip insertion) and
tight-auditing DP-ICL (paired contexts, inquiry, white-box margin, GDP,
bootstrap Algorithm 1). See docs/audit.md.
"""

from app.audit.bootstrap import DEFAULT_N_SAMPLE, BootstrapResult, bootstrap_audit
from app.audit.campaign import CampaignConfig, CampaignResult, run_campaign, summary
from app.audit.canaries import CANARY_KINDS, FALSE_FACTS, Canary, make_canary
from app.audit.defences import (
    DEFENCE_LEVELS,
    REFUSAL_LABEL,
    defend_instruction,
    judge_says_attack,
    parse_defence,
)
from app.audit.estimates import (
    THREAT_MODELS,
    Estimates,
    estimates_from_counts,
    estimates_from_guesses,
    margin_statistic,
    select_threshold,
    white_box_estimates,
)
from app.audit.gen_bootstrap import esa_bootstrap
from app.audit.gen_queries import (
    GENERATION_STRATEGIES,
    SIGNAL_PAIRS,
    GenerationAttack,
    GenerationStrategy,
    resolve_generation_query,
)
from app.audit.gen_targets import GenerationMechanismTarget, RemoteGenerationTarget, SignalDecider
from app.audit.insertion import INSERTIONS, paired_contexts, plan_trials, replace_one
from app.audit.noise import BUGS, VotingNoise, gaussian_voting_noise, poe_noise, rnm_noise
from app.audit.queries import (
    QUERY_STRATEGIES,
    AttackQuery,
    QueryStrategy,
    get_strategy,
    resolve_query,
)
from app.audit.gateway import RetryPolicy, TargetError, TargetUnavailableError
from app.audit.targets import (
    BrokenPoE,
    BrokenVoting,
    MechanismTarget,
    Observation,
    RemoteTarget,
    SimulatedVotingTarget,
)

__all__ = [
    "RetryPolicy", "TargetError", "TargetUnavailableError",
    "BUGS", "CANARY_KINDS", "DEFENCE_LEVELS", "REFUSAL_LABEL", "BrokenPoE", "defend_instruction", "judge_says_attack",
    "parse_defence", "poe_noise", "DEFAULT_N_SAMPLE", "FALSE_FACTS", "INSERTIONS", "QUERY_STRATEGIES", "THREAT_MODELS",
    "AttackQuery", "BootstrapResult", "BrokenVoting", "CampaignConfig", "CampaignResult", "Canary", "Estimates",
    "MechanismTarget", "Observation", "QueryStrategy", "RemoteTarget", "SimulatedVotingTarget", "VotingNoise",
    "bootstrap_audit", "estimates_from_counts", "estimates_from_guesses", "gaussian_voting_noise", "get_strategy",
    "make_canary", "margin_statistic", "paired_contexts", "plan_trials", "replace_one", "resolve_query", "rnm_noise",
    "run_campaign", "select_threshold", "summary", "white_box_estimates",
    "GENERATION_STRATEGIES", "SIGNAL_PAIRS", "GenerationAttack", "GenerationMechanismTarget", "GenerationStrategy",
    "RemoteGenerationTarget", "SignalDecider", "esa_bootstrap", "resolve_generation_query",
]
