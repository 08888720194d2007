"""Integers past float64 in the privacy math: a 422 (or PrivacyInputError) naming the field, never a 500.

JSON integers have no size limit and pydantic parses them into Python ints of any length, so before this
check ``{"tp": 10**400, ...}`` on ``POST /v1/privacy/empirical`` reached ``float(10**400)`` inside the
Clopper-Pearson bound: OverflowError, a 500 (also ``compositions`` / ``batch_size`` on calibrate and
``count`` on convert, the same fields in an ``epsilon`` audit job, which then failed as an internal error,
and the CLI, which printed a traceback). Counts between 2**60 and float64's limit gave a wrong refusal
instead ("accuracy: must be a finite number, got nan" for ``trials=2**63`` with ``accuracy=0.9``).

The bound is 2**53 - 1 (integers stay exact in float64, and JSON-safe: the seeds' bound too).
Real server (uvicorn, no model), SQLite and PostgreSQL."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from app.cli.privacy import privacy_app
from app.privacy import service
from app.privacy.errors import PrivacyInputError

HUGE = 10**400  # past float64 (about 1.8e308)
MAX_COUNT = 2**53 - 1  # app.privacy._validate.MAX_COUNT (test_bound_is_the_librarys checks)
JUST_OVER = 2**53  # the first integer the bound refuses

CAL_TEMP = {"mechanism": "clip-softmax", "solve_for": "temperature", "target_epsilon": 1.0, "delta": 1e-5,
            "clip": 1.0, "batch_size": 4, "compositions": 10}
CAL_BATCH = {"mechanism": "clip-softmax", "solve_for": "batch_size", "target_epsilon": 1.0, "delta": 1e-5,
             "clip": 1.0, "temperature": 1.0, "compositions": 10}
COUNTS = {"tp": 5, "fn": 5, "fp": 5, "tn": 5}

# (operation, body, the field set to a huge integer)
CASES = [
    ("empirical", COUNTS, "tp"), ("empirical", COUNTS, "fn"), ("empirical", COUNTS, "fp"), ("empirical", COUNTS, "tn"),
    ("empirical", {"trials": 10, "correct": 5}, "trials"),
    ("empirical", {"trials": 10, "accuracy": 0.9}, "trials"),
    ("empirical", {**COUNTS, "trials": 20}, "trials"),
    ("calibrate", CAL_TEMP, "compositions"), ("calibrate", CAL_TEMP, "batch_size"),
    ("calibrate", CAL_BATCH, "compositions"),
    ("calibrate", {"mechanism": "gaussian", "solve_for": "sigma", "target_epsilon": 1.0, "delta": 1e-5},
     "compositions"),
    *[("convert", {src: val, "delta": 1e-5}, "count")
      for src, val in (("rho", 0.1), ("sigma", 1.0), ("pure_epsilon", 1.0), ("mu", 1.0))],
    ("convert", {"rdp": [0.1, 0.2], "orders": [2, 3], "delta": 1e-5}, "count"),
]
IDS = [f"{op}-{field}-{'+'.join(k for k in body if k not in ('delta', 'target_epsilon'))}"[:60]
       for op, body, field in CASES]


@pytest.fixture(scope="module")
def client(database_url):
    from tests.conftest import running_app, server_settings

    settings = server_settings(database_url, models=[], load_models=False, job_runner="none")
    with running_app(settings, models={}, timeout=30) as c:
        yield c


def _raw(client, path: str, body: dict):
    # json.dumps writes a Python int of any size as a JSON integer literal (400 digits here)
    return client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


@pytest.mark.parametrize("op, body, field", CASES, ids=IDS)
@pytest.mark.parametrize("value", [HUGE, JUST_OVER], ids=["1e400", "2^53"])
def test_http_refuses_with_422_naming_the_field(client, op, body, field, value):
    r = _raw(client, f"/v1/privacy/{op}", {**body, field: value})
    assert r.status_code == 422, (r.status_code, r.text[:300])  # before: 500 for 1e400
    err = r.json()["error"]
    assert err["param"] == field, err
    assert str(MAX_COUNT) in err["message"], err


@pytest.mark.parametrize("op, body, field", CASES, ids=IDS)
def test_http_accepts_the_bound(client, op, body, field):
    r = _raw(client, f"/v1/privacy/{op}", {**body, field: MAX_COUNT})
    if op == "empirical" and field in ("trials",) and "tp" in body:
        assert r.status_code == 422 and r.json()["error"]["param"] == "trials", r.text  # counts do not add up
        return
    if op == "empirical" and "correct" in body or (op == "calibrate" and field == "batch_size"):
        assert r.status_code in (200, 422), r.text
        if r.status_code == 422:
            assert r.json()["error"]["param"] in (field, "target_epsilon", "correct"), r.text
        return
    assert r.status_code == 200, r.text
    assert r.json()[field if field != "trials" else "trials"] == MAX_COUNT


@pytest.mark.parametrize("op, body, field", CASES, ids=IDS)
def test_epsilon_audit_job_refused_at_submission(client, op, body, field):
    r = _raw(client, "/v1/audits", {"kind": "epsilon", "config": {"operation": op, **body, field: HUGE}})
    assert r.status_code == 422, r.text  # before: 202, and the job failed with "internal error: OverflowError"
    assert r.json()["error"]["param"] == f"config.{field}", r.text


@pytest.mark.parametrize("op, body, field", CASES, ids=IDS)
def test_library_raises_privacy_input_error(op, body, field):
    fn = getattr(service, op)
    for value in (HUGE, JUST_OVER, float(JUST_OVER), 1e308):
        with pytest.raises(PrivacyInputError) as e:
            fn(**{**body, field: value})
        assert e.value.param == field, (value, e.value.param, e.value.message)


def test_accuracy_at_the_bound_is_answered():
    # before: trials=2**63 with accuracy 0.9 was refused as "accuracy: must be a finite number, got nan"
    out = service.empirical(trials=MAX_COUNT, accuracy=0.9)
    assert 2.19 < out["epsilon"] < 2.2


def test_cli_says_which_option():
    res = CliRunner().invoke(privacy_app, ["empirical", "--tp", str(HUGE), "--fn", "1", "--fp", "1", "--tn", "1"])
    assert res.exit_code != 0
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)  # before: OverflowError
    assert "tp" in res.output and str(MAX_COUNT) in res.output, res.output


def test_bound_is_the_librarys():
    from app.privacy import _validate

    assert _validate.MAX_COUNT == MAX_COUNT
