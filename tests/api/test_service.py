"""The service over real HTTP, on SQLite and PostgreSQL."""

import httpx


def _assert_envelope(r: httpx.Response, status: int):
    assert r.status_code == status, r.text
    body = r.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def test_health_reports_database_and_models(live_server, database_url):
    r = httpx.get(f"{live_server}/v1/health")
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ok" and body["ready"] is True
    assert body["database"]["ok"] is True
    assert body["database"]["dialect"] == ("sqlite" if database_url.startswith("sqlite") else "postgresql")
    assert body["database"]["revision"] == body["database"]["head"]
    assert set(body["models"]["loaded"]) == {"smollm2-135m-instruct", "all-minilm-l6-v2"}
    assert body["version"]


def test_models_lists_capabilities(live_server):
    r = httpx.get(f"{live_server}/v1/models")
    assert r.status_code == 200
    body = r.json()
    assert body["object"] == "list"
    by_id = {m["id"]: m for m in body["data"]}
    lm = by_id["smollm2-135m-instruct"]
    assert lm["object"] == "model" and lm["kind"] == "lm" and lm["default"] is True
    assert lm["capabilities"]["full_vocab_logprobs"] is True
    assert lm["capabilities"]["vocab_size"] == 49152
    emb = by_id["all-minilm-l6-v2"]
    assert emb["kind"] == "embedder" and emb["capabilities"]["embedding_dim"] == 384
    one = httpx.get(f"{live_server}/v1/models/all-minilm-l6-v2")
    assert one.status_code == 200 and one.json()["id"] == "all-minilm-l6-v2"


def test_unknown_route_and_model_are_404_envelopes(live_server):
    err = _assert_envelope(httpx.get(f"{live_server}/v1/nope"), 404)
    assert err["type"] == "not_found_error"
    err = _assert_envelope(httpx.get(f"{live_server}/v1/models/not-a-model"), 404)
    assert err["param"] == "model_id" and err["code"] == "model_not_found"


def test_wrong_method_is_405_envelope(live_server):
    _assert_envelope(httpx.delete(f"{live_server}/v1/health"), 405)


def test_bad_json_is_422_envelope(live_server):
    r = httpx.post(
        f"{live_server}/v1/privacy/convert", content=b"{not json", headers={"content-type": "application/json"}
    )
    _assert_envelope(r, 422)


def test_api_docs_are_served_offline_and_root_leads_to_the_dashboard(live_server):
    """/docs and /redoc reference only this server's assets (no CDN: the service runs without internet);
    the assets are there; / redirects to /ui. The browser suite renders both pages with the network cut."""
    for page, asset in (("/docs", "swagger-ui-bundle.js"), ("/redoc", "redoc.standalone.js")):
        r = httpx.get(f"{live_server}{page}", timeout=30)
        assert r.status_code == 200 and "text/html" in r.headers["content-type"]
        assert "cdn" not in r.text and "https://" not in r.text.replace("https://fastapi.tiangolo.com", ""), r.text
        assert f"/apidocs-static/{asset}" in r.text
        js = httpx.get(f"{live_server}/apidocs-static/{asset}", timeout=30)
        assert js.status_code == 200 and len(js.content) > 100_000
    root = httpx.get(f"{live_server}/", timeout=30)
    assert root.status_code == 307 and root.headers["location"] == "/ui"
