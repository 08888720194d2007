"""What a ``canary_mia`` result says about its canary and attack query: :func:`public_attack`.

The audit itself runs on the texts; the result (``GET /v1/audits/{id}``, the list, webhooks, ``/ui``,
``result.json``, ``trials.csv``, the CLI's JUnit) names a text that holds caller or private data by
kind, origin, size and a digest, never the text:

* the canary's text, unless the server made it from nothing private: a ``hex`` canary (random bytes)
  or a ``false_fact`` canary (the built-in list) not given by the caller is shown as it is. A
  ``heldout`` canary (a text of ``dataset.heldout``, ``heldout_index``), a ``unigram`` canary (rare
  tokens of the exemplars, ``tokens``) and a caller's ``canary.text`` are summarised: ``chars`` and,
  where the server has ``DPICL_SECRETS_KEY``, ``hmac_sha256`` (the keyed digest of
  ``app/jobs/config_view.py``: a caller's ``canary.text`` shows the digest its config shows);
* the canary's label: a declared class label of the dataset is public metadata and shown; any other
  label (a generation record's output text, a classification label that is not a class label) is
  summarised as the config summarises ``canary.label``;
* the signal texts (generation): the paper's pairs and the built-in strategies' are shown; a caller's
  ``signals`` are summarised (``result.config.signals`` with the config's digest);
* the query: the strategy's template with the placeholders of private pieces left in (``{canary}``,
  ``{positive}``, ``{negative}``, ``{y1}``, ``{y0}``, ``{prefix}``; brainwash's demonstrations with
  ``{input_prefix}`` ...), public pieces filled in; a caller's own query strategy (a mapping) is
  summarised whole, with the digest of its config summary;
* labels that stand for private text (in ``attack.labels``, ``positive``, ``negative``,
  ``reference`` and each trial's ``released``) are shown as their placeholder.

Every number stays. ``tests/ui/test_canary_result_echo.py`` checks the channels with a marker.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.jobs.config_view import digest_key, summarize

# Canary kinds the server makes from nothing private (random bytes, a public list).
PUBLIC_KINDS = frozenset({"hex", "false_fact"})
ORIGIN = {"heldout": "dataset.heldout", "unigram": "dataset.exemplars"}


class _Keep(dict):  # str.format_map: a placeholder without a public value stays as it is
    def __missing__(self, key: str) -> str:
        return "{" + key + "}"


def text_public(canary: Any, caller_text: bool) -> bool:
    return canary.kind in PUBLIC_KINDS and not caller_text


def _digest(value: Any, key: bytes | None) -> dict[str, Any]:
    s = summarize(value, key)
    return {k: s[k] for k in ("chars", "hmac_sha256") if k in s}


def public_canary(canary: Any, *, caller_text: bool, label_public: bool, key: bytes | None) -> dict[str, Any]:
    """The canary as a result shows it (the module's rules)."""
    out: dict[str, Any] = {"kind": canary.kind}
    if text_public(canary, caller_text):
        out["text"] = canary.text
    else:
        out["origin"] = "canary.text" if caller_text else ORIGIN.get(canary.kind, "server")
        if canary.index is not None and not caller_text:
            out["heldout_index"] = canary.index
        if canary.tokens is not None and not caller_text:
            out["tokens"] = canary.tokens
        out.update(_digest(canary.text, key))
    out["label"] = canary.label if label_public else summarize(canary.label, key)
    return out


def public_attack(attack: Any, *, query: str | Mapping[str, Any], caller_text: bool, class_labels: Sequence[str],
                  key: bytes | None) -> tuple[dict[str, Any], dict[str, str]]:
    """``(attack dict, label map)``: the attack as a result shows it, and each private label text mapped
    to the placeholder that stands for it (for trial rows' ``released``)."""
    from app.audit.gen_queries import GenerationAttack, get_generation_strategy, public_signal_pair, split_canary
    from app.audit.queries import get_strategy, query_template

    canary = attack.canary
    generation = isinstance(attack, GenerationAttack)
    custom = isinstance(query, Mapping)
    public_text = text_public(canary, caller_text)
    names: dict[str, str] = {}  # private label text -> placeholder
    values: dict[str, str] = {}  # placeholder name -> public value
    if public_text:
        values["canary"] = canary.text
    if generation:
        label_public = public_text and canary.label == canary.text
        if attack.decision == "similarity":
            if public_text:
                values["prefix"] = split_canary(canary.text)[0]
            else:
                names[attack.labels[0]] = "{reference}"
        elif public_signal_pair(*attack.labels[:2]):
            values["y1"], values["y0"] = attack.labels[0], attack.labels[1]
        else:
            names[attack.labels[0]], names[attack.labels[1]] = "{y1}", "{y0}"
        template = None if custom else get_generation_strategy(query).query
    else:
        label_public = canary.label in class_labels
        s = None if custom else get_strategy(query)
        literals = set() if s is None else {x for x in (s.positive, s.negative) if x and not x.startswith("@")}
        for role, lab in (("positive", attack.positive), ("negative", attack.negative)):
            if lab is None:
                continue
            if lab in class_labels or lab in literals:
                values[role] = lab
            else:
                names.setdefault(lab, "{canary_label}" if lab == canary.label else "{" + role + "}")
        for lab in attack.labels:
            if lab not in class_labels and lab not in literals:
                names.setdefault(lab, "{canary_label}" if lab == canary.label else "{label}")
        template = None if s is None else query_template(s)
    out: dict[str, Any] = {"strategy": "custom" if custom else attack.strategy}
    if template is None:
        out["query"] = summarize(dict(query), key)  # the config's digest of the same mapping
        out["instruction"] = None if attack.instruction is None else summarize(attack.instruction, key)
    else:
        try:
            out["query"] = template.format_map(_Keep(values))
        except (ValueError, IndexError, KeyError):  # a template format cannot read: never its text
            out["query"] = summarize(template, key)
        out["instruction"] = attack.instruction
    out["labels"] = [names.get(lab, lab) for lab in attack.labels]
    out["positive"] = names.get(attack.positive, attack.positive)
    out["negative"] = None if attack.negative is None else names.get(attack.negative, attack.negative)
    out["canary"] = public_canary(canary, caller_text=caller_text, label_public=label_public, key=key)
    if generation:
        out["decision"] = attack.decision
        out["reference"] = None if attack.reference is None else names.get(attack.reference, attack.reference)
    return out, names


def public_rows(rows: Sequence[dict[str, Any]], names: Mapping[str, str]) -> list[dict[str, Any]]:
    """Trial rows with a private ``released`` label shown as its placeholder."""
    if not names:
        return list(rows)
    return [{**r, "released": names.get(r["released"], r["released"])} if isinstance(r.get("released"), str)
            else r for r in rows]


def public_signals(signals: Any, key: bytes | None) -> Any:
    """``config.signals`` of a result: the config's summary of a caller's pair; a public pair as it is."""
    from app.audit.gen_queries import public_signal_pair

    if signals is None or public_signal_pair(*signals):
        return None if signals is None else list(signals)
    return summarize(list(signals), key)


def of_job(ctx: Any, config: Any, attack: Any, class_labels: Sequence[str]) -> tuple[dict[str, Any], dict[str, str]]:
    """:func:`public_attack` of a ``canary_mia`` job: its config says which texts came from the caller."""
    return public_attack(attack, query=config.query or attack.strategy, caller_text=config.canary.text is not None,
                         class_labels=class_labels, key=digest_key(ctx.settings))
