"""Two rules of the whole API that the OpenAPI document states for every operation (issue 29, item 8).

* **Who needs a key.** ``components.securitySchemes.bearerAuth`` (``Authorization: Bearer <key>``)
  and, on every operation, the ``security`` that app/api/access.py's route table gives it: public
  routes ``[]``; the others need the key while the server is keyed (``[{"bearerAuth": []}]``), and
  take it optionally while it runs open (``[{"bearerAuth": []}, {}]``: OpenAPI's "no requirement"
  alternative), which is what the server does in each mode (app/api/principal.py). Each
  operation's description names the scopes of which the key needs one.
* **No NUL in any string.** Every string of a body, a path and a query is refused with a 422 when
  it holds U+0000 (app/badtext.py, app/api/input_guard.py: PostgreSQL cannot store it). Each string
  schema on the request side says so with a pattern, and a free-form value (``{}``, an object with
  ``additionalProperties: true``) is ``NulFreeJSON``: any JSON whose strings and keys hold no NUL.
  Without it a schema fuzzer rightly reports "schema-valid request rejected". (Lone surrogates are
  refused too; a UTF-8 JSON document cannot hold one, so a schema needs no word on them.)

Request and response components are disjoint here (FastAPI names them apart), so the request-side
patterns do not constrain a response.
"""

from __future__ import annotations

from typing import Any

BEARER = "bearerAuth"
NUL_FREE = "^[^\\x00]*$"
NUL_FREE_JSON = "NulFreeJSON"
_REF = f"#/components/schemas/{NUL_FREE_JSON}"
_STRUCTURE = {"type", "$ref", "anyOf", "oneOf", "allOf", "const", "enum", "not", "if", "properties"}


def declare_security(doc: dict[str, Any], keyed: bool) -> None:
    from app.api.access import PUBLIC, ROUTES, keyed_cell

    schemes = doc.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes[BEARER] = {
        "type": "http", "scheme": "bearer",
        "description": "An API key (`dpicl keys create`), sent as `Authorization: Bearer dpicl_...`. Needed "
                       "once the server is keyed (DPICL_AUTH_MODE=required, or auto after the first key); "
                       "optional while it runs open. docs/security.md, \"Who may call what\".",
    }
    table = {(m.strip(), a.path): a for a in ROUTES for m in a.method.split(",")}
    for path, ops in doc.get("paths", {}).items():
        for method, op in ops.items():
            row = table.get((method.upper(), path))
            if row is None or row.who == PUBLIC:
                op["security"] = []
                continue
            op["security"] = [{BEARER: []}] if keyed else [{BEARER: []}, {}]
            who = f"Keyed server: {keyed_cell(row)}" + (f" ({row.note})" if row.note else "") + "."
            op["description"] = f"{op['description']}\n\n{who}" if op.get("description") else who


def _nul_free(node: Any) -> Any:
    """The schema ``node`` with a NUL-free pattern on each string and NulFreeJSON for each free-form value."""
    if node is True or node == {}:
        return {"$ref": _REF}
    if isinstance(node, list):
        return [_nul_free(n) for n in node]
    if not isinstance(node, dict) or "$ref" in node:
        return node
    if not _STRUCTURE & node.keys():  # an Any field: a title or a description, no constraint
        return {**node, "allOf": [{"$ref": _REF}]}
    out = {k: _nul_free(v) if k in ("items", "additionalProperties", "anyOf", "oneOf", "allOf", "not",
                                     "contains", "if", "then", "else", "prefixItems") else v
           for k, v in node.items()}
    if "properties" in node:
        out["properties"] = {k: _nul_free(v) for k, v in node["properties"].items()}
    types = node.get("type")
    types = types if isinstance(types, list) else [types]
    if "string" in types and "const" not in node and "enum" not in node:
        if "pattern" in node:
            out["allOf"] = out.get("allOf", []) + [{"pattern": NUL_FREE}]
        else:
            out["pattern"] = NUL_FREE
    if "object" in types and "properties" not in node and out.get("additionalProperties", True) is not False:
        out.setdefault("propertyNames", {"pattern": NUL_FREE})
        if node.get("additionalProperties", True) is True:
            out["additionalProperties"] = {"$ref": _REF}
    elif node.get("additionalProperties") is True:
        out["additionalProperties"] = {"$ref": _REF}
        out.setdefault("propertyNames", {"pattern": NUL_FREE})
    return out


def _refs(node: Any, comps: dict[str, Any], seen: set[str]) -> None:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith("#/components/schemas/"):
            name = ref.rsplit("/", 1)[1]
            if name not in seen and name in comps:
                seen.add(name)
                _refs(comps[name], comps, seen)
        for v in node.values():
            _refs(v, comps, seen)
    elif isinstance(node, list):
        for v in node:
            _refs(v, comps, seen)


def forbid_nul(doc: dict[str, Any]) -> None:
    comps = doc.setdefault("components", {}).setdefault("schemas", {})
    comps[NUL_FREE_JSON] = {
        "title": NUL_FREE_JSON,
        "description": "Any JSON value whose strings and object keys hold no NUL (U+0000).",
        "anyOf": [
            {"type": "string", "pattern": NUL_FREE},
            {"type": ["number", "boolean", "null"]},
            {"type": "array", "items": {"$ref": _REF}},
            {"type": "object", "propertyNames": {"pattern": NUL_FREE}, "additionalProperties": {"$ref": _REF}},
        ],
    }
    request: set[str] = set()
    for ops in doc.get("paths", {}).values():
        for op in ops.values():
            for p in op.get("parameters", []):
                if p.get("in") in ("path", "query") and "schema" in p:
                    p["schema"] = _nul_free(p["schema"])
            body = op.get("requestBody", {}).get("content", {})
            for media in body.values():
                if "schema" in media:
                    media["schema"] = _nul_free(media["schema"])
            _refs(op.get("requestBody", {}), comps, request)
    for name in sorted(request - {NUL_FREE_JSON}):
        comps[name] = _nul_free(comps[name])
