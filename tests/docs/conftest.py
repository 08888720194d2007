"""The doc-test count in the terminal summary (tests/docs/test_doc_examples.py fills it)."""

from __future__ import annotations

# One torch thread, as in the audit tests: on a shared 2-core machine two threads contend and the docs'
# library examples take several times longer (measured: ICLInf 262 s against about 15 s).
from tests.audit.conftest import _one_torch_thread  # noqa: F401 - an autouse fixture for this folder too


def pytest_terminal_summary(terminalreporter):
    from tests.docs.doc_blocks import summary_line

    line = summary_line()
    if line:
        terminalreporter.write_sep("-", "doc examples")
        terminalreporter.write_line(line)
