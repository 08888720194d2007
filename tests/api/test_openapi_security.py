"""The OpenAPI document says who needs a key (issue 29, item 8): a bearer security scheme, on every
route app/api/access.py guards, optional while the server runs open and required once it is keyed
(auto mode switches with the first key, and so does the document); public routes declare none."""

from __future__ import annotations

import time

from tests.conftest import running_app, server_settings

BEARER = [{"bearerAuth": []}]
OPTIONAL = [{"bearerAuth": []}, {}]


def _security(doc: dict) -> dict[tuple[str, str], list]:
    return {(m.upper(), p): op["security"] for p, ops in doc["paths"].items() for m, op in ops.items()}


def test_auto_mode_document_follows_the_first_key(fresh_database_url):
    from app.api.access import PUBLIC, ROUTES
    from app.api.principal import UNKEYED_RECHECK_SECONDS, create_key
    from app.runtime import Runtime

    settings = server_settings(fresh_database_url, load_models=False, job_runner="none")
    assert settings.auth_mode == "auto"
    with running_app(settings) as c:
        open_doc = c.get("/openapi.json").json()
        scheme = open_doc["components"]["securitySchemes"]["bearerAuth"]
        assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
        guarded = {(a.method, a.path) for a in ROUTES if a.who != PUBLIC}
        sec = _security(open_doc)
        assert {k for k, v in sec.items() if v == OPTIONAL} == guarded & sec.keys()
        assert all(v == [] for k, v in sec.items() if k not in guarded)
        assert "Keyed server: a key with `admin`." in open_doc["paths"]["/v1/datasets"]["post"]["description"]
        # The first key: the server is keyed for good, and the document says the key is required.
        rt2 = Runtime.create(settings, models={})
        with rt2.db.session() as s:
            key, _ = create_key(s, tenant_id="t", name="k", scopes=["admin"])
            s.commit()
        rt2.close()
        time.sleep(UNKEYED_RECHECK_SECONDS + 0.5)
        assert c.get("/v1/datasets").status_code == 401
        keyed_doc = c.get("/openapi.json").json()
        sec = _security(keyed_doc)
        assert {k for k, v in sec.items() if v == BEARER} == guarded & sec.keys()
        assert all(v == [] for k, v in sec.items() if k not in guarded)
        assert c.get("/v1/datasets", headers={"Authorization": f"Bearer {key}"}).status_code == 200
