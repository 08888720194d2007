"""The one mechanism protocol (app/mechanisms/protocol.py) over both families: typed costs equal the
library's own cost dicts, nothing private read means no event, and no guarantee means an infinite one."""

from __future__ import annotations

import math

import pytest

from app.mechanisms import get_mechanism
from app.mechanisms.errors import MechanismParamError
from app.mechanisms.generation import GenerationRequest, get_generation_mechanism
from app.mechanisms.protocol import Classification, Generation, mechanism_for
from app.privacy.accountant import PrivacyCost


def test_classification_cost_is_the_library_cost_typed():
    mech = mechanism_for("classification", "rnm")
    assert isinstance(mech, Classification) and mech.task == "classification" and mech.reads_exemplars
    parsed = mech.parse_params({"epsilon": 1.0, "partitions": 4, "adjacency": "replace-one"})
    event = mech.cost(parsed, n_exemplars=8)
    want = PrivacyCost.from_dict(get_mechanism("rnm").cost(parsed, n_exemplars=8))
    assert isinstance(event, PrivacyCost) and event == want and 0 < event.epsilon <= 1.0 + 1e-9


def test_generation_cost_depends_on_the_count_only():
    mech = mechanism_for("generation", "esa")
    assert isinstance(mech, Generation) and mech.task == "generation"
    parsed = mech.parse_params({"epsilon": 2.0, "max_tokens": 8, "partitions": 4})
    event = mech.cost(parsed, n_exemplars=8)
    req = GenerationRequest.build([("a real input", "a real output")] * 8, "a real query", epsilon=2.0, delta=1e-6,
                                  max_tokens=8, params={"partitions": 4})
    assert event == PrivacyCost.from_dict(get_generation_mechanism("esa").cost(req))
    assert mech.describe(parsed) == {"epsilon": 2.0, "delta": 1e-6, "adjacency": "replace-one", "max_tokens": 8,
                                     "partitions": 4}


@pytest.mark.parametrize("task", ["classification", "generation"])
def test_zero_shot_reads_nothing_and_has_no_event(task):
    mech = mechanism_for(task, "zero_shot")
    assert not mech.reads_exemplars and not mech.is_private
    assert mech.cost(mech.parse_params({}), n_exemplars=8) is None


def test_a_baseline_that_reads_exemplars_costs_infinity():
    mech = mechanism_for("generation", "full_context")
    event = mech.cost(mech.parse_params({}), n_exemplars=8)
    assert event is not None and math.isinf(event.epsilon)


def test_unknown_names_and_tasks_name_the_field():
    with pytest.raises(MechanismParamError) as e:
        mechanism_for("classification", "nope")
    assert e.value.param == "mechanism"
    with pytest.raises(MechanismParamError) as e:
        mechanism_for("translation", "rnm")
    assert e.value.param == "task"
