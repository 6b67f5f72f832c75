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


WARM = '''
import pickle, sys
import numpy as np
sys.path.insert(0, {folder!r})
import tierkernel, flowgrad
from flowgrad import pipeline
runs = []
real_run = pipeline.run
pipeline.run = lambda *a, **k: runs.append(1) or real_run(*a, **k)
u = np.linspace(0.0, 1.0, 64) ** 2
g = flowgrad.grad(tierkernel.diffuse, wrt=("u", "kappa"), backend="native")
keep = u.copy()
first = g(u, 0.1, 30)
assert np.array_equal(u, keep)
entry = next(iter(g.cache.values()))
passes_run = len(runs)
misses = sum(entry.kernel.fn.stats.cache_misses.values())
text = g.ir(u, 0.1, 30)                              # the IR, lowered when asked for
sys.stdout.buffer.write(pickle.dumps((first, passes_run, misses, "# backward" in text, g(u, 0.1, 30))))
'''


def _warm(tmp_path, cache):
    env = dict(os.environ, FLOWGRAD_CACHE_DIR=str(cache), FLOWGRAD_TIERED="0")
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(WARM.format(folder=str(tmp_path)))],
                         capture_output=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    import pickle
    return pickle.loads(run.stdout)


def test_a_new_process_takes_the_generated_source_and_machine_code_from_the_cache(tmp_path):
    (tmp_path / "tierkernel.py").write_text(KERNEL)
    cache = tmp_path / "cache"
    first, passes_run, misses, has_ir, again = _warm(tmp_path, cache)
    assert passes_run > 0 and misses == 1 and has_ir          # generated and compiled here
    assert len(list(cache.glob("flowgrad_program_*.json"))) == 1
    first2, passes_run, misses, has_ir, again2 = _warm(tmp_path, cache)
    assert passes_run == 0 and misses == 0 and has_ir         # neither passes nor a compile
    for a, b, c, d in zip(first, again, first2, again2):     # the same gradient, bit for bit
        for x in (b, c, d):
            np.testing.assert_array_equal(x, a)


def test_generated_source_planted_in_the_cache_is_not_run(tmp_path):
    import json
    (tmp_path / "tierkernel.py").write_text(KERNEL)
    cache = tmp_path / "cache"
    want = _warm(tmp_path, cache)[0]
    (path,) = cache.glob("flowgrad_program_*.json")
    marker = tmp_path / "planted-code-ran"
    entry = json.loads(path.read_text())
    body = json.loads(entry["body"])
    body["src"] = f"open({str(marker)!r}, 'w').write('ran')\n" + body["src"]
    entry["body"] = json.dumps(body, sort_keys=True)        # the signature no longer matches
    path.write_text(json.dumps(entry))
    first, passes_run, _, _, _ = _warm(tmp_path, cache)
    assert not marker.exists() and passes_run > 0           # generated again, and kept again
    assert "planted" not in path.read_text()
    for got, expected in zip(first, want):
        np.testing.assert_array_equal(got, expected)
    (cache / "program-signing.key").write_bytes(b"another key")
    first, passes_run, _, _, _ = _warm(tmp_path, cache)       # signed with another key: not taken
    assert passes_run > 0


QUEUE_SCRIPT = '''
import pickle, sys
import numpy as np
sys.path.insert(0, {folder!r})
import tierkernel, flowgrad
from flowgrad.backends import native_kernel
native_kernel.COMPILES_AT_ONCE = 1
u = np.linspace(0.0, 1.0, 64) ** 2
g1 = flowgrad.grad(tierkernel.diffuse, wrt="u", backend="native")
g2 = flowgrad.grad(tierkernel.diffuse, wrt="kappa", backend="native")
first1, first2 = g1(u.copy(), 0.1, 30), g2(u.copy(), 0.1, 30)
k1, k2 = (next(iter(g.cache.values())).kernel for g in (g1, g2))
started = (k1.compiling is not None, k2.compiling is not None)   # the second waits for its turn
g1.wait()
g2(u.copy(), 0.1, 30)                                             # its turn: it starts compiling
second = k2.compiling is not None
g2.wait()
native2 = g2(u.copy(), 0.1, 30)
sys.stdout.buffer.write(pickle.dumps((started, second, k2.ready, first2, native2)))
'''


def test_compiling_processes_take_turns(tmp_path):
    (tmp_path / "tierkernel.py").write_text(KERNEL)
    env = dict(os.environ, FLOWGRAD_CACHE_DIR=str(tmp_path / "cache"), FLOWGRAD_TIERED="1")
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(QUEUE_SCRIPT.format(folder=str(tmp_path)))],
                         capture_output=True, env=env, timeout=600)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    import pickle
    started, second, ready, first2, native2 = pickle.loads(run.stdout)
    assert started == (True, False) and second and ready
    np.testing.assert_allclose(native2, first2, rtol=1e-12)     # the NumPy backend's first result


JVP_KERNEL = """
import numpy as np


def f(x, s):
    return np.sum(np.sin(x)) * s
"""

JVP_SCRIPT = r'''
import pickle, sys
import numpy as np
sys.path.insert(0, {folder!r})
import jvpkernel, flowgrad
primals, tangents = (np.linspace(0.1, 0.9, 5), 0.7), (np.ones(5), 0.5)
sys.stdout.buffer.write(pickle.dumps(flowgrad.jvp(jvpkernel.f, primals, tangents, backend="native")))
'''


def test_a_tangent_of_a_scalar_result_while_native_code_compiles(tmp_path):
    """The NumPy backend answers the first ``jvp`` call, handing over the tangent of a scalar
    result as a number (native code hands it over as an array of one element)."""
    (tmp_path / "jvpkernel.py").write_text(JVP_KERNEL)
    env = dict(os.environ, FLOWGRAD_CACHE_DIR=str(tmp_path / "cache"), FLOWGRAD_TIERED="1")
    run = subprocess.run([sys.executable, "-c", JVP_SCRIPT.format(folder=str(tmp_path))], capture_output=True,
                         env=env, timeout=600)
    assert run.returncode == 0, run.stderr.decode()[-3000:]
    import pickle
    value, tangent = pickle.loads(run.stdout)
    x = np.linspace(0.1, 0.9, 5)
    np.testing.assert_allclose(value, np.sum(np.sin(x)) * 0.7, rtol=1e-14)
    np.testing.assert_allclose(tangent, np.sum(np.cos(x)) * 0.7 + np.sum(np.sin(x)) * 0.5, rtol=1e-13)
