"""Arrays swept along their last axis stored with it first (``flowgrad/passes/layout.py``).

The pass applies to arrays of a few megabytes; here its size threshold is lowered so that small
arrays exercise it. Oracles: plain NumPy for values, central differences for gradients (every
case on the native backend, whose pipeline runs the pass); the generated source shows whether an
array moved (its new container is named ``<name>_t``).
"""
import re

import numpy as np
import pytest

import flowgrad
from oracle import check_forward, check_grad

pytestmark = pytest.mark.native
pytest.importorskip("numba")


@pytest.fixture(autouse=True)
def small_arrays(monkeypatch):
    from flowgrad.passes import layout
    monkeypatch.setattr(layout, "MIN_BYTES", 0)


def column_sweep(u, w, dtr):
    """A Thomas-like sweep over the last axis, a parameter updated in place, a whole sum."""
    I, J, K = u.shape
    c = np.zeros((I, J, K))
    for k in range(1, K):
        c[:, :, k] = (c[:, :, k - 1] * 0.5 + w[1:, :, k] - w[:-1, :, k - 1]) / (dtr + u[:, :, k] ** 2)
    for k in range(K - 2, -1, -1):
        u[:, :, k] = u[:, :, k + 1] * 0.3 + np.tanh(c[:, :, k])
    return np.sum(u * u) + np.max(c) + np.sum(w[:, :, 2])


def level_stencil(f, coeff):
    """hdiff's shape: 2-D stencils of one level of ``f`` at a time, an output level by level."""
    I, J, K = coeff.shape
    out = np.zeros((I, J, K))
    for k in range(K):
        g = f[:, :, k]
        lap = 4.0 * g[1:-1, 1:-1] - (g[2:, 1:-1] + g[:-2, 1:-1] + g[1:-1, 2:] + g[1:-1, :-2])
        out[:, :, k] = g[1:-1, 1:-1] - coeff[:, :, k] * np.where(lap > 0.0, lap, 0.5 * lap)
    return np.sum(out * out)


def _moved(fn, args, wrt, name):
    return re.search(rf"\b{name}_t\b", flowgrad.grad(fn, wrt=wrt, backend="native").source(*args)) is not None


def test_column_sweep_moves_its_arrays_and_keeps_values_and_gradient():
    rng = np.random.default_rng(0)
    args = (rng.standard_normal((5, 4, 9)), rng.standard_normal((6, 4, 9)), 2.0)
    check_forward(column_sweep, args, "native")
    check_grad(column_sweep, args, wrt=(0, 1, 2), backend="native")
    assert _moved(column_sweep, args, (0, 1, 2), "u") and _moved(column_sweep, args, (0, 1, 2), "w")


def test_level_stencil_and_the_benchmark_kernels():
    rng = np.random.default_rng(1)
    args = (rng.standard_normal((8, 7, 10)), rng.uniform(0.0, 0.2, (6, 5, 10)))
    check_forward(level_stencil, args, "native")
    check_grad(level_stencil, args, wrt=(0, 1), backend="native")
    assert _moved(level_stencil, args, (0, 1), "f") and _moved(level_stencil, args, (0, 1), "coeff")
    from benchmarks.kernels import hdiff, vadv
    for mod, name in ((hdiff, "in_field"), (vadv, "wcon")):
        a = mod.args("test")
        # the test size with the levels made 10 (the pass wants at least a cache line of them)
        a = tuple(np.ascontiguousarray(np.concatenate([x] * 4, axis=-1)[..., :10]) if isinstance(x, np.ndarray)
                  and x.ndim == 3 else x for x in a)
        check_forward(mod.kernel, a, "native")
        check_grad(mod.kernel, a, wrt=mod.WRT, backend="native")
        assert _moved(mod.kernel, a, mod.WRT, name)


def row_and_column(x):
    s = 0.0
    for k in range(x.shape[2]):
        s += np.sum(np.sin(x[:, :, k]))
    return s + np.sum(x[1, :, :] ** 2)          # a read of a whole level of the first axis


def whole_elementwise(x):
    y = x * 2.0                                 # the whole array read in its own order
    for k in range(1, x.shape[2]):
        y[:, :, k] += np.cos(x[:, :, k - 1])
    return np.sum(y[:, 1, :] ** 2)


def summed_with_another(x, y):
    for k in range(1, x.shape[2]):
        x[:, :, k] = x[:, :, k - 1] * 0.5 + np.sin(x[:, :, k])
    return np.sum(x * y)                        # y is read whole only: it stays; so does x


@pytest.mark.parametrize("fn, nargs", [(row_and_column, 1), (whole_elementwise, 1), (summed_with_another, 2)])
def test_arrays_read_otherwise_stay_as_they_are(fn, nargs):
    rng = np.random.default_rng(2)
    args = tuple(rng.standard_normal((4, 5, 9)) for _ in range(nargs))
    check_forward(fn, args, "native")
    check_grad(fn, args, wrt=tuple(range(nargs)), backend="native")
    assert not _moved(fn, args, tuple(range(nargs)), "x")


def test_short_last_axis_stays():
    rng = np.random.default_rng(3)
    args = (rng.standard_normal((5, 4, 6)), rng.standard_normal((6, 4, 6)), 2.0)
    assert not _moved(column_sweep, args, (0, 1, 2), "u")
    check_grad(column_sweep, args, wrt=(0, 1, 2), backend="native")


def column_steps(u, n_steps):
    """Columns of a small array swept in a time loop (adi's shape): a recurrence along the last axis."""
    for t in range(n_steps):
        for j in range(1, u.shape[1]):
            u[:, j] = 0.5 * u[:, j - 1] + np.tanh(u[:, j])
    return np.sum(u * u)


def one_column_pass(u):
    for j in range(1, u.shape[1]):
        u[:, j] = 0.5 * u[:, j - 1] + np.tanh(u[:, j])
    return np.sum(u * u)


def test_small_arrays_move_where_loops_sweep_their_columns_again_and_again(monkeypatch):
    # with the pass's own size threshold: an array far below it moves when its columns are swept
    # inside two loops (each pass's copy is paid once); one pass over them keeps it in place
    from flowgrad.passes import layout
    monkeypatch.setattr(layout, "MIN_BYTES", 3 << 20)
    from benchmarks.kernels import gramschmidt
    rng = np.random.default_rng(4)
    args = (rng.standard_normal((6, 9)), 3)
    check_forward(column_steps, args, "native")
    check_grad(column_steps, args, wrt=0, backend="native")
    assert _moved(column_steps, args, 0, "u")
    assert not _moved(one_column_pass, args[:1], 0, "u")
    check_grad(one_column_pass, args[:1], wrt=0, backend="native")
    a = gramschmidt.args("test")
    check_forward(gramschmidt.kernel, a, "native")
    check_grad(gramschmidt.kernel, a, wrt=gramschmidt.WRT, backend="native")
    assert _moved(gramschmidt.kernel, a, gramschmidt.WRT, "A")
