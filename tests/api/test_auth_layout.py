"""The auth modules form no import circle (issues 26 and 29): app/api/principal.py is below both the
JSON API's auth and the web UI's session, and imports neither."""

import ast
from pathlib import Path

APP = Path(__file__).resolve().parents[2] / "app"


def _imports(rel: str) -> set[str]:
    tree = ast.parse((APP / rel).read_text())
    return {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module} | {
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}


def test_no_auth_circle():
    assert not {m for m in _imports("api/principal.py") if m.startswith(("app.api", "app.ui", "fastapi", "starlette"))}
    assert "app.api.auth" not in _imports("ui/session.py")
    assert "app.api.auth_middleware" not in _imports("api/auth.py")
