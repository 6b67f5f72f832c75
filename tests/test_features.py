"""One small program per language feature, checked against the oracles.

Each program below is ordinary NumPy code, written the way a user would. Every case is
checked twice: the gradient against finite differences (``check_grad``) and the forward
program of ``flowgrad.jit`` against plain NumPy (``check_forward``). Inputs are small,
float64, drawn from seeded generators, and kept away from kinks (abs at 0, ties of max,
branch thresholds) so that finite differences are meaningful.

The programs live at module level: flowgrad captures them from this file's source.
"""

import math

import numpy as np
import pytest

from oracle import check_forward, check_grad

# ---------------------------------------------------------------------------------------
# Input makers
# ---------------------------------------------------------------------------------------


def U(shape, lo=-1.0, hi=1.0, seed=0):
    """Uniform float64 array (or float for shape ())."""
    out = np.random.default_rng(seed).uniform(lo, hi, shape)
    return float(out) if shape == () else out


def away(shape, points=(0.0,), gap=0.1, lo=-1.0, hi=1.0, seed=0):
    """Uniform array with every entry at least `gap` from each of `points` (kinks, thresholds)."""
    rng = np.random.default_rng(seed)
    out = rng.uniform(lo, hi, shape)
    bad = np.zeros(out.shape, dtype=bool)
    for _ in range(1000):
        bad = np.zeros(out.shape, dtype=bool)
        for p in points:
            bad |= np.abs(out - p) < gap
        if not bad.any():
            return out
        out[bad] = rng.uniform(lo, hi, int(bad.sum()))
    raise RuntimeError("away(): could not sample")


def apart(shape, gap=0.1, x_away=(), y_away=(), seed=0):
    """Two uniform arrays x, y with |x - y| >= gap entrywise (ties of max/min, x > y), and
    x, y at least `gap` from the thresholds in `x_away`, `y_away`."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, shape)
    y = rng.uniform(-1.0, 1.0, shape)
    for _ in range(1000):
        bad = np.abs(x - y) < gap
        for p in x_away:
            bad |= np.abs(x - p) < gap
        for p in y_away:
            bad |= np.abs(y - p) < gap
        if not bad.any():
            return x, y
        x[bad] = rng.uniform(-1.0, 1.0, int(bad.sum()))
        y[bad] = rng.uniform(-1.0, 1.0, int(bad.sum()))
    raise RuntimeError("apart(): could not sample")


def spd(n, seed=0):
    """Well-conditioned matrix with a dominant diagonal."""
    return 3.0 * np.eye(n) + 0.3 * U((n, n), seed=seed)


def lower(n, seed=0):
    return np.tril(U((n, n), seed=seed)) * 0.5 + 2.0 * np.eye(n)


def IDX(*values):
    return np.array(values, dtype=np.int64)


CASES = []


def case(fn, make, wrt=0, tag=None):
    """Register program `fn` with an argument maker and the arguments to differentiate."""
    name = fn.__name__ if tag is None else f"{fn.__name__}-{tag}"
    CASES.append(pytest.param(fn, make, wrt, id=name))


# ---------------------------------------------------------------------------------------
# Arithmetic, comparisons and broadcasting
# ---------------------------------------------------------------------------------------


def arith_mix(A, B):
    C = A * B + A / (1.0 + B * B) - 2.0 * A + B ** 2
    D = -C + 3.0 - (1.5 - A) * 0.5
    return np.sum(D * D) / A.size


def broadcast_row_col(a, b):
    M = a * b + a - b / (2.0 + a)
    return np.sum(np.sin(M) * M)


def broadcast_matrix_vector(A, v):
    return np.sum((A - v) ** 2 * v) + np.sum(A / (2.0 + v))


def scalar_on_left(x):
    return np.sum(2.0 - x + 1.0 / (2.0 + x * x) + 3.0 * x ** 3 + 2.0 ** x - 4 * x)


def power_ops(x, y):
    return np.sum(x ** y + x ** 0.5 + np.power(x, 3) + np.power(x, y) * y ** 2)


def comparison_masks(x, y):
    above = x > y
    small = x <= 0.2
    return np.sum(above * x ** 2 + small * np.sin(y) + (x >= 0.0) * x * y + (y < -0.3) * y ** 3)


def comparison_broadcast(x, y):
    M = x[:, None] > y[None, :]
    return np.sum(M * np.outer(x, y) ** 2)


case(arith_mix, lambda: (U((3, 4)), U((3, 4), seed=1)), ("A", "B"))
case(broadcast_row_col, lambda: (U((3, 1)), U((1, 4), seed=1)), ("a", "b"))
case(broadcast_matrix_vector, lambda: (U((3, 4)), U((4,), 0.5, 1.5, seed=1)), ("A", "v"))
case(scalar_on_left, lambda: (U((5,)),))
case(power_ops, lambda: (U((5,), 0.5, 2.0), U((5,), seed=1)), ("x", "y"))
case(comparison_masks, lambda: apart((6,), x_away=(0.0, 0.2), y_away=(-0.3,)), ("x", "y"))
# Every pair (x[i], y[j]) is compared: keep all of them apart.
case(comparison_broadcast, lambda: (np.array([0.1, 0.5, -0.7, 0.9]), np.array([0.3, -0.2, 0.75, -0.9])), ("x", "y"))

# ---------------------------------------------------------------------------------------
# Elementwise functions
# ---------------------------------------------------------------------------------------


def ew_exp(x):
    return np.sum(np.exp(x) * np.cos(x))


def ew_log(x):
    return np.sum(np.log(x) * x)


def ew_log1p(x):
    return np.sum(np.log1p(x) * x)


def ew_sqrt(x):
    return np.sum(np.sqrt(x) * np.sin(x))


def ew_sin(x):
    return np.sum(np.sin(x) * x)


def ew_cos(x):
    return np.sum(np.cos(x) * x ** 2)


def ew_tan(x):
    return np.sum(np.tan(x) * x)


def ew_tanh(x):
    return np.sum(np.tanh(x) * np.exp(x))


def ew_arctan2(y, x):
    return np.sum(np.arctan2(y, x) * y)


def ew_abs(x):
    return np.sum(np.abs(x) * np.sin(x))


def ew_power(x, p):
    return np.sum(np.power(x, p) + np.power(x, 2.5))


def ew_maximum(x, y):
    return np.sum(np.maximum(x, y) ** 2 + np.maximum(x, 0.1) * y)


def ew_minimum(x, y):
    return np.sum(np.minimum(x, y) * np.exp(y) + np.minimum(0.1, x) * x)


def ew_where(x, y):
    return np.sum(np.where(x > y, x * y, x - y) + np.where(x > 0.0, x, 0.0) ** 2)


def ew_clip(x):
    return np.sum(np.clip(x, -0.5, 0.5) * np.cos(x))


def ew_where_guards(x):
    # the branch not taken is NaN or inf there: its gradient is 0, not 0 * inf
    return np.sum(np.where(x > -0.5, np.sqrt(x + 0.5), 0.0)) + np.sum(np.where(np.abs(x) > 0.5, 1.0 / x, x))


def ew_round_decimals(x):
    return np.sum(np.round(x, 1) * x) + np.sum(x.round(2) * x) + np.sum(np.round(x) * x)


def ew_float_mod(x, y):
    return np.sum(x * np.mod(x, 0.7)) + np.sum((x % y) * y) + (x[0] % 0.3) * x[1]


case(ew_exp, lambda: (U((5,)),))
case(ew_log, lambda: (U((5,), 0.5, 2.0),))
case(ew_log1p, lambda: (U((5,), -0.5, 1.0),))
case(ew_sqrt, lambda: (U((5,), 0.5, 2.0),))
case(ew_sin, lambda: (U((2, 3)),))
case(ew_cos, lambda: (U((2, 3)),))
case(ew_tan, lambda: (U((5,)),))
case(ew_tanh, lambda: (U((5,)),))
case(ew_arctan2, lambda: (away((5,)), away((5,), seed=1)), ("y", "x"))  # clear of the branch cut
case(ew_abs, lambda: (away((6,)),))
case(ew_power, lambda: (U((5,), 0.5, 2.0), U((5,), seed=1)), ("x", "p"))
case(ew_maximum, lambda: apart((6,), x_away=(0.1,), seed=3), ("x", "y"))
case(ew_minimum, lambda: apart((6,), x_away=(0.1,), seed=4), ("x", "y"))
case(ew_where, lambda: apart((6,), x_away=(0.0,), seed=5), ("x", "y"))
case(ew_clip, lambda: (away((8,), (-0.5, 0.5)),))
case(ew_round_decimals, lambda: (np.array([-1.013, -0.562, 0.212, 0.4417, 1.1321, 2.0013, 12.3412]),))
case(ew_where_guards, lambda: (np.array([-1.0, 0.0, 0.25, 0.3, 4.0, -0.2]),))
case(ew_float_mod, lambda: (np.array([-1.13, -0.52, 0.21, 0.45, 1.12, 2.03]),
                            np.array([0.7, 0.33, -0.9, 0.6, 0.41, 0.8])), ("x", "y"))

# ---------------------------------------------------------------------------------------
# Reductions: function and method forms, axis and keepdims
# ---------------------------------------------------------------------------------------


def red_sum_axis0(A):
    r = np.sum(A, axis=0)
    return np.sum(np.sin(r) * r)


def red_sum_method_axis1(A):
    return np.sum(np.exp(A.sum(axis=1)))


def red_sum_keepdims(A):
    return np.sum(A / (1.0 + np.sum(A * A, axis=1, keepdims=True)))


def red_sum_negative_axis(T):
    return (T.sum(axis=-1) ** 2).sum() + np.sum(T, axis=(0, 2)).sum() ** 2


def red_mean(A):
    centered = A - A.mean(axis=1, keepdims=True)
    return np.mean(centered ** 2) + np.sum(np.mean(A, axis=0) ** 3) + A.mean() ** 2


def red_max(A):
    return np.max(A) ** 2 + np.sum(A.max(axis=0) * A[0])


def red_max_keepdims_softmax(A):
    m = np.max(A, axis=1, keepdims=True)
    e = np.exp(A - m)
    p = e / e.sum(axis=1, keepdims=True)
    return np.sum(p * A)


def red_min(A):
    return np.sum(np.min(A, axis=1) ** 2) + A.min() * 3.0 + np.sum(A - A.min(axis=0, keepdims=True))


def red_arg_extremes(A, B):
    # positions as weights: their gradient is zero, the weights' is not
    return np.sum(A[:, 0] * np.argmax(A, axis=1)) + np.sum(A[0, :] * np.argmin(A, axis=0)) + \
        np.sum(B[:, 0] * np.argmax(B, axis=1)) + np.argmin(A[1]) * A[2, 2] + np.argmax(A) * A[0, 1]


def red_prod(A):
    return np.sum(np.prod(A, axis=0)) + A.prod() + np.sum(A.prod(axis=1, keepdims=True) * A)


case(red_sum_axis0, lambda: (U((3, 4)),))
case(red_sum_method_axis1, lambda: (U((3, 4)),))
case(red_sum_keepdims, lambda: (U((3, 4)),))
case(red_sum_negative_axis, lambda: (U((2, 3, 4)),))
case(red_mean, lambda: (U((3, 4)),))
case(red_max, lambda: (U((3, 4)),))
case(red_max_keepdims_softmax, lambda: (U((3, 4), -2, 2),))
case(red_min, lambda: (U((3, 4)),))
case(red_prod, lambda: (U((3, 4), 0.5, 1.5),))
case(red_arg_extremes, lambda: (U((4, 5)), U((2, 3, 4), seed=1)), ("A", "B"))
case(red_prod, lambda: (np.array([[0.0, 1.2, 0.7, 0.0], [0.9, 0.0, 1.1, 0.0], [1.3, 0.8, 0.6, 1.4]]),),
     tag="zeros")

# ---------------------------------------------------------------------------------------
# Linear algebra and array construction / reshaping
# ---------------------------------------------------------------------------------------


def la_matmul_operator(A, B):
    return np.sum(np.tanh(A @ B)) + np.sum((A @ B[:, 0]) ** 2)


def la_vector_matmul(x, A):
    return np.sum((x @ A) ** 2) + x @ A @ A.T @ x


def la_vector_batched_matmul(x, A, B):
    return np.sum((x @ A) ** 2) + np.sum(np.tanh(x[:3] @ B))


def la_dot(A, x, y):
    return np.sum(np.dot(A, x) ** 2) + np.dot(x, y) ** 2 + np.dot(x, x)


def la_matmul_function(A, B):
    return np.sum(np.matmul(A, B) * np.matmul(A, B))


def la_outer(x, y, W):
    return np.sum(np.outer(x, y) * W) + np.sum(np.outer(x, x) ** 2)


def la_einsum_matmul(A, B):
    return np.sum(np.einsum("ij,jk->ik", A, B) ** 2)


def la_einsum_reductions(A, x):
    return np.einsum("ij,ij->", A, A) + np.einsum("i,ij,j->", x, A, x) + np.einsum("ii->", A) ** 2


def la_transpose(A, B):
    return np.sum(A.T @ A) + np.sum(np.transpose(A) * B) + np.sum(A.transpose() ** 3)


def la_transpose_axes(T):
    return np.sum(T.transpose(2, 0, 1)[0] ** 2) + np.sum(np.transpose(T, (1, 0, 2))[1] * T[:, 1])


def la_reshape(A):
    a = A.reshape(2, 6)
    b = A.reshape(-1)
    c = np.reshape(A, (4, 3))
    d = A.reshape((3, 2, 2))
    return np.sum(a[1] * a[0]) + np.sum(b[::5] ** 2) + np.sum(c[:, 1] ** 3) + np.sum(d[:, 1, :] * d[:, 0, :])


def la_ravel(A):
    return np.sum(A.ravel()[2:] * A.ravel()[:-2]) + np.sum(np.ravel(A.T)[:4] ** 2)


def la_newaxis(x, y, A):
    return np.sum(x[:, np.newaxis] * y[np.newaxis, :] * A) + np.sum((y[None, :] - A) ** 2) + np.sum(A[:, :, None] * y)


def la_stack(x, y):
    S = np.stack([x, y])
    T = np.stack((x, y, x * y), axis=1)
    return np.sum(S[0] * S[1] ** 2) + np.sum(T @ T.T)


def la_concatenate(A, B, x, y):
    v = np.concatenate([x, y])
    M = np.concatenate((A, B), axis=1)
    N = np.concatenate([A, B], axis=0)
    return np.sum(v[1:] * v[:-1]) + np.sum(M ** 2 * M[0]) + np.sum(N[2:5] ** 3)


def la_flip(x, A):
    return np.sum(np.flip(x) * x ** 2) + np.sum(np.flip(A, axis=1) * A) + np.sum(np.flip(A, axis=0)[0] * A[0] ** 2)


def la_roll(x, A):
    return np.sum(np.roll(x, 1) * x ** 2) + np.sum(np.roll(x, -2) * x) + np.sum(np.roll(A, 1, axis=1) * A ** 2)


def la_triangular(A):
    return np.sum(np.triu(A) ** 2 * A) + np.sum(np.tril(A, -1) * A ** 3) + np.sum(np.triu(A, k=1) * np.tril(A).T)


def la_cumsum(x, A):
    return np.sum(np.cumsum(x) ** 2) + np.sum(np.cumsum(A, axis=0) * A) + np.sum(np.sin(A.cumsum(axis=1)))


def la_copy(A):
    B = A.copy()
    B[0] = 0.0
    B *= A
    C = np.copy(A)
    C[:, 1] = 1.0
    return np.sum(B ** 2) + np.sum(C * A)


def la_creation(A, x):
    n, m = A.shape
    Z = np.zeros((n, m))
    Z[1:] = A[:-1] ** 2
    E = np.empty(x.shape)
    E[:] = np.sin(x)
    ones = np.ones(m)
    return np.sum(Z * A) + np.sum(E * x) + np.sum(A @ ones) ** 2 + np.sum(np.ones((2, m)) * A[0])


def la_creation_like(A):
    Z = np.zeros_like(A)
    Z[:, 0] = A[:, 1] ** 2
    ones = np.ones_like(A)
    E = np.empty_like(A)
    E[...] = A * 2.0
    return np.sum(Z * A) + np.sum((ones - A) ** 2) + np.sum(E ** 3)


def la_eye(A):
    n = A.shape[0]
    return np.sum((A + np.eye(n)) @ A) + np.sum(np.eye(n) * A ** 2)


def la_norm(x, A):
    return np.linalg.norm(x) ** 3 + np.linalg.norm(A) * np.linalg.norm(x * A[0])


def la_solve(A, b, B):
    x = np.linalg.solve(A, b)
    X = np.linalg.solve(A, B)
    return np.sum(x ** 2) + np.sum(X * B)


case(la_matmul_operator, lambda: (U((3, 4)), U((4, 2), seed=1)), ("A", "B"))
case(la_vector_matmul, lambda: (U((3,)), U((3, 4), seed=1)), ("x", "A"))
case(la_vector_batched_matmul, lambda: (U((3,)), U((2, 3, 4), seed=1), U((2, 2, 3, 2), seed=2)), ("x", "A", "B"))
case(la_dot, lambda: (U((3, 4)), U((4,), seed=1), U((4,), seed=2)), ("A", "x", "y"))
case(la_matmul_function, lambda: (U((2, 3)), U((3, 4), seed=1)), ("A", "B"))
case(la_outer, lambda: (U((3,)), U((4,), seed=1), U((3, 4), seed=2)), ("x", "y"))
case(la_einsum_matmul, lambda: (U((2, 3)), U((3, 4), seed=1)), ("A", "B"))
case(la_einsum_reductions, lambda: (U((3, 3)), U((3,), seed=1)), ("A", "x"))
case(la_transpose, lambda: (U((3, 4)), U((4, 3), seed=1)), ("A", "B"))
case(la_transpose_axes, lambda: (U((2, 3, 4)),))
case(la_reshape, lambda: (U((3, 4)),))
case(la_ravel, lambda: (U((3, 4)),))
case(la_newaxis, lambda: (U((3,)), U((4,), seed=1), U((3, 4), seed=2)), ("x", "y", "A"))
case(la_stack, lambda: (U((3,)), U((3,), seed=1)), ("x", "y"))
case(la_concatenate, lambda: (U((2, 3)), U((2, 3), seed=1), U((2,), seed=2), U((3,), seed=3)), ("A", "B", "x", "y"))
case(la_flip, lambda: (U((5,)), U((3, 4), seed=1)), ("x", "A"))
case(la_roll, lambda: (U((5,)), U((3, 4), seed=1)), ("x", "A"))
case(la_triangular, lambda: (U((4, 4)),))
case(la_cumsum, lambda: (U((5,)), U((3, 4), seed=1)), ("x", "A"))
case(la_copy, lambda: (U((3, 4)),))
case(la_creation, lambda: (U((3, 4)), U((5,), seed=1)), ("A", "x"))
case(la_creation_like, lambda: (U((3, 4)),))
case(la_eye, lambda: (U((3, 3)),))
case(la_norm, lambda: (U((4,)), U((3, 4), seed=1)), ("x", "A"))
case(la_solve, lambda: (spd(3), U((3,), seed=1), U((3, 2), seed=2)), ("A", "b", "B"))

# ---------------------------------------------------------------------------------------
# Indexing: slices, integers, gathers, scatters, boolean masks
# ---------------------------------------------------------------------------------------


def ix_slices_1d(x):
    return (
        np.sum(x[1:-1] * x[:-2]) + np.sum(x[::2] ** 2) + np.sum(x[-3:] * x[:3])
        + np.sum(x[::-1] * x ** 2) + np.sum(x[6:1:-2] ** 3)
    )


def ix_slices_2d(A):
    return np.sum(A[1:, :-1] * A[:-1, 1:]) + np.sum(A[::-1, 1::2] ** 2 * A[:, 3::-2]) + np.sum(A[-2:, ::-2] ** 3)


def ix_integers(A, x):
    return A[1, 2] * x[-1] + np.sum(A[-1] * A[0]) + np.sum(A[:, -2] ** 2) + x[0] ** 3 + A[2][3] * A[-1, -1]


def ix_gather(x, idx):
    g = x[idx]
    return np.sum(g ** 2 * np.cos(g))


def ix_gather_rows(A, idx):
    return np.sum(np.tanh(A[idx]) * A[idx] ** 2)


def ix_gather_pairs(A, i, j):
    return np.sum(A[i, j] ** 2 * A[j, i]) + np.sum(A[:, j] ** 3)


def ix_scatter_add(x, v, idx):
    y = x.copy()
    y[idx] += v * v
    return np.sum(y ** 3)


def ix_scatter_add_repeated(x, v, idx):
    # NumPy: with repeated indices the last write wins; it does not accumulate.
    y = x.copy()
    y[idx] += v * v
    y[idx] -= np.sin(v)
    return np.sum(y ** 3)


def ix_scatter_set_repeated(x, v, idx):
    y = x * 2.0
    y[idx] = v ** 2
    return np.sum(y * x)


def ix_add_at(x, v, idx):
    y = x.copy()
    np.add.at(y, idx, v * v)
    return np.sum(np.sin(y) * y)


def ix_add_at_rows(A, V, idx):
    B = np.zeros_like(A)
    np.add.at(B, idx, V)
    return np.sum(B ** 2 * A)


def ix_mask_read(x, y):
    return np.sum(x[x > 0.1] ** 2) + np.sum(x[x < -0.2] * 3.0) + np.sum(y[x > 0.0] * x[x > 0.0])


def ix_mask_write_set(x):
    y = x * 2.0
    y[y < 0.0] = 0.0
    return np.sum(y ** 2 + y * x)


def ix_mask_write_inplace(x, y):
    z = x.copy()
    m = z > 0.3
    z[m] *= y[m]
    z[x <= 0.3] -= 1.0
    return np.sum(z ** 3)


def ix_mask_write_values(A, B):
    C = np.zeros_like(A)
    m = A > B
    C[m] = A[m] * B[m]
    C[A <= B] = np.sin(B[A <= B])
    return np.sum(C * A)


case(ix_slices_1d, lambda: (U((8,)),))
case(ix_slices_2d, lambda: (U((4, 5)),))
case(ix_integers, lambda: (U((4, 5)), U((3,), seed=1)), ("A", "x"))
case(ix_gather, lambda: (U((6,)), IDX(0, 2, 2, 5, 1, 2, -1)))
case(ix_gather_rows, lambda: (U((4, 3)), IDX(3, 0, 3, 1)))
case(ix_gather_pairs, lambda: (U((4, 4)), IDX(0, 1, 1, 3), IDX(2, 2, 0, 3)))
case(ix_scatter_add, lambda: (U((6,)), U((3,), seed=1), IDX(4, 0, 2)), ("x", "v"))
case(ix_scatter_add_repeated, lambda: (U((6,)), U((5,), seed=1), IDX(1, 3, 1, 1, 4)), ("x", "v"))
case(ix_scatter_set_repeated, lambda: (U((6,)), U((4,), seed=1), IDX(2, 2, 0, 2)), ("x", "v"))
case(ix_add_at, lambda: (U((6,)), U((5,), seed=1), IDX(1, 3, 1, 1, 4)), ("x", "v"))
case(ix_add_at_rows, lambda: (U((4, 3)), U((5, 3), seed=1), IDX(0, 2, 0, 3, 0)), ("A", "V"))
case(ix_mask_read, lambda: (away((8,), (0.1, -0.2, 0.0), gap=0.05), U((8,), seed=1)), ("x", "y"))
case(ix_mask_write_set, lambda: (away((8,)),))
case(ix_mask_write_inplace, lambda: (away((8,), (0.3,)), U((8,), seed=1)), ("x", "y"))
case(ix_mask_write_values, lambda: apart((3, 4), seed=1), ("A", "B"))

# ---------------------------------------------------------------------------------------
# In-place updates, views, overlapping slice assignment
# ---------------------------------------------------------------------------------------


def ip_slices(x, y):
    z = x.copy()
    z[1:4] = y[:3] * 2.0
    z[2:6] += y[2:6] ** 2
    z[::2] -= 0.5 * y[1::2]
    z[-3:] *= y[:3]
    z[:3] /= 2.0 + y[-3:]
    return np.sum(z ** 2 * x)


def ip_whole(A, B):
    C = A * 1.0
    C += B
    C *= A
    C -= 0.5
    C /= 1.0 + B * B
    C = C + A
    return np.sum(C ** 2)


def ip_elements(x):
    z = x.copy()
    z[0] = z[1] * z[2]
    z[3] += z[0]
    z[-1] *= z[3]
    z[2] /= 2.0 + z[-1] ** 2
    z[1] -= z[2]
    return np.sum(z * x)


def ip_mutates_argument(A, B):
    A *= 2.0
    A[0] += B[0]
    A[1:, 1] = B[1:, 1] ** 2
    B[:, 0] = 0.0
    return np.sum(A ** 3) + np.sum(B * A)


def ip_overlapping_ufunc(x):
    z = x.copy()
    z[1:] += z[:-1]
    z[:-2] *= z[2:]
    return np.sum(z * z * x)


def view_write_through(A, x):
    B = A.copy()
    v = B[1:-1]
    v *= x
    v[0] = v[1] + x[2]
    return np.sum(B ** 2 * A)


def view_of_view(A, x):
    B = A * 1.0
    v = B[1:]
    w = v[::3]
    w += x ** 2
    w[1] *= 3.0
    return np.sum(np.sin(B) * A)


def view_row_and_transpose(A, x):
    B = A.copy()
    r = B[1]
    r += x[:4] ** 2
    Bt = B.T
    Bt[0] = x[:3] * 2.0
    Bt[1:, 2] *= x[1:]
    return np.sum(B ** 2 * A) + np.sum(r)


def view_sees_later_writes(A):
    B = A.copy()
    v = B[::2]
    B[0] = 10.0 * A[1]
    B[2:4] = A[:2] ** 2
    return np.sum(v * v * A[::2])


def view_before_loop(u0, n):
    u = u0.copy()
    inner = u[1:-1]
    for t in range(n):
        inner[:] = inner + 0.2 * (u[2:] - 2.0 * inner + u[:-2]) + 0.01 * inner ** 2
    return np.sum(u ** 2 * u0)


def overlap_shift_right(u0):
    u = u0.copy()
    u[1:] = u[:-1] * 2.0
    return np.sum(u * u0 ** 2)


def overlap_reverse(x0):
    x = x0 * 1.0
    x[::-1] = x
    return np.sum(x * x0 ** 2)


def overlap_shift_left(u0):
    u = u0 + 0.0
    u[:-1] = u[1:] - u[:-1] * u[1:]
    return np.sum(u ** 2 * u0)


def overlap_smoothing(u0):
    u = u0.copy()
    for k in range(3):
        u[1:-1] = 0.5 * (u[:-2] + u[2:]) + 0.1 * u[1:-1] ** 2
    return np.sum(u ** 2 * u0)


case(ip_slices, lambda: (U((8,)), U((8,), 0.5, 1.5, seed=1)), ("x", "y"))
case(ip_whole, lambda: (U((3, 4)), U((3, 4), seed=1)), ("A", "B"))
case(ip_elements, lambda: (U((6,)),))
case(ip_mutates_argument, lambda: (U((3, 4)), U((3, 4), seed=1)), ("A", "B"))
case(ip_overlapping_ufunc, lambda: (U((6,)),))
case(view_write_through, lambda: (U((5,)), U((3,), seed=1)), ("A", "x"))
case(view_of_view, lambda: (U((9,)), U((3,), seed=1)), ("A", "x"))
case(view_row_and_transpose, lambda: (U((3, 4)), U((4,), seed=1)), ("A", "x"))
case(view_sees_later_writes, lambda: (U((6,)),))
case(view_before_loop, lambda: (U((7,)), 4))
case(overlap_shift_right, lambda: (U((6,)),))
case(overlap_reverse, lambda: (U((6,)),))
case(overlap_shift_left, lambda: (U((6,)),))
case(overlap_smoothing, lambda: (U((7,)),))

# ---------------------------------------------------------------------------------------
# Tuple assignment, swaps, scalars and accumulators
# ---------------------------------------------------------------------------------------


def swap_in_time_loop(u0, v0, n):
    u = u0.copy()
    v = v0.copy()
    for t in range(n):
        u, v = v, u + 0.5 * np.sin(v)
    return np.sum(u * v ** 2)


def double_buffer_stencil(u0, n):
    old = u0.copy()
    new = np.empty_like(u0)
    new[0] = old[0]
    new[-1] = old[-1]
    for t in range(n):
        new[1:-1] = old[1:-1] + 0.25 * (old[2:] - 2.0 * old[1:-1] + old[:-2]) - 0.05 * old[1:-1] ** 3
        old, new = new, old
    return np.sum(old ** 2 * u0)


def scalar_swap(x):
    a = x[0]
    b = x[1]
    for i in range(4):
        a, b = b, a * 0.5 + b * b * 0.3
    return a * b + a


def int_accumulator(x):
    s = 0
    for i in range(len(x)):
        s += x[i] * x[i] * (i + 1)
    return s


def int_accumulator_assign(x, n):
    total = 0
    count = 0
    for i in range(n):
        total = total + np.sum(np.sin(x) * i)
        count += 1
    return total / count + total * total


def scalar_chain(x):
    a = x[0]
    b = 2.0 * a
    c = b * b + x[1]
    d = c / (1.0 + a * a)
    d -= b
    d *= x[2]
    return d + np.sum(x) * c


def float_scalar_argument(x, alpha):
    return alpha * np.sum(x ** 2) + alpha ** 2 * x[0] + np.sum(np.exp(alpha * x))


case(swap_in_time_loop, lambda: (U((4,)), U((4,), seed=1), 3), ("u0", "v0"))
case(double_buffer_stencil, lambda: (U((7,)), 3))
case(double_buffer_stencil, lambda: (U((7,)), 4), tag="even")
case(scalar_swap, lambda: (U((3,)),))
case(int_accumulator, lambda: (U((5,)),))
case(int_accumulator_assign, lambda: (U((4,)), 3))
case(scalar_chain, lambda: (U((4,)),))
case(float_scalar_argument, lambda: (U((4,)), 0.7), ("x", "alpha"))

# ---------------------------------------------------------------------------------------
# for loops: bounds, steps, empty ranges
# ---------------------------------------------------------------------------------------


def for_triangular(L, b):
    n = b.shape[0]
    x = np.zeros(n)
    for i in range(n):
        s = b[i]
        for j in range(i):
            s -= L[i, j] * x[j]
        x[i] = s / L[i, i]
    return np.sum(x ** 2)


def for_negative_step(R, b):
    n = len(b)
    x = np.zeros(n)
    for i in range(n - 1, -1, -1):
        s = b[i]
        for j in range(i + 1, n):
            s = s - R[i, j] * x[j]
        x[i] = s / R[i, i]
    return np.sum(x ** 3)


def for_empty_ranges(x, n):
    s = np.sum(x ** 2)
    for i in range(0):
        s = s * 100.0
    for i in range(3, 3):
        s = s * 100.0
    for i in range(5, 2):
        s = s * 100.0
    for i in range(2, 5, -1):
        s = s * 100.0
    for i in range(n, n):
        s = s * 100.0
    for i in range(len(x), 0):
        s = s + x[0] * 100.0
    return s * np.sum(x)


def for_strides(x):
    s = 0.0
    for i in range(1, len(x), 2):
        s += x[i] * x[i - 1]
    for i in range(len(x) - 1, 0, -3):
        s += x[i] ** 3
    return s


def for_bounds_from_args(x, lo, hi, step):
    s = x[0]
    for i in range(lo, hi, step):
        s = s * x[i] + np.sin(x[i - 1])
    return s


def for_loop_variable_after_loop(x):
    s = 0.0
    for i in range(len(x) - 1):
        s += x[i] ** 2
    return s * x[i] + x[i + 1]


def for_step_count(x, n):
    y = x.copy()
    for t in range(n):
        y = y + 0.1 * np.sin(y) * x
    return np.sum(y ** 2)


case(for_triangular, lambda: (lower(4), U((4,), seed=1)), ("L", "b"))
case(for_negative_step, lambda: (lower(4).T.copy(), U((4,), seed=1)), ("R", "b"))
case(for_empty_ranges, lambda: (U((4,)), 2))
case(for_strides, lambda: (U((8,)),))
case(for_bounds_from_args, lambda: (U((8,)), 2, 7, 2))
case(for_bounds_from_args, lambda: (U((8,)), 6, 1, -1), tag="backwards")
case(for_loop_variable_after_loop, lambda: (U((5,)),))
case(for_step_count, lambda: (U((4,)), 3))

# ---------------------------------------------------------------------------------------
# while loops, break, continue
# ---------------------------------------------------------------------------------------


def while_newton_sqrt(a):
    y = a.copy()
    while np.max(np.abs(y * y - a)) > 1e-13 * np.max(a):
        y = 0.5 * (y + a / y)
    return np.sum(y * a)


def while_newton_scalar(x):
    a = np.sum(x * x) + 1.0
    y = a
    while np.abs(y * y - a) > 1e-13 * a:
        y = 0.5 * (y + a / y)
    return y * x[0]


def while_halving(x):
    y = x.copy()
    s = np.sum(y * y)
    while s > 1e-3:
        y = y * 0.5 + 0.01 * np.sin(y)
        s = np.sum(y * y)
    return np.sum(y) + s


def while_counter(x, n):
    k = 0
    y = x.copy()
    while k < n:
        y = np.cos(y) * x
        k += 1
    return np.sum(y)


def for_break(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] < -0.5:
            break
        s += x[i] ** 2 * (i + 1)
    return s


def for_continue(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] < 0.0:
            continue
        s += np.sin(x[i]) * x[i]
    return s


def while_true_break(x):
    y = x.copy()
    k = 0
    while True:
        y = 0.5 * y + 0.1 * np.tanh(y)
        k += 1
        if k >= 6:
            break
        if np.sum(y * y) < 0.01:
            break
    return np.sum(y) * k


def while_continue(x):
    i = 0
    s = 0.0
    while i < len(x):
        i += 1
        if x[i - 1] > 0.3:
            continue
        s += x[i - 1] ** 3
    return s


def nested_break_inner(A):
    s = 0.0
    for i in range(A.shape[0]):
        for j in range(A.shape[1]):
            if A[i, j] < -0.4:
                break
            s += A[i, j] * (j + 1)
        s = s * 1.1
    return s


def nested_continue_outer(A):
    s = 0.0
    for i in range(A.shape[0]):
        if A[i, 0] > 0.5:
            continue
        for j in range(A.shape[1]):
            if A[i, j] < 0.0:
                continue
            s += A[i, j] ** 2
    return s


case(while_newton_sqrt, lambda: (U((5,), 0.5, 3.0),))
case(while_newton_scalar, lambda: (U((3,)),))
case(while_halving, lambda: (U((5,)),))
case(while_counter, lambda: (U((4,)), 3))
case(for_break, lambda: (np.array([0.3, -0.2, 0.9, -0.8, 0.5, 0.1]),), tag="breaks")
case(for_break, lambda: (np.array([0.3, -0.2, 0.9, 0.4]),), tag="runs_through")
case(for_continue, lambda: (away((7,)),))
case(while_true_break, lambda: (U((4,), -0.5, 0.5),), tag="converges")
case(while_true_break, lambda: (U((4,), 2.0, 3.0),), tag="hits_limit")
case(while_continue, lambda: (away((7,), (0.3,)),))
case(nested_break_inner, lambda: (away((4, 5), (-0.4,)),))
case(nested_continue_outer, lambda: (away((5, 4), (0.0, 0.5)),))

# ---------------------------------------------------------------------------------------
# Branches and early returns
# ---------------------------------------------------------------------------------------


def branch_if_elif_else(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0.5:
            s += x[i] ** 2
        elif x[i] > -0.5:
            s += np.sin(x[i])
        else:
            s -= x[i] * 3.0
    return s


def branch_on_index(x):
    y = np.zeros_like(x)
    for i in range(len(x)):
        if i % 2 == 0:
            y[i] = x[i] ** 2
        else:
            y[i] = np.exp(x[i]) * y[i - 1]
    return np.sum(y)


def branch_array_update(u0, n):
    u = u0.copy()
    for t in range(n):
        if np.sum(u) > 0.0:
            u = u * 0.9 - 0.3
        else:
            u = u * 1.1 + 0.2 * np.sin(u) + 0.25
    return np.sum(u ** 2)


def branch_and_or(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0.0 and i % 2 == 0:
            s += x[i] ** 2
        elif x[i] < -0.5 or i == 1:
            s += x[i] * 2.0
    return s


def branch_nested(x):
    s = 0.0
    for i in range(len(x)):
        if x[i] > 0.0:
            if x[i] > 0.6:
                s += x[i] ** 3
            else:
                s += x[i]
        else:
            s -= np.cos(x[i])
    return s


def return_in_branch(x):
    if np.sum(x) > 0.0:
        return np.sum(x ** 2)
    else:
        return np.sum(np.sin(x))


def return_early_without_else(x):
    if x[0] > 0.0:
        return x[0] * x[1]
    y = x * 2.0
    return np.sum(y ** 2)


def return_inside_loop(x):
    s = 0.0
    for i in range(len(x)):
        s += x[i] ** 2
        if s > 1.0:
            return s * x[i]
    return -s


def return_inside_while(x):
    y = x.copy()
    while True:
        y = y * 1.5
        if np.sum(y * y) > 4.0:
            return np.sum(y * x)


case(branch_if_elif_else, lambda: (away((9,), (0.5, -0.5), lo=-1.5, hi=1.5),))
case(branch_on_index, lambda: (U((5,)),))
case(branch_array_update, lambda: (U((4,), -0.2, 0.6), 6))
case(branch_and_or, lambda: (away((7,), (0.0, -0.5)),))
case(branch_nested, lambda: (away((8,), (0.0, 0.6)),))
case(return_in_branch, lambda: (U((4,), 0.1, 1.0),), tag="if")
case(return_in_branch, lambda: (U((4,), -1.0, -0.1),), tag="else")
case(return_early_without_else, lambda: (np.array([0.5, -0.3, 0.2]),), tag="early")
case(return_early_without_else, lambda: (np.array([-0.5, -0.3, 0.2]),), tag="late")
case(return_inside_loop, lambda: (np.array([0.5, 0.6, 0.7, 0.2]),), tag="early")
case(return_inside_loop, lambda: (np.array([0.1, -0.2, 0.3]),), tag="late")
case(return_inside_while, lambda: (U((3,)),))

# ---------------------------------------------------------------------------------------
# Helper functions, module globals, math.*, introspection
# ---------------------------------------------------------------------------------------

COEF = 0.3
N_SUB = 3


def _scale_sq(x, scale=2.0):
    return scale * x * x


def _smooth(u, w=COEF):
    v = u.copy()
    v[1:-1] = (1.0 - 2.0 * w) * u[1:-1] + w * (u[:-2] + u[2:])
    return v


def _energy(u):
    return np.sum(_scale_sq(u, scale=0.5))


def _apply_boundary(u):
    u[0] = u[1]
    u[-1] = u[-2]


def _moments(x):
    m = np.mean(x)
    return m, np.mean((x - m) ** 2)


def _clamped(v, limit):
    if v > limit:
        return limit
    return v


def helper_defaults_and_keywords(x):
    return np.sum(_scale_sq(x)) + np.sum(_scale_sq(x, 3.0)) + np.sum(_scale_sq(scale=1.5, x=x ** 2))


def helper_calls_helper(u0):
    u = u0.copy()
    for k in range(N_SUB):
        u = _smooth(u)
    u = _smooth(u, w=0.1)
    return _energy(u)


def helper_mutates_argument(u0):
    u = u0 * 1.0
    for k in range(2):
        u[1:-1] = u[1:-1] + 0.1 * u[2:] ** 2
        _apply_boundary(u)
    return np.sum(u ** 2 * u0)


def helper_returns_tuple(x):
    m, v = _moments(x)
    return m * v + v ** 2


def helper_with_early_return(x):
    s = 0.0
    for i in range(len(x)):
        s += _clamped(x[i] * 2.0, 0.8) * x[i]
    return s


def module_globals(x):
    return np.sum(x * COEF) * N_SUB + COEF ** 2 * np.sum(x ** 2)


def math_scalars(x, a):
    return np.sum(x ** 2) * math.exp(a) + math.sqrt(a) * math.pi + math.exp(x[0]) * math.sqrt(x[1] * x[1] + 1.0)


def introspection(A, x):
    n = len(x)
    m = A.shape[0]
    rows, cols = A.shape
    s = 0.0
    for i in range(m):
        s += A[i, cols - 1] * x[i % n]
    if A.ndim == 2:
        s += np.sum(A ** 2) / A.size
    s += x.size * x[0] ** 2 + rows * x[-1]
    return s


case(helper_defaults_and_keywords, lambda: (U((4,)),))
case(helper_calls_helper, lambda: (U((6,)),))
case(helper_mutates_argument, lambda: (U((6,)),))
case(helper_returns_tuple, lambda: (U((5,)),))
case(helper_with_early_return, lambda: (away((6,), (0.4,)),))
case(module_globals, lambda: (U((4,)),))
case(math_scalars, lambda: (U((3,)), 0.8), ("x", "a"))
case(introspection, lambda: (U((4, 3)), U((3,), seed=1)), ("A", "x"))

# ---------------------------------------------------------------------------------------
# The tests: every case, gradient and forward
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("fn, make, wrt", CASES)
def test_grad(fn, make, wrt, backend):
    check_grad(fn, make(), wrt, backend=backend)


@pytest.mark.parametrize("fn, make, wrt", CASES)
def test_forward(fn, make, wrt, backend):
    check_forward(fn, make(), backend=backend)
