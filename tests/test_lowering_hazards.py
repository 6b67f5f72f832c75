"""Hazards of lowering array statements to loop nests (run on every backend)."""
import warnings

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


def smoothing_steps(A, n_steps):
    B = A * 0.0
    for t in range(n_steps):
        B[1:-1, 1:-1] = 0.2 * (A[1:-1, 1:-1] + A[:-2, 1:-1] + A[2:, 1:-1] + A[1:-1, :-2] + A[1:-1, 2:])
        A[1:-1, 1:-1] = np.tanh(B[1:-1, 1:-1]) * 0.5 + A[1:-1, 1:-1]   # its destination, element by element
    A[:-1, :] = A[1:, :] * 0.5 + 0.1      # reads ahead of its in-place write: one thread only
    A[1:, :] = A[:-1, :] * 0.9            # reads behind it: a temporary first
    return np.sum(A * A) + np.sum(B * B)


def test_large_nests_split_their_outer_loop_over_threads(backend, monkeypatch):
    monkeypatch.setenv("FLOWGRAD_PARALLEL", "1")
    A = np.random.default_rng(2).uniform(-1, 1, (190, 180))      # above the threshold for threads
    check_forward(smoothing_steps, (A, 3), backend)
    check_grad(smoothing_steps, (A, 3), ("A",), backend=backend)
    if backend == "native":
        import flowgrad
        src = flowgrad.grad(smoothing_steps, wrt=("A",), backend=backend).source(A, 3)
        assert src.startswith("import") and "@_jit_parallel" in src and "numba.prange(" in src
        lines = src.splitlines()
        k = next(i for i, ln in enumerate(lines) if "* 0.5) + 0.1)" in ln)       # the read-ahead
        assert "prange" not in lines[k - 1] + lines[k - 2]
        monkeypatch.delenv("FLOWGRAD_PARALLEL")    # by default: a nest this small stays on one thread
        assert "prange" not in flowgrad.grad(smoothing_steps, wrt=("A",), backend=backend).source(A, 3)


def names_like_numba_versions(x):
    x_1 = np.tanh(x)                 # Numba calls the second version of the copied x "x_1" too
    x[1:-1, 1:-1] = x_1[1:-1, 1:-1] * x[1:-1, 1:-1]
    return np.sum(x * x)


def test_parallel_loops_compile_whatever_the_names(backend, monkeypatch):
    monkeypatch.setenv("FLOWGRAD_PARALLEL", "1")
    A = np.random.default_rng(5).uniform(-1, 1, (200, 180))
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)     # no fallback to one thread
        check_forward(names_like_numba_versions, (A,), backend)
        check_grad(names_like_numba_versions, (A,), ("x",), backend=backend)
    if backend == "native":
        import flowgrad
        assert "numba.prange(" in flowgrad.jit(names_like_numba_versions, backend=backend).source(A)


def gathers_in_one_statement(x, i, j):
    return np.sum(x[i] * x[j]) + np.sum(x[i] * x[i] * 0.5)


def test_several_gathers_read_by_one_statement(backend):
    # each gather is read in place by the same statement; all of them must be
    rng = np.random.default_rng(7)
    args = (rng.uniform(-1, 1, 9), np.array([0, 3, -1, 8, 3]), np.array([2, -9, 5, 5, 0]))
    check_forward(gathers_in_one_statement, args, backend=backend)
    check_grad(gathers_in_one_statement, args, 0, backend=backend)


def scatter_of_own_gather(x, i, j):
    y = x * 1.0
    y[i] = y[j]                      # NumPy reads every y[j] before writing any y[i]
    return np.sum(y * np.arange(4.0))


def scatter_of_own_reversed_view(x, i):
    y = x * 1.0
    y[i] = y[::-1][:3]
    return np.sum(y * np.arange(4.0))


def add_at_of_own_values(x, i):
    y = x * 1.0
    np.add.at(y, i, y[i])           # the values are taken before the (unbuffered) sums
    np.add.at(x, i, x[i] * 2.0)
    return np.sum(y * np.arange(4.0)) + np.sum(x * x)


def mask_scatter_of_own_view(x):
    y = x * 1.0
    y[y > 2.5] = y[:2]
    return np.sum(y * np.arange(4.0))


def rows_by_list(A):
    rows = [0, 2]
    return np.sum(A[[0, 2]] ** 2) + np.sum(A[rows] * A[(0, 2)])


def test_scatters_read_their_own_target_first(backend):
    x, i, j = np.arange(1.0, 5.0), np.array([0, 1, 2]), np.array([1, 0, 1])
    for fn, args in ((scatter_of_own_gather, (x, i, j)), (scatter_of_own_reversed_view, (x, i)),
                     (add_at_of_own_values, (x, np.array([0, 2, 2]))), (mask_scatter_of_own_view, (x,))):
        check_forward(fn, args, backend=backend)
        check_grad(fn, args, 0, backend=backend)


def test_a_list_index_picks_rows(backend):
    args = (np.arange(12.0).reshape(3, 4),)
    check_forward(rows_by_list, args, backend=backend)
    check_grad(rows_by_list, args, 0, backend=backend)


def fills_a_reshaped_fresh_array(x):
    A = np.zeros(12).reshape(3, 4)       # nothing else holds the array reshaped: writing is fine
    A[1, :] = x
    A[:, 0] += 1.0
    return np.sum(A * A)


def test_writes_into_a_reshaped_fresh_array(backend):
    args = (np.arange(1.0, 5.0),)
    check_forward(fills_a_reshaped_fresh_array, args, backend=backend)
    check_grad(fills_a_reshaped_fresh_array, args, 0, backend=backend)


def constant_scatter_into_copy(x, i):
    y = x.copy()
    y[i] = 0.0                           # the adjoint clears g_y[i] and keeps the rest for x
    B = np.copy(x).reshape(2, 3)
    B[:, np.array([2, 0])] = 1.5
    return np.sum(y * y) + np.sum(np.sin(B))


def test_a_call_updating_its_output_reads_it(backend):
    # a copy pass moved such a call's output to the copy's destination, dropping what the
    # output held before (the gradient was uninitialised memory)
    args = (np.arange(1.0, 7.0), np.array([2, 0, 5]))
    check_forward(constant_scatter_into_copy, args, backend=backend)
    check_grad(constant_scatter_into_copy, args, 0, backend=backend)


def writes_through_a_transpose(A):
    T = A.T
    T[:] = np.exp(A)                     # overwritten through a transposed view, restored from the tape
    return np.sum(A * np.arange(4.0).reshape(2, 2))


def test_a_value_restored_through_a_transposed_view(backend):
    args = (np.arange(4.0).reshape(2, 2) * 0.1,)
    check_forward(writes_through_a_transpose, args, backend=backend)
    check_grad(writes_through_a_transpose, args, 0, backend=backend)


def gather_of_a_fresh_array(x, idx):
    t = x[1:7] * 2.0                 # written element by element ...
    u = t[idx]                       # ... and gathered at other positions: two passes, not one
    return np.sum(u * np.arange(6.0)) + np.sum(t[idx] * u)


def gather_into_its_source(x, idx):
    t = x[:6] * 2.0
    t[:] = t[idx]                    # NumPy gathers every element before writing any
    return t


def test_a_gather_reads_its_source_after_the_source_is_written(backend):
    # the native backend fused the copy and the gather into one loop, which read elements of
    # ``t`` not yet written (a silent wrong result)
    x, idx = np.linspace(0.5, 2.0, 10), np.array([5, 0, 3, 1, 2, 4])
    check_forward(gather_of_a_fresh_array, (x, idx), backend=backend)
    check_grad(gather_of_a_fresh_array, (x, idx), backend=backend)
    check_forward(gather_into_its_source, (x, idx), backend=backend)
