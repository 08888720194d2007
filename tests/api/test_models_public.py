"""GET /v1/models is public (no key, also in keyed mode): a remote model's source URL is shown without the
credentials it may carry. Before: ``"source": "http://user:secret@host/v1?api_key=..."`` came back to any
caller. Real server with a remote model (the fake vLLM of tests/llm/remote), SQLite and PostgreSQL."""

from __future__ import annotations


from tests.conftest import running_app, server_settings


def test_models_show_no_credentials(database_url, embedder):
    from app.llm import ModelSpec, load_model
    from tests.llm.remote.fake_server import FakeVLLM

    with FakeVLLM() as fake:
        src = fake.url.replace("http://", "http://dpicl:s3cr3t-PASS@")  # httpx sends it as Basic auth
        spec = ModelSpec(name="toy-remote", kind="lm", source=src, backend="remote", options={"backoff": 0.01})
        toy = load_model(spec, cache_dir="/unused")
        try:
            with running_app(server_settings(database_url, job_runner="none"),
                             models={toy.name: toy, embedder.name: embedder}) as c:
                for path in ("/v1/models", "/v1/models/toy-remote"):
                    r = c.get(path)
                    assert r.status_code == 200, r.text[:300]
                    assert "s3cr3t" not in r.text, r.text[:500]  # before: the password
                assert c.get("/v1/models/toy-remote").json()["source"] == fake.url
                # an error naming the model (a prompt past its context) names it without the password too
                assert "s3cr3t" not in toy._label and fake.url in toy._label
        finally:
            toy.close()


def test_public_url():
    from app.llm.remote.transport import public_url

    assert public_url("bundled:smollm2-135m-instruct") == "bundled:smollm2-135m-instruct"
    assert public_url("/srv/models/m") == "/srv/models/m"
    assert public_url("https://u:p@vllm.internal:8000/v1?k=1#f") == "https://vllm.internal:8000/v1"
    assert public_url("http://[::1]:8001/v1") == "http://[::1]:8001/v1"
    assert public_url(None) is None
