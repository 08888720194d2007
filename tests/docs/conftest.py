"""The docs tests' fixtures; their count in the terminal summary is tests/conftest.py's (the
xdist controller, which prints it, loads only that conftest)."""

from __future__ import annotations

# One torch thread, as in the audit tests: on a shared 2-core machine two threads contend and the docs'
# library examples take several times longer (measured: ICLInf 262 s against about 15 s).
from tests.audit.conftest import _one_torch_thread  # noqa: F401 - an autouse fixture for this folder too
