"""Shared set-up of the workload tests: every test trains as the runner does, with one torch thread."""

import pytest

from testbed.determinism import single_threaded


@pytest.fixture(autouse=True)
def one_thread():
    """One torch (and BLAS) thread, as `testbed.workloads.runner` trains: results then repeat exactly."""
    with single_threaded():
        yield
