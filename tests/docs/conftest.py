"""The doc-test count in the terminal summary (tests/docs/test_doc_examples.py fills it)."""

from __future__ import annotations

import pytest


def pytest_terminal_summary(terminalreporter):
    from tests.docs.doc_blocks import summary_line

    line = summary_line()
    if line:
        terminalreporter.write_sep("-", "doc examples")
        terminalreporter.write_line(line)


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """One torch thread, as in tests/audit/conftest.py: on a shared 2-core machine two threads contend and the
    docs' library examples take several times longer (measured: ICLInf 262 s against about 15 s)."""
    try:
        import torch
    except ImportError:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
