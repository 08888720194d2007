"""The OpenAPI document, made to say what the server does (issue 15).

FastAPI's generated schema lists a 422 with its own ``HTTPValidationError`` shape and
nothing else. Every error here is the OpenAI envelope (``app.api.errors``), and the
routes answer 400/401/403/404/409/413/415/429/502/503/504 as well. This module
post-processes the generated document:

* every operation declares the error statuses it can answer, each with the
  ``ErrorEnvelope`` schema (the table below says which, and why);
* ``POST /v1/datasets`` (read from the raw request to accept JSON or JSONL) gets
  its request body;
* the private-answer bodies get a discriminated union on ``mechanism`` (one
  variant per mechanism this server serves, listing that mechanism's parameters),
  and ``POST /v1/audits`` one on ``kind`` (each kind's config schema). The union
  only describes; the pydantic models that validate requests are unchanged.

Success bodies come from the routes' ``response_model`` (app/api/schemas.py); a status a
route declares itself with ``responses=`` (the health body on a 503) keeps its schema.
app/api/openapi_contract.py adds the bearer security of each operation and the "no NUL in any
request string" rule; a server that refuses noise seeds says ``seed`` is null. The document
depends on the effective auth mode (a key is optional while open, required once keyed), so one
is built and cached per mode.

A schema-fuzzing test (tests/contract/test_schemathesis.py) runs schemathesis
against a live server to keep the document and the behaviour together.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

ERROR_ENVELOPE = {
    "title": "ErrorEnvelope",
    "description": "OpenAI's error envelope; `param` names the offending field where there is one.",
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["message", "type", "param", "code"],
            "properties": {
                "message": {"type": "string"},
                "type": {"type": "string", "description": "invalid_request_error, not_found_error, ..."},
                "param": {"anyOf": [{"type": "string"}, {"type": "null"}],
                          "description": "the field at fault, as a dotted path (`exemplars.5.output`)"},
                "code": {"anyOf": [{"type": "string"}, {"type": "null"}],
                         "description": "machine-readable cause (`budget_exhausted`, `dataset_not_found`...)"},
            },
        }
    },
}

DESCRIPTIONS = {
    "400": "Not a valid HTTP request (answered by the HTTP parser: a NUL in a header, a malformed request line)",
    "401": "Missing, invalid or revoked API key (keyed mode)",
    "403": "The API key lacks the scope this operation needs",
    "404": "No such resource for this tenant (dataset, model, job, artifact), or a body that names one",
    "409": "Conflict: an Idempotency-Key reused with a different request, or a finished job",
    "413": "The body is larger than the server accepts",
    "415": "Unsupported Content-Type",
    "422": "Invalid input; `error.param` names the field (`body` for a body that is not JSON)",
    "429": "The dataset's privacy budget cannot pay for this (code budget_exhausted), or the tenant's job "
           "queue is full (code queue_full, with Retry-After)",
    "502": "The model server behind a remote backend failed",
    "503": "Not ready: the database or a model is not available; the model queue is full or its deadline "
           "passed (answers, with Retry-After); the audit planner is busy (code planner_busy, with "
           "Retry-After); or, on any operation, the server shut down before the request finished (code "
           "shutting_down) or the database did not answer (code database_unavailable), both with Retry-After",
    "504": "The model server behind a remote backend timed out",
}

_PRIVATE = ("400", "401", "403", "404", "409", "422", "429", "502", "504")
# Statuses each operation can answer beyond its success status (422 wherever there is input,
# 401/403 wherever a key is checked). Operations not listed: 401, 403, 422.
STATUSES: dict[tuple[str, str], tuple[str, ...]] = {
    ("get", "/v1/health"): ("503",),
    ("get", "/v1/models"): (),
    ("get", "/v1/models/{model_id}"): ("404",),
    ("post", "/v1/privacy/calibrate"): ("400", "401", "403", "422"),
    ("post", "/v1/privacy/convert"): ("400", "401", "403", "422"),
    ("post", "/v1/privacy/empirical"): ("400", "401", "403", "422"),
    ("post", "/v1/datasets"): ("400", "401", "403", "413", "415", "422"),
    ("get", "/v1/datasets"): ("401", "403", "422"),
    ("get", "/v1/datasets/{dataset_id}"): ("401", "403", "404", "422"),
    ("delete", "/v1/datasets/{dataset_id}"): ("401", "403", "404", "422"),
    ("get", "/v1/datasets/{dataset_id}/budget"): ("401", "403", "404", "422"),
    ("put", "/v1/datasets/{dataset_id}/budget"): ("400", "401", "403", "404", "422"),
    ("get", "/v1/datasets/{dataset_id}/ledger"): ("401", "403", "404", "422"),
    ("patch", "/v1/datasets/{dataset_id}"): ("400", "401", "403", "404", "422"),
    ("get", "/v1/datasets/{dataset_id}/budget/forecast"): ("401", "403", "404", "422"),
    ("get", "/v1/samples"): ("401", "403"),
    ("post", "/v1/samples/{name}/load"): ("400", "401", "403", "404", "413", "415", "422"),
    ("post", "/v1/private/classify"): _PRIVATE,
    ("post", "/v1/private/generate"): _PRIVATE,
    ("post", "/v1/chat/completions"): _PRIVATE,
    ("get", "/v1/private/mechanisms"): ("401", "403"),
    ("get", "/v1/private/generate/mechanisms"): ("401", "403"),
    # 404: a config that names a dataset of the caller's tenant which does not exist (synthesize).
    ("post", "/v1/audits"): ("400", "401", "403", "404", "409", "422", "429", "503"),
    ("get", "/v1/audits"): ("401", "403", "404", "422"),
    ("post", "/v1/audits/plan"): ("400", "401", "403", "422", "503"),
    ("get", "/v1/audits/kinds"): ("401", "403"),
    ("get", "/v1/audits/{job_id}"): ("401", "403", "404", "422"),
    ("post", "/v1/audits/{job_id}/cancel"): ("401", "403", "404", "409", "422"),
    ("get", "/v1/audits/{job_id}/artifacts"): ("401", "403", "404", "422"),
    ("get", "/v1/audits/{job_id}/artifacts/{name}"): ("401", "403", "404", "422"),
}
DEFAULT_STATUSES = ("401", "403", "422")
# Success statuses beside the route's own: description and response schema (a component from
# app/api/schemas.py).
EXTRA_SUCCESS: dict[tuple[str, str], dict[str, tuple[str, str]]] = {
    ("post", "/v1/audits"): {"200": ("Idempotent replay: the job an earlier submission with this Idempotency-Key "
                                     "and the same body created (header Idempotent-Replayed: true)", "AuditJob")},
}


def _error_response(code: str) -> dict[str, Any]:
    return {"description": DESCRIPTIONS.get(code, "Error"),
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/ErrorEnvelope"}}}}


def _declare_errors(doc: dict[str, Any]) -> None:
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    schemas["ErrorEnvelope"] = ERROR_ENVELOPE
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            responses = op.setdefault("responses", {})
            responses.pop("422", None)
            # An operation not listed above: a path with an id can also answer 404.
            default = DEFAULT_STATUSES + (("404",) if "{" in path else ())
            # Any body can be too large (app/api/body_limit.py); any path or query parameter can hold
            # a NUL (app/api/input_guard.py).
            # Any request still in flight when a shutdown's graceful timeout runs out is a 503
            # (app/api/shutdown.py); so is any request the database fails (app/api/errors.py).
            extra = (("413",) if "requestBody" in op else ()) + (
                ("422",) if any(p.get("in") in ("path", "query") for p in op.get("parameters", [])) else ()) + ("503",)
            for code in STATUSES.get((method, path), default) + extra:
                # A status the route declares itself (``responses=``: the health body on a 503)
                # keeps its own schema.
                if code not in responses:
                    responses[code] = _error_response(code)
            for code, (desc, schema) in EXTRA_SUCCESS.get((method, path), {}).items():
                ref = {"$ref": f"#/components/schemas/{schema}"}
                responses[code] = {"description": desc, "content": {"application/json": {"schema": ref}}}


# ---------------------------------------------------------------------------
# Request bodies FastAPI cannot see
# ---------------------------------------------------------------------------


def _dataset_body(doc: dict[str, Any]) -> None:
    from app.api.dataset_schemas import DatasetCreate

    op = doc["paths"].get("/v1/datasets", {}).get("post")
    if op is None:
        return
    schema = DatasetCreate.model_json_schema(ref_template="#/components/schemas/{model}")
    defs = schema.pop("$defs", {})
    comps = doc["components"]["schemas"]
    comps.update(defs)
    comps["DatasetCreate"] = schema
    op["requestBody"] = {
        "required": True,
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/DatasetCreate"}},
            "application/x-ndjson": {
                "schema": {"type": "string"},
                "description": "JSONL: line 1 the metadata (DatasetCreate without `exemplars`), then one "
                               "exemplar object per line",
            },
        },
    }


# ---------------------------------------------------------------------------
# Discriminated unions
# ---------------------------------------------------------------------------

_CLASSIFY_COMMON = ("epsilon", "delta", "partitions", "shots_per_partition", "adjacency", "calibrate")


def _field_schema(f: dataclasses.Field) -> dict[str, Any]:
    t = f.type if isinstance(f.type, str) else getattr(f.type, "__name__", str(f.type))
    base: dict[str, Any]
    if "bool" in t:
        base = {"type": "boolean"}
    elif "int" in t:
        base = {"type": "integer"}
    elif "float" in t:
        base = {"type": "number"}
    elif "str" in t:
        base = {"type": "string"}
    else:
        base = {}
    if "None" in t and base:
        base = {"anyOf": [base, {"type": "null"}]}
    default = f.default if f.default is not dataclasses.MISSING else None
    if default is not None:
        base["default"] = default
    return base


def _union(comps: dict[str, Any], name: str, default: str, variants: dict[str, dict[str, Any]],
           rule: str) -> None:
    """Replace component ``name`` by a ``oneOf`` discriminated on ``mechanism``; each variant is
    the base object with ``mechanism`` fixed, the top-level fields the mechanism does not take
    set to null (absent), and ``params`` limited to the mechanism's own parameters."""
    base = comps[name]
    refs, mapping = [], {}
    for mech, spec in variants.items():
        v = copy.deepcopy(base)
        v["title"] = f"{name}_{mech}"
        v.pop("description", None)
        props = v["properties"]
        props["mechanism"] = {"type": "string", "const": mech, "enum": [mech]}
        if mech != default:
            v["required"] = sorted(set(v.get("required", [])) | {"mechanism"})
        for field in spec["null_fields"]:
            if field in props:
                props[field] = {"type": "null", "description": f"{mech} does not take {field}"}
        props["params"] = {"type": "object", "properties": spec["params"], "additionalProperties": False,
                           "description": f"{mech}'s parameters"}
        comps[v["title"]] = v
        refs.append({"$ref": f"#/components/schemas/{v['title']}"})
        mapping[mech] = f"#/components/schemas/{v['title']}"
    comps[name] = {
        "title": name,
        "description": rule,
        "oneOf": refs,
        # No OpenAPI ``discriminator`` object: ``mechanism`` may be left out (it defaults), which
        # the discriminator keyword does not allow; each variant's ``const`` discriminates.
        "x-discriminator": {"propertyName": "mechanism", "default": default, "mapping": mapping},
    }


def _classify_union(doc: dict[str, Any], settings) -> None:
    """``ClassifyRequest``: one variant per served mechanism, each with its own parameters."""
    from app.mechanisms import get_mechanism, mechanism_names

    comps = doc["components"]["schemas"]
    if "ClassifyRequest" not in comps:
        return
    variants = {}
    for name in mechanism_names():
        mech = get_mechanism(name)
        if not (mech.is_private or name == "zero_shot" or settings.allow_nonprivate_baselines):
            continue  # the non-private baselines: 422 unless DPICL_ALLOW_NONPRIVATE_BASELINES
        fields = {f.name: f for f in dataclasses.fields(mech.params_type)}
        variants[name] = {"null_fields": [k for k in _CLASSIFY_COMMON if k not in fields],
                          "params": {k: _field_schema(f) for k, f in fields.items()}}
    _union(comps, "ClassifyRequest", "rnm", variants, CLASSIFY_RULE)


CLASSIFY_RULE = (
    "One rule for parameters: the shared ones (epsilon, delta, partitions, shots_per_partition, "
    "adjacency, calibrate) may be given at the top level or in `params`; every other parameter of "
    "the mechanism goes in `params`. A mechanism refuses a parameter it does not take (422 naming "
    "it): each variant below lists what its mechanism takes.")
GENERATE_RULE = (
    "epsilon, delta and adjacency at the top level (private mechanisms only); every other parameter "
    "of the mechanism in `params` (each variant lists them; GET /v1/private/generate/mechanisms).")


def _generate_union(doc: dict[str, Any], settings) -> None:
    from app.mechanisms.generation import GENERATION_MECHANISMS

    comps = doc["components"]["schemas"]
    if "GenerateRequest" not in comps:
        return
    extra = comps["GenerateRequest"].get("oneOf")  # query xor instruction: kept on every variant
    variants = {}
    for m in GENERATION_MECHANISMS.values():
        if m.name == "full_context" and not settings.allow_nonprivate_baselines:
            continue
        variants[m.name] = {"null_fields": [] if m.is_private else ["epsilon", "delta"],
                            "params": {k: {} for k in m.params}}
    base = comps["GenerateRequest"]
    base.pop("oneOf", None)
    _union(comps, "GenerateRequest", "esa", variants, GENERATE_RULE)
    if extra:
        for name in variants:
            comps[f"GenerateRequest_{name}"]["oneOf"] = copy.deepcopy(extra)


def _audit_union(doc: dict[str, Any], settings) -> None:
    """``POST /v1/audits``: ``kind`` is one of the served kinds; each kind's config schema is a
    component (``AuditConfig_<kind>``), and the body a ``oneOf`` discriminated on ``kind``."""
    from app.jobs import registry

    comps = doc["components"]["schemas"]
    base = comps.get("AuditCreate")
    if base is None:
        return
    kinds = registry.available_kinds(settings)
    if not settings.webhook_secret:
        # Refused (422) without a signing secret: this server does not take the field.
        base["properties"].pop("webhook_url", None)
    plan = comps.get("AuditPlanRequest")
    if plan is not None and "canary_mia" in kinds:
        plan["properties"]["config"] = {"$ref": "#/components/schemas/AuditConfig_canary_mia"}
    variants = []
    for name, kind in kinds.items():
        schema = kind.config_model.model_json_schema(ref_template="#/components/schemas/{model}")
        for k, v in schema.pop("$defs", {}).items():
            comps.setdefault(k, v)
        comps[f"AuditConfig_{name}"] = schema
        v = copy.deepcopy(base)
        v["title"] = f"AuditCreate_{name}"
        v["properties"]["kind"] = {"type": "string", "const": name, "enum": [name]}
        v["properties"]["config"] = {"$ref": f"#/components/schemas/AuditConfig_{name}"}
        v["required"] = sorted(set(v.get("required", [])) | {"kind"})
        comps[f"AuditCreate_{name}"] = v
        variants.append(name)
    comps["AuditCreate"] = {
        "title": "AuditCreate",
        "oneOf": [{"$ref": f"#/components/schemas/AuditCreate_{n}"} for n in variants],
        "discriminator": {"propertyName": "kind",
                          "mapping": {n: f"#/components/schemas/AuditCreate_{n}" for n in variants}},
    }


def _noise_seeds(doc: dict[str, Any], settings) -> None:
    """A server without DPICL_ALLOW_SEEDED_NOISE refuses a noise seed (422 naming ``seed``): its document
    says the field is to be left out (null), as it leaves out ``webhook_url`` without a signing secret."""
    if settings.allow_seeded_noise:
        return
    for comp in doc["components"]["schemas"].values():
        seed = comp.get("properties", {}).get("seed")
        if isinstance(seed, dict) and "DPICL_ALLOW_SEEDED_NOISE" in seed.get("description", ""):
            comp["properties"]["seed"] = {
                "type": "null", "description": "noise seeds are refused here (DPICL_ALLOW_SEEDED_NOISE is off)"}


def _document(app: FastAPI, settings, keyed: bool) -> dict[str, Any]:
    from app.api.openapi_contract import declare_security, forbid_nul

    doc = get_openapi(title=app.title, version=app.version, description=app.description, routes=app.routes)
    doc.setdefault("components", {}).setdefault("schemas", {})
    _declare_errors(doc)
    _dataset_body(doc)
    _classify_union(doc, settings)
    _generate_union(doc, settings)
    _audit_union(doc, settings)
    _noise_seeds(doc, settings)
    forbid_nul(doc)
    declare_security(doc, keyed)
    return doc


def _keyed(app: FastAPI, settings) -> bool:
    """Whether the server needs keys now (the document's ``security`` follows auth mode ``auto``
    from open to keyed when the first key is created)."""
    from app.api.principal import auth_mode, cached_auth_mode

    if settings.auth_mode != "auto":
        return settings.auth_mode == "required"
    rt = getattr(app.state, "runtime", None)
    if rt is None:
        return False
    mode = cached_auth_mode(rt)
    return (mode if mode is not None else auth_mode(rt)) == "keys"


def install_openapi(app: FastAPI, settings) -> None:
    docs: dict[bool, dict[str, Any]] = {}

    def custom_openapi() -> dict[str, Any]:
        keyed = _keyed(app, settings)
        if keyed not in docs:
            docs[keyed] = _document(app, settings, keyed)
        app.openapi_schema = docs[keyed]
        return docs[keyed]

    app.openapi = custom_openapi  # type: ignore[method-assign]
