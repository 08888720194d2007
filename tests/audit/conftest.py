"""One torch thread for the audit tests: on the shared 2-core machine two threads contend and a
two-prompt scoring call takes 10-30 s instead of about 2 s (measured)."""

import pytest


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    try:
        import torch
    except ImportError:  # pragma: no cover
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
