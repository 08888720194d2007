"""``dpicl budget forecast``: how many more answers a dataset's budget pays for (or, with --answers N,
the largest per-answer epsilon for N answers), from ``GET /v1/datasets/{id}/budget/forecast``.

Exit codes: 0 the forecast was answered, 2 an error (bad input names the field, unknown dataset,
service unreachable). Uses DPICL_API_KEY when set, like ``dpicl audit``.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import typer

budget_app = typer.Typer(help="Privacy budgets: forecast.", no_args_is_help=True)


def _param(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise typer.BadParameter(f"expected NAME=VALUE, got {text!r}", param_hint="--param")
    k, v = text.split("=", 1)
    return k.strip(), v.strip()


@budget_app.command("forecast")
def forecast(
    dataset_id: str = typer.Argument(..., help="dataset id"),
    server: str = typer.Option(..., "--server", envvar="DPICL_SERVER", help="base URL, e.g. http://dpicl:8000"),
    mechanism: Optional[str] = typer.Option(None, help="rnm, poe, esa, ... (default: rnm / esa by the set's task)"),
    epsilon: Optional[float] = typer.Option(None, help="per-answer epsilon (how many answers fit?)"),
    delta: Optional[float] = typer.Option(None, help="per-answer delta"),
    partitions: Optional[int] = typer.Option(None),
    shots_per_partition: Optional[int] = typer.Option(None, "--shots-per-partition"),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="generation sets"),
    answers: Optional[int] = typer.Option(None, help="which per-answer epsilon fits this many answers?"),
    param: list[str] = typer.Option([], "--param", help="further mechanism parameter NAME=VALUE (repeatable)"),
    as_json: bool = typer.Option(False, "--json", help="print the forecast JSON"),
) -> None:
    """Forecast a dataset's remaining answers, composed exactly as the ledger composes them."""
    from app.cli.audit import call_or_exit

    q: dict[str, Any] = {k: v for k, v in (("mechanism", mechanism), ("epsilon", epsilon), ("delta", delta),
                                           ("partitions", partitions), ("shots_per_partition", shots_per_partition),
                                           ("max_tokens", max_tokens), ("answers", answers)) if v is not None}
    for p in param:
        k, v = _param(p)
        if k in q:
            raise typer.BadParameter(f"{k} is given twice", param_hint="--param")
        q[k] = v
    out = call_or_exit(server, lambda c: c.budget_forecast(dataset_id, **q), "the service refused the forecast")
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    b = out["budget"]
    typer.echo(f"dataset {out['dataset_id']}: epsilon {b['epsilon_spent']:.6g} of {b['epsilon']:.6g} spent "
               f"(delta {b['delta']:g}, {out['adjacency']}, {b['charges']} charges)")
    if not out.get("charged", True):
        typer.echo(f"{out['mechanism']}: {out.get('note', 'never charged')}")
        return
    pa = out["per_answer"]
    if "answers" in out:
        typer.echo(f"{out['answers']} answers of {out['mechanism']} fit at per-answer epsilon {out['epsilon']:.6g} "
                   f"(refused at {out['epsilon_refused']:.6g})" if out.get("epsilon_refused") is not None else
                   f"{out['answers']} answers of {out['mechanism']} fit at per-answer epsilon {out['epsilon']:.6g}")
    more = "at least " if out.get("answers_remaining_is_lower_bound") else ""
    typer.echo(f"{out['mechanism']} at epsilon {pa['epsilon']:.6g}, delta {pa['delta']:g} per answer: "
               f"{more}{out['answers_remaining']} answers remaining (then epsilon {out['epsilon_spent_after']:.6g}, "
               f"{out['composition_after']} composition)")
