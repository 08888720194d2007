"""``dpicl datasets``: the bundled sample tasks, listed and loaded as private datasets of a running server
(``POST /v1/samples/{name}/load``), so the docs can start from realistic sizes.

Exit codes: 0 done, 2 an error (unknown sample, refused key, service unreachable). Uses DPICL_API_KEY.
"""

from __future__ import annotations

import json
from typing import Optional

import typer

datasets_app = typer.Typer(help="Datasets: load the bundled sample tasks.", no_args_is_help=True)

_SERVER = typer.Option("http://127.0.0.1:8000", "--server", envvar="DPICL_SERVER", help="base URL of dpicl")


@datasets_app.command("samples")
def samples(server: str = _SERVER, as_json: bool = typer.Option(False, "--json")) -> None:
    """List the bundled sample tasks."""
    from app.cli.audit import call_or_exit

    out = call_or_exit(server, lambda c: c.samples(), "the service refused the sample list")
    if as_json:
        typer.echo(json.dumps(out, indent=2))
        return
    for s in out["data"]:
        typer.echo(f"{s['name']:<18} {s['task']:<14} {s['exemplar_count']:>4} exemplars  {s['description']}")


@datasets_app.command("load-sample")
def load_sample(
    sample: str = typer.Argument(..., help="assistant_intents, support_intents or gen_dialogsum"),
    server: str = _SERVER,
    name: Optional[str] = typer.Option(None, "--name", help="name of the new dataset (default: the sample's)"),
    budget_epsilon: Optional[float] = typer.Option(None, "--budget-epsilon", help="total epsilon of its budget"),
    budget_delta: float = typer.Option(1e-5, "--budget-delta", help="delta of its budget (with --budget-epsilon)"),
    as_json: bool = typer.Option(False, "--json", help="print the dataset JSON"),
) -> None:
    """Load a bundled sample task as a new private dataset; prints its id."""
    from app.cli.audit import call_or_exit

    budget = {"epsilon": budget_epsilon, "delta": budget_delta} if budget_epsilon is not None else None
    ds = call_or_exit(server, lambda c: c.load_sample(sample, name=name, budget=budget),
                      "the service refused to load the sample")
    if as_json:
        typer.echo(json.dumps(ds, indent=2))
        return
    b = ds.get("budget") or {}
    labels = f", labels {', '.join(ds['labels'])}" if ds.get("labels") else ""
    typer.echo(f"{ds['id']}  {ds['name']}: {ds['task']}, {ds['exemplar_count']} exemplars{labels}; "
               f"budget epsilon {b.get('epsilon')} delta {b.get('delta')}")
