"""gfortran as the oracle of the Fortran front door.

``Gfortran`` (``benchmarks/fortran/gfortran.py``) builds the same sources with gfortran and calls
them through ctypes. ``check_program`` compares flowgrad's forward with it to a tolerance, and
flowgrad's gradient with central differences of the gfortran routine in random directions.
"""
from __future__ import annotations

import shutil

import numpy as np
import pytest

from benchmarks.fortran.gfortran import Gfortran, compile_library  # noqa: F401

HAVE_GFORTRAN = shutil.which("gfortran") is not None
try:
    import fparser  # noqa: F401
    HAVE_FPARSER = True
except ImportError:
    HAVE_FPARSER = False

needs_fortran = [
    pytest.mark.fortran,
    pytest.mark.skipif(not HAVE_GFORTRAN, reason="gfortran is not installed (apt-get install gfortran)"),
    pytest.mark.skipif(not HAVE_FPARSER, reason="fparser is not installed (pip install fparser)"),
]

def _as_tuple(x, n):
    return x if n > 1 else (x,)


def check_program(prog, oracle, args, backend, rtol=1e-12, atol=1e-12, grad=True, grad_rtol=1e-6, seed=0,
                  fd_step=1e-6, forward=True):
    """flowgrad's forward equals gfortran's; flowgrad's vjp matches central differences of the
    gfortran routine in a random direction (every float argument perturbed together).
    ``forward=False`` checks the outputs of the gradient program only (one compile, not two)."""
    import flowgrad
    n = len(prog.outputs)
    want = _as_tuple(oracle(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args]), n)
    before = [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
    outs = pullback = None
    if forward or not grad:
        got = _as_tuple(prog(*args, backend=backend), n)
    else:
        outs, pullback = flowgrad.vjp(prog, *args, backend=backend)
        got = _as_tuple(outs, n)
    for a, b in zip(args, before):
        if isinstance(a, np.ndarray):
            np.testing.assert_array_equal(a, b, err_msg="the caller's array was modified")
    for name, g, w in zip(prog.outputs, got, want):
        np.testing.assert_allclose(np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64),
                                   rtol=rtol, atol=atol, err_msg=f"output {name}")
    if not grad:
        return got
    rng = np.random.default_rng(seed)
    if pullback is None:
        outs, pullback = flowgrad.vjp(prog, *args, backend=backend)
        for name, g, w in zip(prog.outputs, _as_tuple(outs, n), want):
            np.testing.assert_allclose(np.asarray(g, dtype=np.float64), np.asarray(w, dtype=np.float64),
                                       rtol=rtol, atol=atol, err_msg=f"output {name} of the gradient program")
    outs = _as_tuple(outs, n)
    cts = [rng.standard_normal(np.shape(o)) if np.asarray(o).dtype.kind == "f" else None for o in outs]
    grads = pullback(tuple(cts) if n > 1 else cts[0])
    floats = [k for k, a in enumerate(args) if a is not None and np.asarray(a).dtype.kind == "f"]
    dirs = {k: rng.standard_normal(np.shape(args[k])) for k in floats}

    def shifted(t):
        return [np.asarray(a) + t * dirs[k] if k in dirs and np.ndim(a) else
                (float(a) + t * float(dirs[k]) if k in dirs else a) for k, a in enumerate(args)]

    plus = _as_tuple(oracle(*shifted(fd_step)), n)
    minus = _as_tuple(oracle(*shifted(-fd_step)), n)
    fd = sum(float(np.sum(c * (np.asarray(p, np.float64) - np.asarray(m, np.float64)))) / (2 * fd_step)
             for c, p, m in zip(cts, plus, minus) if c is not None)
    ad = sum(float(np.sum(np.asarray(g, np.float64) * dirs[k])) for g, k in zip(grads, floats))
    scale = max(abs(fd), abs(ad), 1e-8)
    assert abs(fd - ad) <= grad_rtol * scale + 1e-7, f"vjp {ad} vs central differences {fd}"
    return got


def check_source(src, entry, args, backend, include_dirs=(), defines=None, **kw):
    """``check_program`` of ``entry`` in Fortran source ``src`` (text or paths) against its gfortran
    build; returns (program, oracle)."""
    import flowgrad
    prog = flowgrad.from_fortran(src, entry, include_dirs=include_dirs, defines=defines)
    oracle = Gfortran(prog, src, include_dirs=include_dirs, defines=defines)
    check_program(prog, oracle, args, backend, **kw)
    return prog, oracle
