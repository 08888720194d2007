"""The privacy requests' JSON Schemas (the oneOf variants of app/privacy/schemas.py, which the OpenAPI
document serves) say which field combinations the service accepts: for each body below the schema's
verdict and the service's agree (issue 29, item 8). Bodies that break a rule JSON Schema cannot state
(an RDP curve longer than its orders, counts that do not add up) are listed apart: schema-valid, refused
by the service with a 422 naming the field."""

from __future__ import annotations

import jsonschema_rs  # schemathesis' validator (the [test] extra pins schemathesis)
import pytest

from app.privacy import service
from app.privacy.errors import PrivacyInputError
from app.privacy.schemas import CalibrateRequest, ConvertRequest, EmpiricalRequest, check_variants

OPS = {"calibrate": (CalibrateRequest, service.calibrate), "convert": (ConvertRequest, service.convert),
       "empirical": (EmpiricalRequest, service.empirical)}
G = {"mechanism": "gaussian", "solve_for": "sigma", "target_epsilon": 1.0, "delta": 1e-5}
C = {"mechanism": "clip-softmax", "target_epsilon": 1.0, "delta": 1e-5, "compositions": 10}

CASES = [
    ("calibrate", G, True),
    ("calibrate", {**G, "method": "rdp", "orders": "2-64"}, True),
    ("calibrate", {**G, "orders": "2-64"}, False),  # orders only with method rdp
    ("calibrate", {**G, "solve_for": "clip"}, False),  # the finding
    ("calibrate", {**G, "clip": 1.0}, False),
    ("calibrate", {**G, "target_epsilon": 1e-13}, False),  # below MIN_EPSILON
    ("calibrate", {**C, "solve_for": "temperature", "clip": 1.0, "batch_size": 4}, True),
    ("calibrate", {**C, "solve_for": "batch-size", "clip": 1.0, "temperature": 2.0}, True),
    ("calibrate", {**C, "solve_for": "clip", "temperature": 2.0}, False),  # batch_size missing
    ("calibrate", {**C, "solve_for": "sigma", "clip": 1.0, "temperature": 2.0}, False),
    ("calibrate", {**C, "solve_for": "clip", "temperature": 2.0, "batch_size": 4, "compositions": None}, False),
    ("calibrate", {**C, "solve_for": "clip", "temperature": 2.0, "batch_size": 4, "method": "rdp"}, False),
    ("convert", {"rho": 0.5, "delta": 1e-5}, True),
    ("convert", {"rho": 0.5, "epsilon": 1.0, "to": "delta"}, True),
    ("convert", {"sigma": 2.0, "sensitivity": 1.0, "delta": 1e-5, "to_adjacency": "replace-one"}, True),
    ("convert", {"rdp": [0.5, 1.0], "orders": [2, 3], "delta": 1e-5}, True),
    ("convert", {"epsilon": 1.0, "delta": 1e-5, "to": "mu"}, True),
    ("convert", {"epsilon": 1.0, "delta": 1e-5, "to": "rho", "adjacency": "bounded", "to_adjacency": "replace-one"}, True),
    ("convert", {"rho": 0.5, "mu": 1.0, "delta": 1e-5}, False),  # the finding: two sources
    ("convert", {"rho": 0.5, "delta": 1e-5, "epsilon": 1.0}, False),
    ("convert", {"rho": 0.5}, False),
    ("convert", {"rho": 0.5, "delta": 1e-5, "to": "delta"}, False),
    ("convert", {"rho": 0.5, "delta": 1e-5, "sensitivity": 2.0}, False),
    ("convert", {"rdp": [0.5], "delta": 1e-5}, False),  # no orders
    ("convert", {"rdp": [0.5], "orders": [2], "delta": 1e-5, "to_adjacency": "replace-one"}, False),
    ("convert", {"epsilon": 1.0, "delta": 1e-5}, False),  # no source, no to
    ("convert", {"epsilon": 1.0, "delta": 1e-5, "to": "mu", "count": 2}, False),
    ("convert", {"epsilon": 0.0, "delta": 1e-5, "to": "mu"}, False),
    ("convert", {"epsilon": 1.0, "delta": 1e-5, "to": "mu", "orders": [0.5]}, False),
    ("convert", {"rho": 0.5, "delta": 1e-5, "orders": []}, False),
    ("empirical", {"tp": 9, "fn": 1, "fp": 2, "tn": 8}, True),
    ("empirical", {"tp": 9, "fn": 1, "fp": 2, "tn": 8, "trials": 20}, True),
    ("empirical", {"accuracy": 0.9, "trials": 100}, True),
    ("empirical", {"correct": 90, "trials": 100}, True),
    ("empirical", {"tp": 9, "fn": 1, "fp": 2, "tn": 8, "accuracy": 0.9}, False),  # the finding
    ("empirical", {"tp": 9, "fn": 1, "fp": 2}, False),
    ("empirical", {"accuracy": 0.9}, False),
    ("empirical", {"accuracy": 0.9, "correct": 90, "trials": 100}, False),
    ("empirical", {}, False),
]
# Schema-valid, refused: what JSON Schema cannot state (the 422 names the field).
BEYOND = [
    ("convert", {"rdp": [0.5, 1.0], "orders": [2], "delta": 1e-5}, "rdp"),
    ("convert", {"rho": 0.5, "delta": 1e-5, "orders": "9-2"}, "orders"),
    ("empirical", {"tp": 9, "fn": 1, "fp": 2, "tn": 8, "trials": 21}, "trials"),
    ("empirical", {"correct": 101, "trials": 100}, "correct"),
]


def _schema_valid(op: str, body: dict) -> bool:
    return jsonschema_rs.Draft202012Validator(OPS[op][0].model_json_schema()).is_valid(body)


def _accepted(op: str, body: dict) -> tuple[bool, str | None]:
    model, fn = OPS[op]
    try:
        parsed = model.model_validate(body)
    except ValueError:
        return False, None
    try:
        fn(**parsed.model_dump())
    except PrivacyInputError as exc:
        return False, exc.param
    return True, None


@pytest.mark.parametrize("op, body, valid", CASES, ids=[f"{o}-{i}" for i, (o, _, _) in enumerate(CASES)])
def test_schema_and_service_agree(op, body, valid):
    assert _schema_valid(op, body) is valid
    assert _accepted(op, body)[0] is valid
    # check_variants (the epsilon job kind's check at submission) says the same without the math.
    try:
        parsed = OPS[op][0].model_validate(body)
    except ValueError:
        assert not valid
        return
    try:
        check_variants(parsed)
    except PrivacyInputError:
        assert not valid
    else:
        assert valid


@pytest.mark.parametrize("op, body, param", BEYOND, ids=[f"{o}-{p}" for o, _, p in BEYOND])
def test_rules_beyond_json_schema_are_422s_naming_the_field(op, body, param):
    assert _schema_valid(op, body)
    assert _accepted(op, body) == (False, param)
