#!/usr/bin/env bash
# Fetch, here, the wheels that scripts/gpu_bench.sh installs on the GPU machine (Python 3.12, no network
# there; it already has torch, transformers, numpy, httpx, jinja2, ...). Versions: those of this venv.
# Then: `python benchmarks/gpu_check.py --prepare .gpu_assets` and run scripts/gpu_bench.sh with
# carry [".whl", ".gpu_assets"] (the device tool).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.whl/' .git/info/exclude 2>/dev/null || echo /.whl/ >> .git/info/exclude
grep -qx '/.gpu_assets/' .git/info/exclude 2>/dev/null || echo /.gpu_assets/ >> .git/info/exclude
mkdir -p .whl
PKGS="fastapi starlette pydantic pydantic_core pydantic-settings python-dotenv annotated-types typing-inspection
annotated-doc opentelemetry-api typing_extensions SQLAlchemy greenlet alembic Mako uvicorn httptools procrastinate
psycopg psycopg-binary psycopg-pool asgiref croniter cryptography cffi pycparser gguf fastapi-offline typer"
for p in $PKGS; do
  v=$(.venv/bin/pip show "$p" 2>/dev/null | awk '/^Version:/{print $2}')
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 --platform manylinux_2_34_x86_64 \
    --platform manylinux_2_31_x86_64 -d .whl "$p==$v"
done
# DB=pg in gpu_bench.sh: a PostgreSQL server from a wheel (pgserver bundles PostgreSQL 16's binaries; the GPU
# machine has psutil already). Not in the venv, so pinned here.
for pv in pgserver==0.1.4 fasteners==0.20 platformdirs==4.14.9; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "$pv"
done
ls .whl
