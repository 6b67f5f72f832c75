"""The first call of native code not yet compiled: the NumPy backend runs the calls while another
process compiles (``FLOWGRAD_TIERED``), the native code runs once it is ready, a new process
finds it in the cache; a compile in this process that takes a while says so."""
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import flowgrad
from flowgrad.backends import native_kernel

pytestmark = [pytest.mark.native,
              pytest.mark.skipif(not native_kernel.available(), reason="needs numba (the native backend)")]

KERNEL = '''
import numpy as np

def diffuse(u, kappa, steps):
    for t in range(steps):
        u[1:-1] = u[1:-1] + kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2]) * (1.0 + u[1:-1] ** 2)
    return np.sum(np.sin(u))
'''

SCRIPT = '''
import pickle, sys, time
import numpy as np
sys.path.insert(0, {folder!r})
import tierkernel, flowgrad
u = np.linspace(0.0, 1.0, 64) ** 2
g = flowgrad.grad(tierkernel.diffuse, wrt=("u", "kappa"), backend="native")
first = g(u.copy(), 0.1, 30)
kernel = next(iter(g.cache.values())).kernel
deferred = kernel.compiling is not None             # compiling in another process now
g.wait()
native = g(u.copy(), 0.1, 30)
sys.stdout.buffer.write(pickle.dumps((first, native, deferred, kernel.ready, kernel.compiling is None)))
'''


def _run(tmp_path, cache, tiered="1"):
    (tmp_path / "tierkernel.py").write_text(KERNEL)
    env = dict(os.environ, FLOWGRAD_CACHE_DIR=str(cache), FLOWGRAD_TIERED=tiered)
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT.format(folder=str(tmp_path)))],
                         capture_output=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    import pickle
    return pickle.loads(run.stdout), run.stderr.decode()


def _reference(tmp_path, backend):
    sys.path.insert(0, str(tmp_path))
    try:
        import tierkernel
        u = np.linspace(0.0, 1.0, 64) ** 2
        return flowgrad.grad(tierkernel.diffuse, wrt=("u", "kappa"), backend=backend)(u.copy(), 0.1, 30)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tierkernel", None)


def test_numpy_runs_the_first_calls_while_another_process_compiles(tmp_path):
    cache = tmp_path / "cache"
    (first, native, deferred, ready, done), err = _run(tmp_path, cache)
    assert deferred and ready and done
    assert "in another process; the NumPy backend runs the calls until it is ready" in err
    assert "compiled in" in err and "it runs the calls from now on" in err
    numpy_ref, native_ref = _reference(tmp_path, "numpy"), _reference(tmp_path, "native")
    for got, want in zip(first, numpy_ref):          # the NumPy backend's gradient, bit for bit
        np.testing.assert_array_equal(got, want)
    for got, want in zip(native, native_ref):        # then native code's
        np.testing.assert_array_equal(got, want)
    assert any(p.name.endswith(".compiled") for p in cache.iterdir())
    # a new process finds the machine code in the cache: native code from the first call
    (first, native, deferred, ready, done), err = _run(tmp_path, cache)
    assert not deferred and ready and "another process" not in err
    for got, want in zip(first, native_ref):
        np.testing.assert_array_equal(got, want)


def test_without_tiering_the_first_call_compiles_here(tmp_path):
    (first, native, deferred, ready, done), err = _run(tmp_path, tmp_path / "cache", tiered="0")
    assert not deferred and ready and "another process" not in err
    for got, want in zip(first, _reference(tmp_path, "native")):
        np.testing.assert_array_equal(got, want)


def test_a_compile_that_takes_a_while_prints_a_progress_line(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("FLOWGRAD_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FLOWGRAD_TIERED", "0")
    monkeypatch.setattr(native_kernel, "PROGRESS_AFTER", 0.0)
    (tmp_path / "tierkernel.py").write_text(KERNEL.replace("np.sin(u)", "np.cos(u)"))    # not compiled yet
    sys.path.insert(0, str(tmp_path))
    try:
        import tierkernel
        flowgrad.grad(tierkernel.diffuse, wrt="u", backend="native")(np.linspace(0.0, 1.0, 16), 0.1, 3)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("tierkernel", None)
    err = capfd.readouterr().err
    assert "flowgrad: compiling native code for diffuse_grad" in err and "compiled in" in err
