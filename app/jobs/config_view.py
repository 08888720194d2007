"""What a job's config looks like once it leaves the server: :func:`public_config`.

The stored config (what the runner validates and runs) stays whole. Every copy that leaves the
server (``POST``/``GET /v1/audits/{id}``, webhooks, ``/ui`` pages, artifacts such as iclinf's
``config.json``, and so the CLI's output and JUnit files) is :func:`public_config` of it:
credentials ``[redacted]`` (:func:`app.jobs.secrets.redact`) and every inline text field of the
kind's schema replaced by a summary, never the text::

    {"omitted": "inline text", "count": 8, "chars": 412, "hmac_sha256": "9f2c..."}

``count``: items of a list (1 for one text or one mapping); ``chars``: characters of all its
string values (keys not counted); ``hmac_sha256``: HMAC-SHA256 of the value's canonical JSON
(sorted keys, no spaces, UTF-8) under a key derived from the server's ``DPICL_SECRETS_KEY`` (its
first key), so that two jobs sent with the same data show the same digest. It is absent when the
server has no ``DPICL_SECRETS_KEY``: a plain sha256 of short, guessable texts (a label, a yes/no
signal, a sentence from a public corpus) is a dictionary-attack oracle, so without a server secret
only ``count`` and ``chars`` are shown. The digest changes when the first key is rotated.

The fields are named by path per kind (:data:`TEXT_FIELDS`), not guessed from values; a path that
holds a mapping or a list is summarised whole. ``tests/jobs/test_config_view.py`` walks every
kind's schema so that a new text field cannot be added without a decision here.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import TYPE_CHECKING, Any

from app.jobs.secrets import redact

if TYPE_CHECKING:
    from app.config import Settings

OMITTED = "inline text"

# Inline texts per kind: dotted paths into the config. ``canary.label`` is a class label in a
# classification audit but the canary's output text in a generation audit: always summarised.
# ``query`` and the templates are summarised when given as a mapping (free prompt text); a string
# there is a preset name, shown.
TEXT_FIELDS: dict[str, tuple[str, ...]] = {
    "canary_mia": ("dataset.exemplars", "dataset.heldout", "dataset.template", "canary.text", "canary.label",
                   "query", "signals"),
    "iclinf": ("classification.template", "decoding.template", "decoding.label"),
}
# Paths whose string value is a preset name (shown); the same path as a mapping is inline text.
PRESET_STRINGS = frozenset({"query", "dataset.template", "classification.template", "decoding.template"})


def digest_key(settings: Settings | None) -> bytes | None:
    if settings is None or settings.secrets_key is None:
        return None
    first = settings.secrets_key.get_secret_value().split(",")[0].strip().encode()
    # Domain separation: the Fernet key itself is never used as an HMAC key for anything else.
    return hmac.new(first, b"dpicl config summary v1", hashlib.sha256).digest()


def _chars(value: Any) -> int:
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict):
        return sum(_chars(v) for v in value.values())
    if isinstance(value, list):
        return sum(_chars(v) for v in value)
    return 0


def summarize(value: Any, key: bytes | None) -> dict[str, Any]:
    """The summary that stands for an inline text value (a string, a list or a mapping of them)."""
    out: dict[str, Any] = {"omitted": OMITTED, "count": len(value) if isinstance(value, list) else 1,
                           "chars": _chars(value)}
    if key is not None:
        canonical = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        out["hmac_sha256"] = hmac.new(key, canonical, hashlib.sha256).hexdigest()
    return out


def is_summary(value: Any) -> bool:
    return isinstance(value, dict) and value.get("omitted") == OMITTED


def _replace(config: dict[str, Any], path: str, key: bytes | None) -> None:
    head, _, rest = path.partition(".")
    if head not in config:
        return
    if rest:
        if isinstance(config[head], dict):
            config[head] = dict(config[head])  # copy on write: the caller's dict stays whole
            _replace(config[head], rest, key)
        return
    value = config[head]
    if value is None or is_summary(value):
        return
    config[head] = summarize(value, key)


def public_config(kind: str, config: Any, settings: Settings | None = None) -> Any:
    """``config`` as it may leave the server: credentials redacted, the kind's inline texts summarised."""
    out = redact(config)
    if not isinstance(out, dict):
        return out
    key = digest_key(settings)
    for path in TEXT_FIELDS.get(kind, ()):
        if path in PRESET_STRINGS and isinstance(_get(out, path), str):
            continue
        _replace(out, path, key)
    return out


def _get(config: dict[str, Any], path: str) -> Any:
    node: Any = config
    for part in path.split("."):
        if not isinstance(node, dict):
            return None
        node = node.get(part)
    return node


def has_summary(config: Any) -> bool:
    """Whether a public config holds a summary anywhere (the /ui re-run form says to put the texts back)."""
    if is_summary(config):
        return True
    if isinstance(config, dict):
        return any(has_summary(v) for v in config.values())
    if isinstance(config, list):
        return any(has_summary(v) for v in config)
    return False


def summarised_field(kind: str, config: Any) -> str | None:
    """The first text field of ``config`` that holds a summary instead of its text (a public config sent back,
    e.g. the /ui re-run form unchanged): submit refuses it naming the field."""
    if not isinstance(config, dict):
        return None
    return next((p for p in TEXT_FIELDS.get(kind, ()) if is_summary(_get(config, p))), None)
