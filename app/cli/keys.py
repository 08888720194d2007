"""``dpicl keys create|list|revoke``: API keys (the first key, of any scope, makes an ``auto`` server keyed for good)."""

from __future__ import annotations

import json

import typer

from app.store.base import DEFAULT_TENANT

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
    from app.cli.common import _settings
    from app.store import keys_repo

    db = _db()
    try:
        with db.session() as s:
            was_keyed = keys_repo.ever_keyed(s)
            key, row = create_key(s, tenant_id=tenant, name=name, scopes=[x.strip() for x in scopes.split(",") if x.strip()])
            open_data = keys_repo.default_tenant_datasets(s) if tenant != DEFAULT_TENANT else 0
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
    for line in what_changed(_settings().auth_mode, was_keyed, tenant, row.scopes, open_data):
        typer.echo(f"dpicl: {line}", err=True)  # stderr: stdout stays the key (and --json parseable)


def what_changed(auth_mode: str, was_keyed: bool, tenant: str, scopes: list[str], open_data: int) -> list[str]:
    """What a new key changes for whoever used the server before it (issue 29: the README tour broke
    silently when its first key switched the server to keyed mode)."""
    out: list[str] = []
    if auth_mode == "auto" and not was_keyed:
        out.append("this is the first key: the server (DPICL_AUTH_MODE=auto) is keyed from now on, for good, even "
                   "if every key is revoked; every API call and /ui need a key (a running server notices within "
                   "2 s)")
    if open_data:
        out.append(f"{open_data} dataset(s) belong to tenant '{DEFAULT_TENANT}' (everything made while the server "
                   f"was open is); this key (tenant '{tenant}') cannot see them: to keep using them, create a key "
                   f"with --tenant {DEFAULT_TENANT}")
    if "admin" not in scopes:
        out.append("this key has no 'admin' scope: it cannot create, change or delete datasets and budgets "
                   "(docs/security.md#keys-scopes-tenants)")
    return out


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
