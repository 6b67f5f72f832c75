"""The native backend's parallel loop nests: which nests run over threads by default, and that
they give the one-thread code's results bit for bit (see ``Lowering.splits``)."""
import numpy as np
import pytest

import flowgrad
from oracle import check_grad

pytestmark = pytest.mark.native
numba = pytest.importorskip("numba")

from flowgrad.backends.native import Lowering  # noqa: E402
from flowgrad.backends.native_runtime import threads  # noqa: E402

THREADS = threads()

needs_threads = pytest.mark.skipif(THREADS < 2, reason="one thread (NUMBA_NUM_THREADS=1 or one CPU): no nest is split")


def smoothing(A, steps):
    B = A * 0.0
    for t in range(steps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[:-2, 1:-1] + A[2:, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:])
        A[1:-1, 1:-1] = np.tanh(B[1:-1, 1:-1]) * 0.5 + A[1:-1, 1:-1]
    return np.sum(A * A) + np.sum(B * B)


def smoothing_after_product(A, W, steps):
    return smoothing(A @ W, steps)


def _large():
    """A side for ``smoothing`` whose nests (10-13 element operations per element) are worth
    splitting over every thread, but not in a function that also calls BLAS."""
    assert Lowering.LIBRARY_WORK_PER_THREAD >= 2 * Lowering.WORK_PER_THREAD
    return int(np.sqrt(Lowering.WORK_PER_THREAD * THREADS / 8)) + 2


def _matrix(n, m=None, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, (n, m or n))


def _source(fn, args, wrt=None):
    t = flowgrad.jit(fn, backend="native") if wrt is None else flowgrad.grad(fn, wrt=wrt, backend="native")
    return t.source(*args)


@needs_threads
def test_large_nests_run_over_threads_by_default_with_the_one_thread_results(monkeypatch):
    monkeypatch.delenv("FLOWGRAD_PARALLEL", raising=False)
    args = (_matrix(_large()), 3)
    fwd, grad = flowgrad.jit(smoothing, backend="native"), flowgrad.grad(smoothing, wrt="A", backend="native")
    value, gradient = fwd(*args), grad(*args)
    assert "numba.prange(" in fwd.source(*args) and "numba.prange(" in grad.source(*args)
    monkeypatch.setenv("FLOWGRAD_PARALLEL", "0")
    fwd0, grad0 = flowgrad.jit(smoothing, backend="native"), flowgrad.grad(smoothing, wrt="A", backend="native")
    assert "prange" not in fwd0.source(*args) and "prange" not in grad0.source(*args)
    assert fwd0(*args) == value
    np.testing.assert_array_equal(grad0(*args), gradient)
    numba.set_num_threads(1)            # the parallel code on one thread: the same again
    try:
        assert fwd(*args) == value
        np.testing.assert_array_equal(grad(*args), gradient)
    finally:
        numba.set_num_threads(THREADS)


@needs_threads
def test_gradient_with_parallel_nests_matches_finite_differences(monkeypatch):
    monkeypatch.delenv("FLOWGRAD_PARALLEL", raising=False)
    args = (_matrix(_large(), seed=1), 2)
    assert "numba.prange(" in _source(smoothing, args, "A")
    check_grad(smoothing, args, "A", backend="native", n_dirs=2)


def test_small_nests_stay_on_one_thread(monkeypatch):
    monkeypatch.delenv("FLOWGRAD_PARALLEL", raising=False)
    for args in ((_matrix(40), 3),            # below PARALLEL_MIN elements
                 (_matrix(190, 180), 3)):     # above it, but too little work per thread
        assert "prange" not in _source(smoothing, args) + _source(smoothing, args, "A")


def test_nests_beside_library_calls_need_more_work(monkeypatch):
    # OpenBLAS's threads spin after a product and compete with the nest's threads
    monkeypatch.delenv("FLOWGRAD_PARALLEL", raising=False)
    n = _large()
    args = (_matrix(n), _matrix(n, seed=3), 2)
    assert "prange" not in _source(smoothing_after_product, args)
    monkeypatch.setenv("FLOWGRAD_PARALLEL", "1")
    assert "numba.prange(" in _source(smoothing_after_product, args)


def test_environment_switch(monkeypatch):
    large, medium = (_matrix(_large()), 3), (_matrix(190, 180), 3)
    monkeypatch.setenv("FLOWGRAD_PARALLEL", "0")            # off
    assert "prange" not in _source(smoothing, large) + _source(smoothing, large, "A")
    monkeypatch.setenv("FLOWGRAD_PARALLEL", "1")            # every safe nest of PARALLEL_MIN elements
    assert "numba.prange(" in _source(smoothing, medium) and "numba.prange(" in _source(smoothing, medium, "A")
    assert "prange" not in _source(smoothing, (_matrix(40), 3))


def test_forced_parallel_nests_give_the_one_thread_results(monkeypatch):
    args = (_matrix(190, 180, seed=2), 2)
    monkeypatch.setenv("FLOWGRAD_PARALLEL", "1")
    grad = flowgrad.value_and_grad(smoothing, wrt="A", backend="native")
    value, gradient = grad(*args)
    monkeypatch.setenv("FLOWGRAD_PARALLEL", "0")
    value0, gradient0 = flowgrad.value_and_grad(smoothing, wrt="A", backend="native")(*args)
    assert value == value0
    np.testing.assert_array_equal(gradient, gradient0)
