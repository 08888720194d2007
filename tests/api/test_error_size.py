"""An error quotes the caller's own value at most so long (app.api.errors.error_body): a 1 MiB body cannot come
back as a 1 MiB error (a red-team run: a 60 KB mechanism name was echoed whole). Real server, both databases."""

from __future__ import annotations

import httpx

from app.api.errors import MAX_MESSAGE_CHARS, MAX_PARAM_CHARS, error_body
from tests.answers.test_gateway_api import T


def test_a_long_value_is_quoted_clipped(live_server):
    # a free-form object's unknown key is named in the error: a 60,000-character one was echoed whole
    r = httpx.post(f"{live_server}/v1/datasets", timeout=T, json={
        "name": "n", "labels": ["a", "b"], "exemplars": [{"input": "i", "output": "a"}], "template": {"x" * 60_000: 1}})
    assert r.status_code == 422, r.text[:300]
    err = r.json()["error"]
    assert err["param"].startswith("template.x") and len(err["param"]) <= MAX_PARAM_CHARS + 40
    assert len(err["message"]) <= MAX_MESSAGE_CHARS + 40 and "more characters" in err["message"]
    assert len(r.content) < 4 * MAX_MESSAGE_CHARS  # was 120 KB


def test_a_long_field_name_is_clipped_in_param(live_server):
    r = httpx.post(f"{live_server}/v1/privacy/calibrate", timeout=T, json={"k" * 50_000: 1})
    assert r.status_code == 422, r.text[:300]
    err = r.json()["error"]
    assert len(err["message"]) <= MAX_MESSAGE_CHARS + 40
    assert err["param"] is None or len(err["param"]) <= MAX_PARAM_CHARS + 40
    assert len(r.content) < 4 * MAX_MESSAGE_CHARS


def test_short_errors_are_unchanged():
    assert error_body("epsilon: must be > 0", "invalid_request_error", "epsilon", "invalid_value") == {
        "error": {"message": "epsilon: must be > 0", "type": "invalid_request_error", "param": "epsilon",
                  "code": "invalid_value"}}
    long = error_body("x" * (MAX_MESSAGE_CHARS + 5), "t", "p" * (MAX_PARAM_CHARS + 1))["error"]
    assert long["message"] == "x" * MAX_MESSAGE_CHARS + "... (5 more characters)"
    assert long["param"] == "p" * MAX_PARAM_CHARS + "... (1 more characters)"
