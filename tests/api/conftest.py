"""Fixtures shared by the API tests."""

from __future__ import annotations

import httpx
import pytest


@pytest.fixture(scope="module")
def json_body_routes(live_server):
    """(METHOD, path) of every operation whose request body is JSON, from the server's own OpenAPI
    document, path parameters filled with ids that do not exist."""
    doc = httpx.get(f"{live_server}/openapi.json", timeout=30).json()
    out = []
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            if "application/json" in op.get("requestBody", {}).get("content", {}):
                out.append((method.upper(), path.replace("{dataset_id}", "ds_nosuch").replace("{job_id}", "job_nosuch")
                            .replace("{name}", "nosuch")))
    assert len(out) >= 10, out
    return out
