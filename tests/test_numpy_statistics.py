"""Counting and covariance: ``np.histogram`` (a number of bins or their edges, ``range``,
``weights``, ``density``), ``np.bincount`` (``weights``, ``minlength``), ``np.digitize``
(increasing and decreasing bins, ``right``), ``np.unique`` (values), ``np.cov`` (``rowvar``,
``bias``, ``ddof``, ``fweights``, ``aweights``, a second variable ``y``) and ``np.corrcoef``.

Each program is checked on every backend: its gradient against finite differences (the counts
are piecewise constant in the samples, so their derivative there is 0, which central differences
confirm away from the edges; the weights receive their bin's adjoint), its forward value against
plain NumPy, with samples on the bin edges, outside the range, equal, NaN and none at all.
Gradients of histograms, unique values, covariances and correlations are checked against
``jax.grad`` too. Refusals and run-time errors assert their message.
"""

import numpy as np
import pytest

import flowgrad
from conftest import have_module
from oracle import check_forward, check_grad


def U(shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


A30, W30 = U((30,), -2.0, 2.0, seed=1), U((30,), 0.5, 1.5, seed=2)
X38, Y82 = U((3, 8), seed=3), U((8, 2), seed=4)
AW, FW = U((8,), 0.5, 2.0, seed=5), np.arange(1, 9)
IDX = np.array([0, 3, 3, 1, 5, 0])
EDGES = np.array([-2.5, -0.5, 0.0, 0.3, 2.5])


# ---------------------------------------------------------------- programs


def histogram_losses(a, w):
    h, e = np.histogram(a, bins=5, weights=w)
    h2, _ = np.histogram(a, bins=4, range=(-1.0, 1.5), weights=w ** 2, density=True)
    h3, e3 = np.histogram(a, bins=EDGES, weights=np.sin(w))
    c, e4 = np.histogram(a * 2.0, 6)
    d, _ = np.histogram(a, 3, density=True)
    return (np.sum(h * np.arange(5)) + np.sum(h2 ** 2) + np.sum(h3 * e3[1:]) + np.sum(c * e4[:-1]) + np.sum(e ** 2)
            + np.sum(d * np.arange(3.0)))


def counts_do_not_move_with_the_samples(a, w):
    h, _ = np.histogram(a, 5, range=(-2.5, 2.5), weights=w)
    return np.sum(h * np.arange(5.0)) + np.sum(np.histogram(a, EDGES)[0] * a[:4])


def bincount_losses(w):
    return (np.sum(np.bincount(IDX, w[:6], minlength=8) ** 2) + np.sum(np.bincount(IDX) * w[:6])
            + np.sum(np.bincount(IDX[IDX > 0] - 1, weights=w[:4] ** 2)))


def digitize_losses(x):
    inc = np.digitize(x, np.array([-1.0, 0.0, 0.5]))
    dec = np.digitize(x, np.array([1.0, 0.2, -0.3]), right=True)
    run_time = np.digitize(x, np.sort(x[:4]))
    return np.sum(inc * x) + np.sum(dec * x ** 2) + np.sum(run_time * x) + np.sum(np.digitize(x, [0.0], True))


def unique_values(x):
    u = np.unique(np.round(x * 2.0) / 2.0 * x[0])
    return np.sum(u ** 2 * np.arange(u.shape[0])) + np.sum(np.unique(x[:5]) * np.arange(5.0))


def covariances(X, Y, aw):
    return (np.sum(np.cov(X) ** 2) + np.sum(np.cov(Y, rowvar=False, bias=True)) + np.sum(np.cov(X, ddof=0))
            + np.cov(X[0]) + np.sum(np.cov(X, Y.T[0])) + np.sum(np.cov(X, aweights=aw) ** 2)
            + np.sum(np.cov(X, fweights=FW, aweights=aw)) + np.sum(np.cov(X, fweights=FW, ddof=2))
            + np.sum(np.cov(Y, Y[:, :1], rowvar=False)))


def correlations(X, Y):
    return (np.sum(np.corrcoef(X) ** 2) + np.sum(np.corrcoef(Y, rowvar=False) * np.arange(4.0).reshape(2, 2))
            + np.corrcoef(X[0]) + np.sum(np.corrcoef(X[0], X[1]) ** 3))


CASES = [
    (histogram_losses, (A30, W30)),
    (counts_do_not_move_with_the_samples, (A30, W30)),
    (bincount_losses, (W30,)),
    (digitize_losses, (A30 / 2.0,)),
    (unique_values, (A30,)),
    (covariances, (X38, Y82, AW)),
    (correlations, (X38, Y82)),
]


@pytest.mark.parametrize("fn, args", CASES, ids=[c[0].__name__ for c in CASES])
def test_grad(fn, args, backend):
    check_grad(fn, args, tuple(range(len(args))), backend=backend)


@pytest.mark.parametrize("fn, args", CASES, ids=[c[0].__name__ for c in CASES])
def test_forward(fn, args, backend):
    check_forward(fn, args, backend=backend)


def test_counts_have_no_gradient_and_weights_their_bins(backend):
    ga, gw = flowgrad.grad(counts_do_not_move_with_the_samples, wrt=(0, 1), backend=backend)(A30, W30)
    bins = np.minimum(((A30 + 2.5) / 5.0 * 5).astype(int), 4)
    assert np.all(ga[4:] == 0.0) and np.array_equal(gw, bins.astype(float))


def test_unique_value_gradient_goes_to_the_first_occurrence(backend):
    def f(x):
        return np.sum(np.unique(x) * np.array([1.0, 2.0, 3.0]))
    x = np.array([0.5, 0.2, 0.5, 0.9, 0.2])
    assert np.array_equal(flowgrad.grad(f, backend=backend)(x), [2.0, 1.0, 0.0, 3.0, 0.0])


# ---------------------------------------------------------------- forward values at the edges


ON_EDGES = np.linspace(0.0, 1.0, 11)
WITH_NAN = np.where(np.arange(30) % 7 == 3, np.nan, A30)


def histogram_on_edges(a):
    return np.concatenate([np.histogram(a, 10)[0], np.histogram(a, ON_EDGES[::2])[0], np.histogram(a, 4)[1]])


def histogram_outside_the_range(a, w):
    h, e = np.histogram(a, 7, range=(-0.5, 0.75), weights=w)
    return np.concatenate([h, e])


def histogram_of_equal_samples(a):
    h, e = np.histogram(a * 0.0 + 2.0, 3)
    return np.concatenate([h, e])


def histogram_of_nothing(a):
    h, e = np.histogram(a[:0], 4)
    return np.concatenate([h, e])


def histogram_with_nan_in_a_range(a):
    return np.histogram(a, 5, range=(-1.0, 1.0))[0]


def histogram_of_integers(i):
    h, e = np.histogram(i, 3)
    return np.concatenate([h, e])


def histogram_density_with_edges(a, w):
    return np.histogram(a, EDGES, weights=w, density=True)[0]


def bincount_edge_cases(i, w):
    return np.concatenate([np.bincount(i, minlength=2), np.bincount(i[:0], minlength=3), np.bincount(i > 2),
                           np.bincount(i, w[:7])])


def digitize_of_a_matrix(x):
    return np.digitize(x.reshape(5, 6), EDGES) * 10 + np.digitize(x.reshape(5, 6), EDGES[::-1])


def digitize_on_the_bins(x):
    return np.stack([np.digitize(EDGES, EDGES), np.digitize(EDGES, EDGES, right=True),
                     np.digitize(EDGES, EDGES[::-1]), np.digitize(EDGES, EDGES[::-1], right=True)])


def unique_with_nan(x):
    return np.unique(np.concatenate([x, x[::-1], [np.nan, np.nan]]))


def unique_of_a_matrix_and_integers(i):
    return np.unique(i.reshape(7, 1) * np.array([[1, -1]]))


def covariance_of_one_variable(x):
    return np.cov(x) + np.corrcoef(x) + np.cov(x, bias=True)


def covariance_without_degrees_of_freedom(X):
    return np.cov(X[:, :1])


TIES = np.array([3, 1, 3, 0, 1, 1, 2])

EDGE_CASES = [
    (histogram_on_edges, (ON_EDGES,)), (histogram_outside_the_range, (A30, W30)),
    (histogram_of_equal_samples, (A30,)), (histogram_of_nothing, (A30,)),
    (histogram_with_nan_in_a_range, (WITH_NAN,)), (histogram_of_integers, (TIES,)),
    (histogram_density_with_edges, (A30, W30)), (bincount_edge_cases, (TIES, W30)),
    (digitize_of_a_matrix, (A30,)), (digitize_on_the_bins, (A30,)), (unique_with_nan, (WITH_NAN,)),
    (unique_of_a_matrix_and_integers, (TIES,)), (covariance_of_one_variable, (A30,)),
]


@pytest.mark.parametrize("fn, args", EDGE_CASES, ids=[f"{c[0].__name__}-{k}" for k, c in enumerate(EDGE_CASES)])
def test_edge_values(fn, args, backend):
    with np.errstate(all="ignore"):
        check_forward(fn, args, backend=backend)


def test_covariance_without_degrees_of_freedom(backend):
    with np.errstate(all="ignore"), pytest.warns(RuntimeWarning):
        want = covariance_without_degrees_of_freedom(X38)
    with np.errstate(all="ignore"):
        got = flowgrad.jit(covariance_without_degrees_of_freedom, backend=backend)(X38)
    assert got.shape == want.shape and np.array_equal(np.isnan(got), np.isnan(want))


# ---------------------------------------------------------------- against jax.grad

jax_needed = [pytest.mark.jax, pytest.mark.skipif(not have_module("jax"), reason="needs jax")]


def _jax():
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jax, jnp


def weighted_histogram(a, w):
    h, e = np.histogram(a, 6, weights=w, density=True)
    return np.sum(h * np.arange(6.0)) + np.sum(np.histogram(a, EDGES, weights=w ** 2)[0] ** 2) + np.sum(e)


def unique_loss(x):
    return np.sum(np.unique(np.round(x * 2.0)) * np.arange(8.0) * x[0])


def covariance_loss(X, aw):
    return np.sum(np.cov(X, aweights=aw, fweights=FW) ** 2) + np.sum(np.cov(X.T, rowvar=False, ddof=0) * 0.5) \
        + np.sum(np.corrcoef(X) ** 3)


JAX_CASES = [
    (weighted_histogram, (A30, W30),
     lambda jnp: lambda a, w: (lambda h, e: jnp.sum(h * jnp.arange(6.0)) + jnp.sum(
         jnp.histogram(a, jnp.asarray(EDGES), weights=w ** 2)[0] ** 2) + jnp.sum(e))(
         *jnp.histogram(a, 6, weights=w, density=True))),
    (unique_loss, (A30,),
     lambda jnp: lambda x: jnp.sum(jnp.unique(jnp.round(x * 2.0), size=8) * jnp.arange(8.0) * x[0])),
    (covariance_loss, (X38, AW),
     lambda jnp: lambda X, aw: jnp.sum(jnp.cov(X, aweights=aw, fweights=jnp.asarray(FW)) ** 2)
     + jnp.sum(jnp.cov(X.T, rowvar=False, ddof=0) * 0.5) + jnp.sum(jnp.corrcoef(X) ** 3)),
]


@pytest.mark.parametrize("fn, args, twin", JAX_CASES, ids=[c[0].__name__ for c in JAX_CASES])
@pytest.mark.parametrize("mark", [pytest.param(0, marks=jax_needed)], ids=[""])
def test_against_jax(fn, args, twin, mark, backend):
    jax, jnp = _jax()
    assert np.unique(np.round(A30 * 2.0)).size == 8     # jnp.unique's size
    positions = tuple(range(len(args)))
    ours = flowgrad.grad(fn, wrt=positions, backend=backend)(*args)
    theirs = jax.grad(twin(jnp), argnums=positions)(*[jnp.asarray(a) for a in args])
    for g, j in zip(ours, theirs):
        np.testing.assert_allclose(g, np.asarray(j), rtol=1e-8, atol=1e-10 * max(1.0, float(np.max(np.abs(j)))))


# ---------------------------------------------------------------- refusals and run-time errors


def histogram_auto_bins(a):
    return np.histogram(a, bins="auto")[0]


def histogram_float32(a):
    return np.histogram(a.astype(np.float32), 3)[0]


DECREASING, NOT_MONOTONIC = EDGES[::-1].copy(), np.array([0.0, 1.0, 0.5])


def histogram_decreasing_edges(a):
    return np.histogram(a, DECREASING)[0]


def histogram_bad_range(a):
    return np.histogram(a, 3, range=(1.0, 0.0))[0]


def bincount_of_floats(a):
    return np.bincount(a)


def unique_counts(a):
    return np.unique(a, return_counts=True)


def digitize_not_monotonic(a):
    return np.digitize(a, NOT_MONOTONIC)


def cov_of_a_cube(a):
    return np.cov(a.reshape(2, 3, 5))


@pytest.mark.parametrize("fn, args, error, words", [
    (histogram_auto_bins, (A30,), flowgrad.UnsupportedError, "pass the number of bins or their edges"),
    (histogram_float32, (A30,), flowgrad.UnsupportedError, "astype(np.float64)"),
    (histogram_decreasing_edges, (A30,), flowgrad.FlowgradError, "must increase monotonically"),
    (histogram_bad_range, (A30,), flowgrad.FlowgradError, "max must be larger than min"),
    (bincount_of_floats, (A30,), flowgrad.FlowgradError, "according to the rule 'safe'"),
    (unique_counts, (A30,), flowgrad.UnsupportedError, "np.unique for the values alone"),
    (digitize_not_monotonic, (A30,), flowgrad.FlowgradError, "monotonically increasing or decreasing"),
    (cov_of_a_cube, (A30,), flowgrad.FlowgradError, "more than 2 dimensions"),
], ids=lambda v: getattr(v, "__name__", None))
def test_refused_with_a_message(fn, args, error, words, backend):
    with pytest.raises(error) as excinfo:
        flowgrad.jit(fn, backend=backend)(*args)
    assert words in str(excinfo.value)
    assert "test_numpy_statistics.py:" in str(excinfo.value)


def histogram_of_edges_computed(a, e):
    return np.histogram(a, e * 1.0)[0]


def digitize_of_bins_computed(a, e):
    return np.digitize(a, e * 1.0)


def histogram_of_nan_samples(a):
    return np.histogram(a, 4)[0]


def bincount_of_negatives(i):
    return np.bincount(i - 2)


def weights_of_another_length(i, w, k):
    return np.bincount(i, w[k:])


@pytest.mark.parametrize("fn, args, words", [
    (histogram_of_edges_computed, (A30, EDGES[[0, 2, 1, 3]]), "must increase monotonically, when an array (1 steps"),
    (digitize_of_bins_computed, (A30, EDGES[[0, 2, 1, 3]]), "monotonically increasing or decreasing"),
    (histogram_of_nan_samples, (WITH_NAN,), "autodetected range of [nan, nan] is not finite"),
    (bincount_of_negatives, (TIES,), "must have no negative elements"),
    (weights_of_another_length, (TIES, W30[:8], 2), "don't have the same length. (7 and 6)"),
], ids=lambda v: getattr(v, "__name__", None))
def test_run_time_errors(fn, args, words, backend):
    with pytest.raises(ValueError) as excinfo:
        flowgrad.jit(fn, backend=backend)(*args)
    assert words in str(excinfo.value)
    with pytest.raises(ValueError):
        fn(*args)                                     # as NumPy does


def test_run_time_bins_that_are_fine(backend):
    for fn in (histogram_of_edges_computed, digitize_of_bins_computed):
        check_forward(fn, (A30, EDGES), backend=backend)
        check_forward(fn, (A30, EDGES[::-1].copy()), backend=backend) if fn is digitize_of_bins_computed else None
