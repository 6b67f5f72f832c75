"""NumPy's library functions beyond the arithmetic core, and ``scipy.special``'s common ones:
statistics, order statistics (sort, median, quantiles), interpolation, convolution, running
products, determinants and Cholesky factors, log-gamma and digamma, shape helpers, padding, diagonals, tensor products,
sequences, closeness tests, boolean masks combined with ``&``,
``|``, ``^`` and ``~``, and the inverse hyperbolic, ``exp2``, ``cbrt`` and ``logaddexp``
primitives.

Each program is checked on every backend: its gradient against finite differences, and its
forward value, shape and dtype against plain NumPy. A table of edge cases (empty and
one-point ``linspace``, degrees of freedom used up, float32 kept float32, the padding modes
at their widest, offsets past a matrix's edge) is checked against NumPy's forward values.
Refusals assert their message.
"""

import math

import numpy as np
import pytest
import scipy.special
from scipy.special import expit, logsumexp

import flowgrad
from oracle import check_forward, check_grad


def U(shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


A0, X0, Y0 = U((4, 5)), U((5,), seed=1), U((5,), 0.2, 1.0, seed=2)
PICK = np.array([[1, 0], [0, 0], [4, 2], [3, 1]])


def statistics(A, x):
    return (np.var(A) + np.std(A, axis=0) @ x + np.sum(A.var(axis=1, ddof=1))
            + np.average(A, axis=1, weights=np.abs(x) + 1).sum() + np.average(A * x)
            + np.ptp(A, axis=1).sum() + np.nansum(A * x) + np.nanmean(A[0]) + A.std(ddof=1)
            + np.sum(np.std(A, axis=(0, 1), keepdims=True)))


def elementwise(x, y):
    return np.sum(np.arcsinh(x) + np.arccosh(y + 1.5) + np.arctanh(x * 0.9) + np.exp2(x) + np.cbrt(x)
                  + np.logaddexp(x, y) + np.sinc(x) + np.deg2rad(x) + np.reciprocal(y)
                  + np.float_power(y, 1.5) + np.heaviside(x, 0.5) * x + np.trunc(3 * x) * x
                  + np.nan_to_num(x / y))


def shapes(A, x):
    B = np.expand_dims(x, 0) * A
    C = np.squeeze(A[:1]) + np.broadcast_to(x, (3, 5)).sum(axis=0)
    D = np.moveaxis(A[None], 0, 2)[..., 0]
    E = np.column_stack([x, x ** 2])
    a, b = np.split(x[:4], 2)
    c, d, e = np.array_split(x, 3)
    T = np.tile(x[:2], (2, 3))
    R = np.repeat(A, 2, axis=1)
    return (np.sum(B ** 2) + np.sum(C * x) + np.sum(D * A) + np.sum(E @ E.T) + np.sum(a * b)
            + np.sum(c) * np.sum(d ** 2) * np.sum(e) + np.sum(T * T[::-1]) + np.sum(R ** 3)
            + np.sum(np.atleast_2d(x) * A))


def padding(A, x):
    P = np.pad(A, ((1, 2), (0, 3)), mode="constant", constant_values=0.5)
    Pe = np.pad(x, 2, mode="edge")
    Pr = np.pad(x, (2, 3), mode="reflect")
    Pw = np.pad(A, 1, mode="wrap")
    Ps = np.pad(x, (3, 2), mode="symmetric")
    return (np.sum(P * P) + np.sum(Pe ** 3) + np.sum(Pr * np.arange(10)) + np.sum(Pw ** 2 * Pw[0])
            + np.sum(Ps * np.arange(10)))


def products(A, x):
    S = A[:, :4] @ A[:, :4].T + 3 * np.eye(4)
    M = np.diag(x) @ A.T
    return (np.trace(S) + np.sum(np.diagonal(A, 1) ** 2) + np.sum(np.diag(A, -1)) + np.sum(M ** 2)
            + np.sum(np.diag(x[:3], 1) ** 2 * 1.5) + np.sum(np.tensordot(A, A, axes=([1], [1])) ** 2)
            + np.inner(x, x) + np.sum(np.kron(A[:2, :2], A[:2, 1:3])) + np.sum(np.cross(A[:, :3], A[:, 2:5]))
            + np.sum(np.linalg.inv(S) ** 2) + A.trace() + np.sum(A.diagonal()))


def norms(A, x):
    return (np.linalg.norm(x, 1) + np.linalg.norm(x, np.inf) + np.linalg.norm(x, -np.inf) + np.linalg.norm(x, 3)
            + np.linalg.norm(A, 1) + np.linalg.norm(A, -np.inf) + np.linalg.norm(A, axis=1, ord=1).sum()
            + np.linalg.norm(A, "fro"))


def sequences(x, y, A, a, b):
    t = np.linspace(a, b, 7)
    u = np.linspace(0.0, b, 5, endpoint=False)
    X, Y = np.meshgrid(x[:3], y)
    return (np.sum(np.diff(x) ** 2) + np.sum(np.diff(A, n=2, axis=0) ** 2)
            + np.sum(np.diff(x, prepend=0.5, append=b)) + np.sum(t * t) + np.sum(u ** 3)
            + np.trapezoid(x ** 2, y) + np.trapezoid(A, dx=0.1).sum() + np.sum(X * Y ** 2)
            + np.sum(np.take(x, [0, 3, 3])) + np.sum(np.take_along_axis(A, PICK, axis=1) ** 2)
            + np.polyval([1.0, a, 2.0], b) + np.sum(np.polyval(y[:3], x))
            + np.sum(np.select([x > 0.5, x < -0.5], [x, x ** 2], 0.1)))


def masks_and_tests(x, y, A):
    s = 0.0
    if np.allclose(x, x + 1e-12):
        s = s + np.sum(x)
    if np.any(x > 0.9) or not np.all(x > -2):
        s = s + 100.0
    m = (x > 0) & (x < 0.5) | ~(x > -0.2)
    m ^= x > 0.3
    k = A > 0
    k &= A < 0.7
    return (s + np.sum(np.where(np.isclose(x, y, atol=0.3), x, 0.0)) + np.count_nonzero(x > 0) * np.sum(y)
            + np.sum(A.any(axis=0) * A[0]) + np.sum(np.where(m, x, 0.0)) + np.sum(k * A)
            + np.sum(np.logical_xor(x > 0, x < 0.4) * y))


def order_statistics(A, x):
    s = np.sort(A, axis=0)
    B = A.copy()
    B.sort(axis=1)
    return (np.sum(s * A) + np.sum(np.sort(x) * np.arange(5)) + np.sum(np.sort(A, axis=None) ** 2 * np.arange(20))
            + np.sum(B[:, :2] * A[:, 1:3]) + np.median(A) + np.sum(np.median(A, axis=0) ** 2) + np.median(x) * 2
            + np.sum(np.median(A, axis=1, keepdims=True) * A) + np.quantile(x, 0.3)
            + np.sum(np.percentile(A, [10, 50, 90], axis=1) ** 2) + np.sum(np.quantile(A, 0.75, axis=0, keepdims=True) * A)
            + np.quantile(x, 0.5, method="lower") + np.quantile(x, 0.4, method="higher")
            + np.quantile(x, 0.55, method="midpoint") + np.quantile(x, 1.0) + np.quantile(x, 0.0))


def interpolation(x, xp, fp):
    return (np.sum(np.interp(x, xp, fp) ** 2) + np.interp(0.1, xp, fp)
            + np.sum(np.interp(x * 3, xp, fp, left=-5.0, right=2.0)))


def convolutions(a, v, A):
    return (np.sum(np.convolve(a, v) ** 2) + np.sum(np.convolve(a, v, "same") * a)
            + np.sum(np.convolve(v, a, "valid") ** 3) + np.sum(np.correlate(a, v) ** 2)
            + np.sum(np.correlate(a, v, "full") * np.arange(8)) + np.sum(np.correlate(v, a, "same"))
            + np.sum(np.cumprod(A, axis=1) ** 2) + np.sum(np.cumprod(A)) + np.sum(A.cumprod(axis=0)))


def special_functions(A, p, y):
    return (np.sum(expit(A) ** 2) + np.sum(scipy.special.log_expit(A * 3)) + np.sum(scipy.special.logit(p))
            + logsumexp(A) + np.sum(logsumexp(A, axis=1) ** 2) + np.sum(logsumexp(A, axis=0, keepdims=True) * A)
            + np.sum(scipy.special.softmax(A, axis=1) * A) + np.sum(scipy.special.log_softmax(A) ** 2)
            + np.sum(scipy.special.erf(A)) + np.sum(scipy.special.xlogy(p, y)) + np.sum(scipy.special.xlog1py(p, y)))


def gaussian_process(A, y, N):
    L = np.linalg.cholesky(A)
    alpha = np.linalg.solve(L.T, np.linalg.solve(L, y))
    sign, logdet = np.linalg.slogdet(A)
    return (0.5 * y @ alpha + np.sum(np.log(np.diag(L))) + logdet * 0.3 + np.linalg.det(N) + sign
            + np.linalg.slogdet(N)[1] * np.linalg.slogdet(-N)[0])


def poisson_log_likelihood(x, k):
    lam = np.exp(0.1 * x)
    return (np.sum(k * np.log(lam) - lam - scipy.special.gammaln(k + 1)) + np.sum(scipy.special.gammaln(x))
            + np.sum(scipy.special.digamma(x) ** 2) + np.sum(scipy.special.betaln(np.abs(x) + 0.5, 2.0))
            + math.lgamma(x[0]))


GAMMA_POINTS = np.array([0.05, 0.7, 1.4616, 3.3, 9.9, 10.1, 27.0, 200.0, -2.5, -0.3])


def spd_matrix(n, seed):
    B = U((n, n), seed=seed)
    return B @ B.T + n * np.eye(n)


CASES = [
    (statistics, (A0, X0)),
    (elementwise, (X0 * 0.8, Y0)),
    (shapes, (A0, X0)),
    (padding, (A0, X0)),
    (products, (A0, X0)),
    (norms, (A0, X0)),
    (sequences, (X0, np.sort(Y0), A0, 0.3, 1.7)),
    (masks_and_tests, (X0, Y0, A0)),
    (order_statistics, (A0, X0)),
    (interpolation, (U((7,), seed=4), np.sort(U((6,), seed=5)), U((6,), seed=6))),
    (convolutions, (X0, U((4,), seed=8), U((3, 4), 0.5, 1.5, seed=9))),
    (special_functions, (A0 * 2, Y0 * 0.9, Y0 + 1.0)),
    (poisson_log_likelihood, (GAMMA_POINTS, np.arange(10.0))),
    (gaussian_process, (spd_matrix(4, 10), U((4,), seed=11), U((4, 4), seed=12) + 2 * np.eye(4))),
]


@pytest.mark.parametrize("fn, args", CASES, ids=[c[0].__name__ for c in CASES])
def test_grad(fn, args, backend):
    wrt = tuple(i for i, a in enumerate(args) if isinstance(a, (float, np.ndarray)))
    check_grad(fn, args, wrt, backend=backend)


@pytest.mark.parametrize("fn, args", CASES, ids=[c[0].__name__ for c in CASES])
def test_forward(fn, args, backend):
    check_forward(fn, args, backend=backend)


# ---------------------------------------------------------------- edge cases, forward values

F32 = U((5,), seed=3).astype(np.float32)


def linspace_run_time_count(n):
    return np.linspace(0.0, 1.0, n)


def linspace_one_point(a, b):
    return np.linspace(a, b, 1)


def linspace_empty(a, b):
    return np.linspace(a, b, 0)


def linspace_int_dtype(a):
    return np.linspace(a, 10.0, 4, endpoint=False, dtype=int)


def linspace_step(a):
    return np.linspace(a, 2.0, 5, retstep=True)[1] + np.linspace(a, 2.0, 5)[4]


def var_no_degrees_left(x):
    return np.var(x, ddof=5)


def float32_stays_float32(f):
    return np.var(f) + f.std() + np.cbrt(f) + np.exp2(f) + np.deg2rad(f)


def tile_more_axes(A):
    return np.tile(A, (2, 1, 2))


def repeat_flat(A):
    return np.repeat(A, 3)


def diag_below(x):
    return np.diag(x, -2)


def diagonal_past_the_edge(A):
    return np.diagonal(A, 5)


def trace_offsets(A):
    return np.trace(A, -1) + np.trace(A, 2)


def kron_vectors(x):
    return np.kron(x[:2], x[2:5])


def nan_to_num_defaults(x):
    return np.nan_to_num(np.log(x)) + np.nan_to_num(1.0 / (x * 0.0), posinf=5.0)


def isclose_equal_nan(x):
    return np.isclose(x, np.log(x), equal_nan=True)


def heaviside_nan(x):
    return np.heaviside(np.log(x), x)


def logaddexp_far_apart(x):
    return np.logaddexp(x, -x) + np.logaddexp(x * 1000.0, 0.0)


def pad_symmetric_2d(A):
    return np.pad(A, ((0, 2), (3, 0)), mode="symmetric")


def pad_reflect_widest(x):
    return np.pad(x, (4, 4), mode="reflect")


def squeeze_all(A):
    return np.squeeze(A[None, :, None, :])


def expand_two_axes(A):
    return np.expand_dims(A, (0, 3))


def diff_of_booleans(x):
    return np.diff(x > 0)


def atleast_of_a_scalar(a):
    return np.atleast_2d(a) * 3.0


def meshgrid_ij(x):
    return np.meshgrid(x[:2], x[2:4], x, indexing="ij")[2]


def average_weights_along_axis(A, x):
    return np.average(A, axis=1, weights=x)


def norm_counts(A):
    return np.linalg.norm(A[0], 0) + np.linalg.norm(A, ord=-1)


def take_negative(A):
    return np.take(A, [2, -1], axis=1) + np.take(A, 5)


def select_default(x):
    return np.select([x < 0], [x * 2])


def any_all_masks(A):
    return A.any() & np.all(A < 2, axis=0) | ~np.any(A > 0.99, axis=1)[0]


XP = np.sort(U((6,), seed=5))
TIES = np.array([3, 1, 3, 0, 1, 1, 2])
WITH_NAN = np.where(np.arange(5) == 2, np.nan, X0)


def search_left_right(x, xp):
    return np.searchsorted(xp, x) * 10 + np.searchsorted(xp, x, side="right") + np.searchsorted(xp, 0.2)


def stable_argsort_of_ties(i):
    return np.argsort(i, kind="stable") * 10 + np.argsort(np.stack([i, i[::-1]]), axis=0, kind="stable")[1]


def sort_integers(i):
    return np.sort(i[:6]) + np.median(i) + np.median(i[:6])


def median_with_nan(x):
    return np.median(x) + np.quantile(x, 0.2)


def interp_outside_at_nodes_and_nan(xp):
    return np.interp(np.concatenate([xp, [np.nan, -5.0, 5.0]]), xp, np.cos(xp))


def interp_repeated_nodes(x):
    return np.interp(x, np.array([-0.5, 0.0, 0.0, 0.5, 0.5, 0.7]), np.arange(6.0))


def interp_one_node(x):
    return np.interp(x, np.array([0.1]), np.array([2.0]))


def integer_convolution_and_products(i):
    return np.convolve(i, i[:2], "full")[:7] + np.cumprod(i[:4] + 1).sum() + np.cumprod(i > 1)


def float32_convolution(f):
    return np.convolve(f, f[:3], "same")


def special_functions_at_extremes(A):
    return (expit(A * 1000.0) + scipy.special.xlogy(np.maximum(A, 0.0), np.abs(A))
            + logsumexp(A * np.inf, axis=1)[:, None])


def positive_is_a_copy(x):
    p = np.positive(x)
    p[0] = 5.0
    return x * 1.0 + p


def nan_to_num_copies_and_writes_in_place(x, i):
    y = np.nan_to_num(i)
    y[0] = 99
    z = x * 1.0
    z[1] = np.nan
    np.nan_to_num(z, copy=False)
    return z + i + y


def trapezoid_of_a_grid(y, x):
    return np.trapezoid(y, x, axis=0)


def masks_with_integers(x):
    return ((x > 0) * 1) + (x > 0.5) + ((x > 0) + (x > 0.5)) * x + np.add(x > 0, x > 0.5) * 2 + (0 + (x > 0))


def linspace_without_an_interval(a):
    return np.linspace(a, 1.0, 1, retstep=True)[1] + np.linspace(a, 1.0, 0, endpoint=False, retstep=True)[1]


def float32_inverse_and_scalars(f):
    return (np.linalg.inv(f[:4].reshape(2, 2) + 3 * np.eye(2, dtype=np.float32)).sum() + f * np.float32(2.0)
            + np.heaviside(f, np.float32(1.0)) + np.where(f > 0, f, np.float32(1.0)))


def integer_quantiles_and_inverse(i):
    return (np.quantile(i, 0.5, method="lower") + np.quantile(i, 0.6, method="higher")
            + np.linalg.inv(np.array([[2, 1], [1, 3]])).sum())


def repeat_of_an_element(A):
    return np.repeat(A[0, 0], 3) * np.arange(3.0)


def module_array_method():
    return PICK.sum() + PICK.any()


EDGES = [
    (linspace_run_time_count, (5,)), (linspace_run_time_count, (1,)), (linspace_run_time_count, (0,)),
    (linspace_one_point, (0.5, 2.0)), (linspace_empty, (0.5, 2.0)), (linspace_int_dtype, (1.3,)),
    (linspace_step, (0.2,)), (var_no_degrees_left, (X0,)), (float32_stays_float32, (F32,)),
    (tile_more_axes, (A0,)), (repeat_flat, (A0,)), (diag_below, (X0,)), (diagonal_past_the_edge, (A0,)),
    (trace_offsets, (A0,)), (kron_vectors, (X0,)), (nan_to_num_defaults, (X0,)), (isclose_equal_nan, (X0,)),
    (heaviside_nan, (X0,)), (logaddexp_far_apart, (X0,)), (pad_symmetric_2d, (A0,)),
    (pad_reflect_widest, (X0,)), (squeeze_all, (A0,)), (expand_two_axes, (A0,)), (diff_of_booleans, (X0,)),
    (atleast_of_a_scalar, (2.0,)), (meshgrid_ij, (X0,)), (average_weights_along_axis, (A0, X0)),
    (norm_counts, (A0,)), (take_negative, (A0,)), (select_default, (X0,)), (any_all_masks, (A0,)),
    (module_array_method, ()), (search_left_right, (X0, XP)), (stable_argsort_of_ties, (TIES,)),
    (sort_integers, (TIES,)), (median_with_nan, (WITH_NAN,)), (interp_outside_at_nodes_and_nan, (XP,)),
    (interp_repeated_nodes, (U((9,), seed=7),)), (interp_one_node, (np.array([-1.0, 0.1, 1.0]),)),
    (integer_convolution_and_products, (TIES,)), (float32_convolution, (F32,)),
    (special_functions_at_extremes, (A0,)), (positive_is_a_copy, (X0,)),
    (nan_to_num_copies_and_writes_in_place, (X0, TIES[:5])),
    (trapezoid_of_a_grid, (U((3, 2), seed=13), np.array([[0.0, 0.0], [1.0, 3.0], [1.5, 3.5]]))),
    (masks_with_integers, (X0,)), (linspace_without_an_interval, (0.5,)), (float32_inverse_and_scalars, (F32,)),
    (integer_quantiles_and_inverse, (TIES,)), (repeat_of_an_element, (A0,)),
]


@pytest.mark.parametrize("fn, args", EDGES, ids=[f"{c[0].__name__}-{k}" for k, c in enumerate(EDGES)])
def test_edge_values(fn, args, backend):
    # float32 arithmetic in another order than NumPy's differs in the last bit
    rtol = 1e-5 if fn in (float32_stays_float32, float32_convolution, float32_inverse_and_scalars) else 1e-12
    with np.errstate(all="ignore"):
        check_forward(fn, args, backend=backend, rtol=rtol)


def sum_of_digamma(x):
    return np.sum(scipy.special.digamma(x))


def gamma_poles(z):
    return scipy.special.digamma(z) + scipy.special.gammaln(z)


def test_digamma_derivative_is_trigamma(backend):
    g = flowgrad.grad(sum_of_digamma, backend=backend)(GAMMA_POINTS)
    want = scipy.special.polygamma(1, GAMMA_POINTS)
    assert np.allclose(g, want, rtol=1e-12, atol=0)
    with np.errstate(all="ignore"):
        check_forward(gamma_poles, (np.array([0.0, -1.0, -2.5, 1e-8, 1e5, np.nan]),), backend=backend)


def test_sinc_and_cbrt_derivatives_at_their_special_points(backend):
    def f(x):
        return np.sum(np.sinc(x)) + np.sum(np.cbrt(x + 2.0))
    x = np.array([0.0, 0.5, -1.5])
    g = flowgrad.grad(f, backend=backend)(x)
    pix = np.pi * x[1:]
    expected_sinc = np.concatenate([[0.0], (np.cos(pix) * pix - np.sin(pix)) / (pix * x[1:])])
    assert np.allclose(g, expected_sinc + (x + 2.0) ** (-2.0 / 3.0) / 3.0, rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- refusals


def squeeze_a_long_axis(A):
    return np.squeeze(A, axis=1)


def split_unevenly(x):
    return np.split(x, 2)


def pad_wider_than_reflect(x):
    return np.pad(x, 5, mode="reflect")


def diff_run_time_order(x, n):
    return np.diff(x, n)


def bitwise_and_of_integers(i, j):
    return (i & j) * 1.0


def repeat_by_array(x):
    return np.repeat(x, np.array([1, 2, 1, 2, 1]))


def variance_past_the_last_axis(A):
    return np.var(A, axis=2)


def concatenate_mismatched(A, x):
    return np.column_stack([x, A])


def interp_of_unequal_lengths(x):
    return np.interp(x, np.arange(4.0), np.arange(3.0))


def broadcast_then_write_the_source(x):
    b = np.broadcast_to(x, (2, 5))
    x[0] = 100.0
    return b


@pytest.mark.parametrize("fn, args, error, words", [
    (squeeze_a_long_axis, (A0,), flowgrad.FlowgradError, "size not equal to one"),
    (split_unevenly, (X0,), flowgrad.FlowgradError, "equal division"),
    (pad_wider_than_reflect, (X0,), flowgrad.UnsupportedError, "wider than the array"),
    (diff_run_time_order, (X0, 1), flowgrad.UnsupportedError, "n known only at run time"),
    (bitwise_and_of_integers, (np.arange(3), np.arange(3)), flowgrad.UnsupportedError, "boolean masks"),
    (repeat_by_array, (X0,), flowgrad.UnsupportedError, "array of repeats"),
    (variance_past_the_last_axis, (A0,), flowgrad.FlowgradError, "axis 2 is out of bounds"),
    (concatenate_mismatched, (A0, X0), flowgrad.FlowgradError, "must match exactly"),
    (interp_of_unequal_lengths, (X0,), flowgrad.FlowgradError, "not of the same length"),
    (broadcast_then_write_the_source, (X0,), flowgrad.UnsupportedError, "np.broadcast_to"),
], ids=lambda v: getattr(v, "__name__", None))
def test_refused_with_a_message(fn, args, error, words, backend):
    with pytest.raises(error) as excinfo:
        flowgrad.jit(fn, backend=backend)(*args)
    assert words in str(excinfo.value)
    assert "test_numpy_functions.py:" in str(excinfo.value)


POLYGAMMA_POINTS = np.array([-2.5, -0.3, 0.05, 0.5, 1.0, 3.7, 12.0, 45.0])


def polygammas(x):
    return (np.sum(scipy.special.polygamma(2, x) * 0.1) + np.sum(scipy.special.polygamma(3, x) * 0.01)
            + np.sum(scipy.special.polygamma(1, x) + scipy.special.psi(x)))


def polygamma_orders(x):
    return np.stack([scipy.special.polygamma(n, x) for n in (1, 2, 3, 4, 6)])


def test_polygamma_values_and_derivatives(backend):
    """polygamma(n, x) of any order, both backends, against SciPy (at the poles too: inf for odd
    orders, -inf for even); its derivative is the next order, so a Hessian through digamma
    (trigamma's derivative) is taken."""
    x = np.concatenate([POLYGAMMA_POINTS, [0.0, -1.0]])
    got = flowgrad.jit(polygamma_orders, backend=backend)(x)
    np.testing.assert_allclose(got, polygamma_orders(x), rtol=1e-13)
    x = POLYGAMMA_POINTS
    g = flowgrad.grad(polygammas, backend=backend)(x)
    expected = (scipy.special.polygamma(3, x) * 0.1 + scipy.special.polygamma(4, x) * 0.01
                + scipy.special.polygamma(2, x) + scipy.special.polygamma(1, x))
    np.testing.assert_allclose(g, expected, rtol=1e-12)
    H = flowgrad.hessian(sum_of_digamma, backend=backend)(GAMMA_POINTS)
    np.testing.assert_allclose(H, np.diag(scipy.special.polygamma(2, GAMMA_POINTS)), rtol=1e-12, atol=1e-14)
