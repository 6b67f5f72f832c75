"""Shared pytest setup: import paths, markers and the ``backend`` fixture.

The suite is split by what a test needs (STYLE.md, rule 7):

* core (no marker): NumPy only, fast, always runs;
* ``jax``: compares against JAX, skipped with a reason when JAX is missing;
* ``native``: needs Numba (the "native" backend);
* ``ml``: needs PyTorch / ONNX;
* ``fortran``: needs gfortran (the oracle) and fparser, skipped with a reason without them;
* ``dask``: needs dask and distributed, skipped with a reason without them;
* ``slow``: long runs, deselect with ``-m "not slow"``.
"""

import importlib.util
import os
import sys
from pathlib import Path

import pytest

TESTS_DIR = Path(__file__).resolve().parent
REPO_ROOT = TESTS_DIR.parent

# The repository root first, so that `import flowgrad` and `import benchmarks.kernels`
# find this checkout rather than an installed copy; the tests folder for `import oracle`.
for _path in (str(TESTS_DIR), str(REPO_ROOT)):
    if _path not in sys.path:
        sys.path.insert(0, _path)

# The native backend's semantics under test: its first calls compile here rather than run by the
# NumPy backend while another process compiles (tests/test_first_call.py tests that tiering)
os.environ.setdefault("FLOWGRAD_TIERED", "0")

# Every engine test runs once per backend. Enabling "native" (Numba) is a one-line change:
BACKENDS = ["numpy"] + (["native"] if importlib.util.find_spec("numba") else [])

_BACKEND_MARKS = {"native": [pytest.mark.native]}

MARKERS = {
    "slow": "long-running test; deselect with -m 'not slow'",
    "jax": "needs jax (cross-checks gradients against jax.grad)",
    "native": "needs numba (the native backend)",
    "ml": "needs an ML framework (PyTorch / ONNX)",
    "fortran": "needs gfortran and fparser (the Fortran front door, checked against gfortran)",
    "dask": "needs dask and distributed (runs on a local cluster of worker processes)",
}


def pytest_configure(config):
    for name, help_text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {help_text}")


def have_module(name):
    """True when `name` can be imported, without importing it."""
    return importlib.util.find_spec(name) is not None


@pytest.fixture(
    params=[pytest.param(b, marks=_BACKEND_MARKS.get(b, []), id=b) for b in BACKENDS]
)
def backend(request):
    """Name of the flowgrad backend under test (passed as ``backend=``)."""
    return request.param
