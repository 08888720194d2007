"""``dpicl privacy``: calibrate, convert, empirical (same functions and keys as the HTTP API).

Numbers are read as text and parsed here, so that every bad input ends in one
line on stderr and exit code 2 (Click's own errors print a usage block).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import typer

from app.privacy.errors import PrivacyInputError

privacy_app = typer.Typer(
    help="Privacy math: calibrate mechanisms, convert guarantees, empirical epsilon bounds.",
    no_args_is_help=True,
)


def _float(value: str | None, name: str) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except ValueError:
        raise PrivacyInputError(f"not a number: {value!r}", param=name) from None


def _int(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        return int(value)
    except ValueError:
        try:
            f = float(value)
        except ValueError:
            raise PrivacyInputError(f"not an integer: {value!r}", param=name) from None
        if not math.isfinite(f) or f != int(f):
            raise PrivacyInputError(f"not an integer: {value!r}", param=name) from None
        return int(f)


def _floats(value: str | None, name: str) -> list[float] | None:
    if value is None:
        return None
    parts = [p.strip() for p in value.split(",")]
    if not parts or any(not p for p in parts):
        raise PrivacyInputError(f"expected comma-separated numbers, got {value!r}", param=name)
    return [_float(p, name) for p in parts]  # type: ignore[misc]


def _require(value: Any, name: str) -> Any:
    if value is None:
        raise PrivacyInputError("is required", param=name)
    return value


def _fail(command: str, exc: PrivacyInputError, options: set[str]) -> None:
    where = f"--{exc.param.replace('_', '-')}" if exc.param in options else exc.param
    msg = " ".join(exc.message.split())  # one line
    typer.echo(f"dpicl privacy {command}: error: {where}: {msg}" if where else f"dpicl privacy {command}: error: {msg}", err=True)
    raise typer.Exit(2)


def _print(result: dict[str, Any], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(result, indent=2))
        return
    rows: list[tuple[str, str]] = []

    def add(prefix: str, val: Any) -> None:
        if isinstance(val, dict):
            for k, x in val.items():
                add(f"{prefix}.{k}", x)
        elif isinstance(val, list):
            for x in val:
                rows.append((prefix, str(x)))
        elif val is None:
            rows.append((prefix, "-"))
        elif isinstance(val, float):
            rows.append((prefix, f"{val:.12g}"))
        else:
            rows.append((prefix, str(val)))

    for k, val in result.items():
        add(k, val)
    width = max(len(k) for k, _ in rows)
    for k, val in rows:
        typer.echo(f"{k:<{width}}  {val}")


def _run(command: str, options: set[str], fn: Callable[[], dict[str, Any]], as_json: bool) -> None:
    try:
        result = fn()
    except PrivacyInputError as exc:
        _fail(command, exc, options)
        return
    _print(result, as_json)


Parser = Callable[[Any, str], Any]


def _as_given(value: Any, name: str) -> Any:
    return value


def _required(parse: Parser) -> Parser:
    return lambda value, name: _require(parse(value, name), name)


def _options(params: dict[str, Any]) -> dict[str, Any]:
    """A command's option values by name, in signature order: its ``locals()`` taken before anything
    else is bound, without ``--json``."""
    return {k: v for k, v in params.items() if k != "as_json"}


def _parsed(values: dict[str, Any], **parsers: Parser) -> dict[str, Any]:
    """Every option parsed by its parser (options without one pass as typed), in signature order, so
    that the first bad option is the one reported."""
    return {k: parsers.get(k, _as_given)(v, k) for k, v in values.items()}


@privacy_app.command()
def calibrate(
    mechanism: str | None = typer.Option(None, "--mechanism", help="clip-softmax | gaussian"),
    solve_for: str | None = typer.Option(None, "--solve-for", help="temperature | clip | batch-size (clip-softmax); sigma (gaussian)"),
    target_epsilon: str | None = typer.Option(None, "--target-epsilon", metavar="FLOAT", help="target epsilon (> 0)"),
    delta: str | None = typer.Option(None, "--delta", metavar="FLOAT", help="delta in (0, 1)"),
    temperature: str | None = typer.Option(None, "--temperature", metavar="FLOAT", help="softmax temperature tau"),
    clip: str | None = typer.Option(None, "--clip", metavar="FLOAT", help="logit clip bound c"),
    batch_size: str | None = typer.Option(None, "--batch-size", metavar="INT", help="prompts per batch s"),
    compositions: str | None = typer.Option(None, "--compositions", metavar="INT", help="releases composed (sequences x tokens)"),
    sensitivity: str | None = typer.Option(None, "--sensitivity", metavar="FLOAT", help="L2 sensitivity (gaussian; default 1)"),
    orders: str | None = typer.Option(None, "--orders", help="Renyi orders: '2-99' or '2,3,4.5' (default: dp-accounting's grid)"),
    adjacency: str = typer.Option("add-remove", "--adjacency", help="add-remove | replace-one"),
    method: str | None = typer.Option(None, "--method", help="gaussian: analytic (default) | rdp | classical"),
    conversion: str = typer.Option("best", "--conversion", help="RDP -> DP: best | bbghs | mironov"),
    lower: str | None = typer.Option(None, "--lower", metavar="FLOAT", help="search lower bound for the solved parameter"),
    upper: str | None = typer.Option(None, "--upper", metavar="FLOAT", help="search upper bound for the solved parameter"),
    as_json: bool = typer.Option(False, "--json", help="print JSON (same keys as POST /v1/privacy/calibrate)"),
) -> None:
    """Solve a mechanism parameter so that epsilon at delta is at most the target."""
    values = _options(locals())
    from app.privacy.service import calibrate as run

    def call() -> dict[str, Any]:
        solve = _require(solve_for, "solve_for")
        bound = _int if solve.replace("_", "-").lower() == "batch-size" else _float
        return run(**_parsed(
            values, mechanism=_required(_as_given), target_epsilon=_required(_float), delta=_required(_float),
            temperature=_float, clip=_float, batch_size=_int, compositions=_int, sensitivity=_float,
            lower=bound, upper=bound,
        ))

    _run("calibrate", set(values), call, as_json)


@privacy_app.command()
def convert(
    rdp: str | None = typer.Option(None, "--rdp", help="RDP curve, comma-separated, one value per order"),
    orders: str | None = typer.Option(None, "--orders", help="Renyi orders: '2-99' or '2,3,4.5'"),
    rho: str | None = typer.Option(None, "--rho", metavar="FLOAT", help="zCDP rho"),
    pure_epsilon: str | None = typer.Option(None, "--pure-epsilon", metavar="FLOAT", help="pure-DP epsilon"),
    mu: str | None = typer.Option(None, "--mu", metavar="FLOAT", help="GDP mu"),
    sigma: str | None = typer.Option(None, "--sigma", metavar="FLOAT", help="Gaussian noise sigma"),
    sensitivity: str | None = typer.Option(None, "--sensitivity", metavar="FLOAT", help="L2 sensitivity with --sigma (default 1)"),
    count: str = typer.Option("1", "--count", metavar="INT", help="number of compositions of the source"),
    delta: str | None = typer.Option(None, "--delta", metavar="FLOAT", help="delta -> epsilon"),
    epsilon: str | None = typer.Option(None, "--epsilon", metavar="FLOAT", help="epsilon -> delta"),
    to: str | None = typer.Option(None, "--to", help="epsilon | delta | mu | rho (mu, rho: from --epsilon and --delta)"),
    adjacency: str = typer.Option("add-remove", "--adjacency", help="adjacency of the source guarantee"),
    to_adjacency: str | None = typer.Option(None, "--to-adjacency", help="translate to this adjacency"),
    conversion: str = typer.Option("best", "--conversion", help="RDP -> DP: best | bbghs | mironov"),
    as_json: bool = typer.Option(False, "--json", help="print JSON (same keys as POST /v1/privacy/convert)"),
) -> None:
    """Convert an RDP curve, zCDP rho, pure epsilon, GDP mu or Gaussian sigma to (epsilon, delta), or back."""
    values = _options(locals())
    from app.privacy.service import convert as run

    def call() -> dict[str, Any]:
        return run(**_parsed(values, rdp=_floats, rho=_float, pure_epsilon=_float, mu=_float, sigma=_float,
                             sensitivity=_float, count=_int, delta=_float, epsilon=_float))

    _run("convert", set(values), call, as_json)


@privacy_app.command()
def empirical(
    tp: str | None = typer.Option(None, "--tp", metavar="INT", help="true positives (canary in, guessed in)"),
    fn: str | None = typer.Option(None, "--fn", metavar="INT", help="false negatives"),
    fp: str | None = typer.Option(None, "--fp", metavar="INT", help="false positives (canary out, guessed in)"),
    tn: str | None = typer.Option(None, "--tn", metavar="INT", help="true negatives"),
    trials: str | None = typer.Option(None, "--trials", metavar="INT", help="number of trials (checked against the counts)"),
    accuracy: str | None = typer.Option(None, "--accuracy", metavar="FLOAT", help="auditing accuracy in [0, 1] (with --trials)"),
    correct: str | None = typer.Option(None, "--correct", metavar="INT", help="correct guesses (instead of --accuracy)"),
    confidence: str = typer.Option("0.95", "--confidence", metavar="FLOAT", help="confidence level in (0, 1)"),
    delta: str = typer.Option("0", "--delta", metavar="FLOAT", help="delta in [0, 1)"),
    as_json: bool = typer.Option(False, "--json", help="print JSON (same keys as POST /v1/privacy/empirical)"),
) -> None:
    """Empirical epsilon lower bound from attack counts or auditing accuracy."""
    values = _options(locals())
    from app.privacy.service import empirical as run

    def call() -> dict[str, Any]:
        return run(**_parsed(values, tp=_int, fn=_int, fp=_int, tn=_int, trials=_int, accuracy=_float, correct=_int,
                             confidence=_float, delta=_float))

    _run("empirical", set(values), call, as_json)
