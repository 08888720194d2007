"""public_config: every text-bearing field of every kind's config schema is either summarised
(app/jobs/config_view.py::TEXT_FIELDS) or named here as public, so that a new text field cannot
reach a response without a decision; and the summary itself (count, chars, keyed digest)."""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import types
import typing
from typing import Any, Literal

from pydantic import BaseModel, RootModel, SecretStr

from app.config import load_settings
from app.jobs import registry
from app.jobs.config_view import TEXT_FIELDS, public_config

# Strings that are identifiers, names or enumerations (shown as sent), per kind. Mechanism, model and
# preset names, URLs, a bundled task, a registered set's id, class labels (declared metadata, as in
# GET /v1/datasets/{id}), a new set's name, the test kind's message.
PUBLIC_FIELDS: dict[str, set[str]] = {
    "canary_mia": {"target.mechanism", "target.params", "target.model", "target.embedder", "target.bug",
                   "target.url", "target.api_key_env", "dataset.bundled", "dataset.labels",
                   "dataset.decoy_labels"},  # label names no exemplar carries: declared like dataset.labels
    "iclinf": {"models", "dataset.name", "dataset.id"},
    "synthesize": {"dataset_id", "model", "name"},
    "sleep": {"fail_message"},
    "epsilon": {"orders"},  # an RDP order grid spec ("2-99")
}
SECRET = {"target.api_key", "target.api_key_sealed"}  # credentials: redacted, not summarised


def _holds_text(tp: Any) -> bool:
    if tp is str:
        return True
    if tp is Any:
        return True  # a free-form value may hold text
    if typing.get_origin(tp) is Literal:
        return False
    return any(_holds_text(a) for a in typing.get_args(tp))


def _models(tp: Any) -> list[type[BaseModel]]:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [tp]
    return [m for a in typing.get_args(tp) for m in _models(a)]


def _text_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    if issubclass(model, RootModel):
        return {p for m in _models(model.model_fields["root"].annotation) for p in _text_paths(m, prefix)}
    out: set[str] = set()
    for name, f in model.model_fields.items():
        tp, path = f.annotation, f"{prefix}{name}"
        if tp is SecretStr or (isinstance(tp, types.UnionType) and SecretStr in typing.get_args(tp)):
            out.add(path)
            continue
        nested = _models(tp)
        if nested:
            for m in nested:
                out |= _text_paths(m, f"{path}.")
            continue
        if _holds_text(tp):
            out.add(path)
    return out


def test_every_text_field_of_every_kind_is_summarised_or_public():
    kinds = registry.all_kinds()
    assert {"canary_mia", "iclinf", "epsilon", "synthesize", "sleep"} <= set(kinds)
    for name, kind in kinds.items():
        found = _text_paths(kind.config_model)
        decided = set(TEXT_FIELDS.get(name, ())) | PUBLIC_FIELDS.get(name, set()) | SECRET
        assert found <= decided, f"{name}: text fields without a decision: {sorted(found - decided)}"
        assert set(TEXT_FIELDS.get(name, ())) <= found, f"{name}: TEXT_FIELDS names no such field"


CONFIG = {"target": {"type": "simulated", "api_key_sealed": "gAAAA-sealed"},
          "dataset": {"exemplars": [{"input": "secret one", "output": "yes"}, {"input": "two", "output": "no"}],
                      "labels": ["yes", "no"], "template": "default"},
          "canary": {"type": "hex", "text": "my canary"}, "query": "inquiry", "signals": ["y one", "y zero"]}
KEY = "dGhpcyBpcyBhIHRlc3Qga2V5IG9mIDMyIGJ5dGVzISE="


def test_summaries_count_chars_and_a_keyed_digest_only_with_a_server_key(tmp_path):
    stored = copy.deepcopy(CONFIG)
    plain = public_config("canary_mia", stored)
    assert stored == CONFIG  # the stored config stays whole
    ex = plain["dataset"]["exemplars"]
    assert ex == {"omitted": "inline text", "count": 2, "chars": len("secret one") + 3 + 3 + 2}
    assert plain["canary"]["text"] == {"omitted": "inline text", "count": 1, "chars": 9}
    assert plain["signals"]["count"] == 2 and plain["target"]["api_key_sealed"] == "[redacted]"
    assert plain["query"] == "inquiry" and plain["dataset"]["template"] == "default"  # preset names
    assert plain["dataset"]["labels"] == ["yes", "no"]
    assert "secret one" not in json.dumps(plain) and "my canary" not in json.dumps(plain)

    settings = load_settings(database_url=f"sqlite:///{tmp_path}/x.db", secrets_key=KEY)
    keyed = public_config("canary_mia", CONFIG, settings)
    mac_key = hmac.new(KEY.encode(), b"dpicl config summary v1", hashlib.sha256).digest()
    canonical = json.dumps(CONFIG["dataset"]["exemplars"], sort_keys=True, separators=(",", ":")).encode()
    assert keyed["dataset"]["exemplars"]["hmac_sha256"] == hmac.new(mac_key, canonical, hashlib.sha256).hexdigest()
    # A plain sha256 would be a dictionary oracle for short texts: it is never shown.
    assert hashlib.sha256(canonical).hexdigest() not in json.dumps(keyed)

    mapping = public_config("canary_mia", {"query": {"query": "Is {canary} there? secret"},
                                           "dataset": {"template": {"instruction": "secret"}}})
    assert mapping["query"]["omitted"] == "inline text" and mapping["dataset"]["template"]["chars"] == 6
    assert public_config("iclinf", {"decoding": {"label": "a secret output", "template": "generic"}})["decoding"] == {
        "label": {"omitted": "inline text", "count": 1, "chars": 15}, "template": "generic"}
