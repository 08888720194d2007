"""ARCHITECTURE.md layering: the library layers import neither HTTP nor SQL nor the service above them."""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "app"
LIBRARY = ["privacy", "llm", "icl", "mechanisms", "audit"]
FORBIDDEN = ("fastapi", "starlette", "sqlalchemy", "alembic", "app.api", "app.store", "app.jobs", "app.budget",
             "app.config", "app.runtime", "app.cli")


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                yield a.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module


@pytest.mark.parametrize("package", LIBRARY)
def test_library_layer_imports(package):
    pkg = ROOT / package
    if not pkg.exists():
        pytest.skip(f"app/{package} not written yet")
    bad = []
    for f in pkg.rglob("*.py"):
        for mod in _imports(f):
            if any(mod == p or mod.startswith(p + ".") for p in FORBIDDEN):
                bad.append(f"{f.relative_to(ROOT.parent)} imports {mod}")
    assert not bad, bad


@pytest.mark.parametrize("package", ["answers", "jobs", "budget", "store"])
def test_service_layers_do_not_import_the_http_layer(package):
    bad = []
    for f in (ROOT / package).rglob("*.py"):
        for mod in _imports(f):
            if mod == "app.api" or mod.startswith("app.api."):
                bad.append(f"{f.relative_to(ROOT.parent)} imports {mod}")
    assert not bad, bad


def test_services_do_not_import_routes():
    """Routes import services, never the reverse (the old private_service <-> routes.private_generate
    cycle hid behind a lazy import): no module of app/api outside routes/ imports app.api.routes, except
    the two that assemble the app from its routes (main.py, and openapi.py which documents their bodies)."""
    bad = [f"{f.relative_to(ROOT.parent)} imports {mod}"
           for f in (ROOT / "api").glob("*.py") if f.name not in ("main.py", "openapi.py") for mod in _imports(f)
           if mod == "app.api.routes" or mod.startswith("app.api.routes.")]
    assert not bad, bad


def test_decode_does_not_import_a_backend():
    """llm/decode is the backend-neutral decoding loop: it imports neither hf nor remote (the old
    llm/decode <-> llm/hf cycle)."""
    mods = list(_imports(ROOT / "llm" / "decode.py"))
    assert not [m for m in mods if m.startswith(("app.llm.hf", "app.llm.remote"))], mods


def test_answer_service_imports_no_web_framework():
    """app/answers is the private-answer service: HTTP is the routes' job (issue 20)."""
    bad = [f"{f.relative_to(ROOT.parent)} imports {mod}" for f in (ROOT / "answers").rglob("*.py")
           for mod in _imports(f) if mod.split(".")[0] in ("fastapi", "starlette")]
    assert not bad, bad
