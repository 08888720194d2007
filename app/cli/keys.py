"""``dpicl keys create|list|revoke``: API keys (the first key, of any scope, makes an ``auto`` server keyed for good)."""

from __future__ import annotations

import json

import typer

keys_app = typer.Typer(no_args_is_help=True)


def _db():
    from app.cli.common import _settings
    from app.store import Database
    from app.store import migrate as m

    settings = _settings()
    if settings.migrate_on_startup:
        from app.runtime import _ensure_sqlite_dir

        _ensure_sqlite_dir(settings.database_url)
        m.upgrade(settings.database_url)
    return Database(settings.database_url)


@keys_app.command("create")
def create(
    tenant: str = typer.Option("default", help="tenant the key belongs to"),
    name: str = typer.Option("key", help="a label for people"),
    scopes: str = typer.Option("infer", help="comma-separated: infer,audit,internals,admin,metrics"),
    as_json: bool = typer.Option(False, "--json"),
) -> None:
    """Create a key and print it once (only its hash is stored)."""
    from app.api.auth import create_key

    db = _db()
    try:
        with db.session() as s:
            key, row = create_key(s, tenant_id=tenant, name=name, scopes=[x.strip() for x in scopes.split(",") if x.strip()])
            s.commit()
    except ValueError as exc:
        typer.echo(f"dpicl: {exc}", err=True)
        raise typer.Exit(2)
    finally:
        db.dispose()
    if as_json:
        typer.echo(json.dumps({"id": row.id, "tenant": tenant, "scopes": row.scopes, "key": key}))
    else:
        typer.echo(f"{row.id}  tenant={tenant}  scopes={','.join(row.scopes)}")
        typer.echo(key)


@keys_app.command("list")
def list_(tenant: str = typer.Option(None, help="only this tenant"), as_json: bool = typer.Option(False, "--json")) -> None:
    """List keys (never the secrets)."""
    from app.store import keys_repo

    db = _db()
    with db.session() as s:
        rows = [{"id": k.id, "tenant": k.tenant_id, "name": k.name, "prefix": k.prefix, "scopes": k.scopes,
                 "created_at": k.created_at.isoformat(), "revoked": k.revoked_at is not None}
                for k in keys_repo.list_keys(s, tenant)]
    db.dispose()
    if as_json:
        typer.echo(json.dumps(rows, indent=2))
    else:
        for r in rows:
            typer.echo(f"{r['id']}  dpicl_{r['prefix']}_…  tenant={r['tenant']}  scopes={','.join(r['scopes'])}"
                       f"{'  REVOKED' if r['revoked'] else ''}  {r['name']}")


@keys_app.command("revoke")
def revoke(key_id: str) -> None:
    """Revoke a key by id."""
    from app.store import keys_repo

    db = _db()
    with db.session() as s:
        ok = keys_repo.revoke(s, key_id)
        s.commit()
        left = keys_repo.active_count(s)
    db.dispose()
    if not ok:
        typer.echo(f"dpicl: no active key {key_id!r}", err=True)
        raise typer.Exit(2)
    typer.echo(f"revoked {key_id}")
    if left == 0:
        typer.echo("no active key is left: the server stays keyed (nobody can call it) until a key is created; "
                   "only DPICL_AUTH_MODE=open opens it again", err=True)
