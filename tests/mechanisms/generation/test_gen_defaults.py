"""mozo's data-aware defaults (issue 29, item 6; app/mechanisms/gen_defaults.py): a call that leaves the
parameters out runs the measured best the dataset allows (experts = min(60, n // 4) x 4 shots, per_expert,
private_tokens min(16, max_tokens)), or is refused naming ``params.experts`` with what to change; given
parameters are never overridden; the charge is the charge of what runs."""

from __future__ import annotations

import math

import pytest

from app.icl.samples import load_sample
from app.mechanisms import gen_defaults, mozo
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.generation import GenerationRequest, get_generation_mechanism
from app.mechanisms.poe_decode import calibrate_per_token

SAMPLE = load_sample("gen_dialogsum")
MEASURED = {"experts": 60, "group_size": 4, "lambda_mode": "per_expert", "private_tokens": 16}


def _req(exemplars, params=None, **kw):
    base = dict(epsilon=2.0, delta=1e-5, max_tokens=32, template=SAMPLE.template)
    base.update(kw)
    return GenerationRequest.build(exemplars, SAMPLE.example_queries[0], params=params or {}, **base)


def _used(cost):
    p = cost["params"]
    return {k: p[k] for k in ("experts", "group_size", "lambda_mode", "private_tokens")}


def test_default_on_the_dialogue_sample_is_the_measured_setting_and_charged_as_it():
    assert len(SAMPLE.exemplars) == 240
    mech = get_generation_mechanism("mozo")
    default = mech.cost(_req(SAMPLE.exemplars))
    explicit = mech.cost(_req(SAMPLE.exemplars, MEASURED))
    assert _used(default) == MEASURED
    assert default["params"]["compositions"] == 16 and "0-DP" in default["params"]["public_continuation"]
    # the charge is the charge of the parameters that run (16 private steps), within the budget
    assert default["epsilon"] == explicit["epsilon"] and default["rdp"] == explicit["rdp"]
    assert 0.99 * 2.0 < default["epsilon"] <= 2.0 * (1 + 1e-9)
    assert default["params"]["epsilon_per_token"] == pytest.approx(calibrate_per_token(2.0, 1e-5, 16), rel=1e-12)
    cfg = mozo.configure(_req(SAMPLE.exemplars))
    assert (cfg.experts, cfg.weight_experts, cfg.group_size) == (60, 60, 4)


@pytest.mark.parametrize("n, experts", [(160, 40), (239, 59), (480, 60)])
def test_default_expert_count_follows_n_under_replace_one(n, experts):
    ex = (list(SAMPLE.exemplars) * 2)[:n]
    cfg = mozo.configure(_req(ex))
    assert (cfg.experts, cfg.weight_experts, cfg.group_size, cfg.lambda_mode, cfg.tokens) == (
        experts, experts, 4, "per_expert", 16)


def test_short_answers_keep_every_step_private():
    cost = get_generation_mechanism("mozo").cost(_req(SAMPLE.exemplars, max_tokens=8))
    assert cost["params"]["private_tokens"] == 8 and cost["params"]["public_continuation"] is None


def test_too_small_a_dataset_is_refused_naming_the_field_and_what_to_change():
    with pytest.raises(MechanismParamError) as e:
        get_generation_mechanism("mozo").cost(_req(SAMPLE.exemplars[:12]))
    assert e.value.param == "params.experts"
    msg = e.value.message
    need = math.ceil(gen_defaults.MIN_MARGIN / (calibrate_per_token(2.0, 1e-5, 16) / 2))
    assert "12 exemplars" in msg and "3 experts x 4" in msg
    assert f"at least {4 * need} at this budget" in msg and "raise epsilon" in msg and "params.experts" in msg
    assert need == 39  # 156 exemplars at eps 2 over 16 private tokens
    for text in SAMPLE.exemplars[0]:  # no exemplar text in the error
        assert text not in msg
    # the smallest set the message asks for is served, one fewer is not
    get_generation_mechanism("mozo").cost(_req(SAMPLE.exemplars[:156]))
    with pytest.raises(MechanismParamError):
        get_generation_mechanism("mozo").cost(_req(SAMPLE.exemplars[:155]))


def test_a_budget_too_small_for_any_size_says_raise_epsilon():
    # eps 1 over 16 tokens: 60 four-shot experts have a margin of 3.7 nats (measured at the zero-shot level)
    with pytest.raises(MechanismParamError) as e:
        get_generation_mechanism("mozo").cost(_req(SAMPLE.exemplars, epsilon=1.0))
    assert e.value.param == "params.experts" and "raise epsilon" in e.value.message
    assert "add exemplars" not in e.value.message  # no n helps: the count is capped at 60
    # fewer private tokens (a larger eps_tok) or explicit parameters run
    assert get_generation_mechanism("mozo").cost(_req(SAMPLE.exemplars, {"private_tokens": 4}, epsilon=1.0))
    assert get_generation_mechanism("mozo").cost(_req(SAMPLE.exemplars, {"experts": 60, "group_size": 4},
                                                      epsilon=1.0))


@pytest.mark.parametrize("given, expect", [
    ({"experts": 8}, {"experts": 8, "group_size": 1, "lambda_mode": "per_expert", "private_tokens": 16}),
    ({"experts": 80, "group_size": 3}, {"experts": 80, "group_size": 3, "lambda_mode": "per_expert",
                                        "private_tokens": 16}),
    ({"group_size": 2}, {"experts": 60, "group_size": 2, "lambda_mode": "per_expert", "private_tokens": 16}),
    ({"lambda_mode": "public", "private_tokens": 32},
     {"experts": 60, "group_size": 4, "lambda_mode": "public", "private_tokens": 32}),
])
def test_given_parameters_are_never_overridden(given, expect):
    assert _used(get_generation_mechanism("mozo").cost(_req(SAMPLE.exemplars, given))) == expect
    # ... and a given count is not refused for its margin (the caller chose it)
    assert _used(get_generation_mechanism("mozo").cost(_req(SAMPLE.exemplars[:12], {"experts": 3})))["experts"] == 3


def test_add_remove_default_is_a_constant_count_refused_below_it():
    mech = get_generation_mechanism("mozo")
    assert _used(mech.cost(_req(SAMPLE.exemplars, adjacency="add-remove"))) == MEASURED
    for n in (239, 200):
        with pytest.raises(MechanismParamError) as e:
            mech.cost(_req(SAMPLE.exemplars[:n], adjacency="add-remove"))
        assert e.value.param == "params.experts" and "add-remove" in e.value.message
    # the margin refusal under add-remove does not depend on the (private) n
    msgs = set()
    for n in (100, 240):
        with pytest.raises(MechanismParamError) as e:
            mech.cost(_req(SAMPLE.exemplars[:n], adjacency="add-remove", epsilon=1.0))
        msgs.add(e.value.message)
    assert len(msgs) == 1


def test_subsample_keeps_its_one_shot_default_count():
    cfg = mozo.configure(_req(SAMPLE.exemplars, {"subsample": True}))
    assert (cfg.experts, cfg.group_size, cfg.lambda_mode, cfg.tokens) == (32, 1, "per_expert", 16)
