"""Hazards of lowering array statements to loop nests (run on every backend)."""
import numpy as np

from oracle import check_forward, check_grad


def self_update_runtime_shape(A):
    s = 0.0
    for i in range(1, A.shape[0]):
        t = A[i, :i] * 2.0           # a temporary whose shape changes every iteration
        t *= t + 0.5                 # whole write that reads its own old value
        s += np.sum(t)
    return s


def fused_neighbours(u, v):
    v += u * 0.5                     # adjacent element-wise statements over one iteration space
    u += v * v
    w = u[1:] - u[:-1]               # reads at shifted positions: must not be fused with a write of u
    u[1:] = w * 2.0
    return np.sum(u * v) + np.sum(w)


def _dirty_heap():
    """Leave non-zero garbage in freed memory, so uninitialised reads show up as wrong values."""
    junk = [np.full(4096 * (k + 1), 1e300) for k in range(32)]
    del junk


def test_self_reading_whole_write_of_runtime_shape(backend):
    A = np.random.default_rng(0).uniform(-1, 1, (7, 7))
    _dirty_heap()
    check_forward(self_update_runtime_shape, (A,), backend)
    _dirty_heap()
    check_grad(self_update_runtime_shape, (A,), ("A",), backend=backend)


def test_adjacent_statements_keep_numpy_semantics(backend):
    rng = np.random.default_rng(1)
    args = (rng.uniform(-1, 1, 9), rng.uniform(-1, 1, 9))
    check_forward(fused_neighbours, args, backend)
    check_grad(fused_neighbours, args, ("u", "v"), backend=backend)
