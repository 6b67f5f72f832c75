"""The Python that example code uses: loops over Python sequences (unrolled at capture),
``enumerate``/``zip``, lists built with ``append`` and comprehensions, nested functions and
lambdas, ``isinstance``, ``print``, ``scipy.stats`` densities, ``np.append``/``np.atleast_3d``,
and the refusals that remain (a list grown in a loop run a number of times known only at
run time)."""
import warnings

import numpy as np
import pytest

import flowgrad
from conftest import have_module
from tree_oracle import check_tree_forward as check_forward, check_tree_grad as check_grad

try:
    import scipy.stats
except ImportError:      # the tests that need it skip
    scipy = None

RNG = np.random.default_rng(7)
U = RNG.standard_normal(4)
X = RNG.standard_normal((5, 3))
WEIGHTS = [0.5, -1.0, 2.0]


def loop_over_a_list(x, ws):
    total = 0.0
    for w in ws:
        total = total + w * np.sum(x * x)
    return total


def loop_over_a_global_list(x):
    total = 0.0
    for k, w in enumerate(WEIGHTS):
        total = total + (k + 1) * w * np.sum(np.sin(x))
    return total


def zip_lists_and_ranges(x, ws):
    total = 0.0
    for w, k in zip(ws, range(10)):
        total = total + w * x[k]
    for k, (w, v) in enumerate(zip(ws, [1.0, 2.0, 3.0]), 1):
        total = total + k * w * v * x[0]
    return total


def dict_items(p, x):
    total = 0.0
    for key, value in p.items():
        total = total + value * np.sum(x) if key != "skip" else total
    return total * len(p)


def enumerate_an_array(X):
    s = 0.0
    for i, row in enumerate(X):          # a run-time loop over the rows
        s = s + (i + 1.0) * np.sum(row * row)
    for a, b in zip(X, X[::-1]):
        s = s + np.sum(a * b)
    return s


def unrolled_break_continue(x, ws):
    s = 0.0
    for w in ws:
        if w < 0.0:                      # known at capture
            continue
        if s > 3.0:                      # known only at run time
            break
        s = s + w * np.sum(x * x)
    return s


def unrolled_return(x, ws):
    for k, w in enumerate(ws):
        if w * np.sum(x) > 1.0:
            return w * np.sum(x * x) + k
    return np.sum(x)


def nested_unrolled(x, ws):
    s = 0.0
    for a in ws:
        for b in ws[1:]:
            s = s + a * b * np.sum(x ** 3)
    return s


def appends_in_a_known_loop(x):
    rows = []
    for k in range(3):
        rows.append(x * (k + 1.0))
    parts = []
    for k in range(len(rows)):
        parts.append(np.sum(rows[k] ** 2))
    return np.sum(np.stack(rows)) + np.sum(np.array(parts)) + sum(parts)


def comprehensions(x, ws):
    hs = [np.tanh(x * w) for w in ws]
    squares = [v * v for v in x]                      # an array of fixed length: its elements
    pairs = {k: w * np.sum(h) for k, (w, h) in enumerate(zip(ws, hs)) if k != 1}
    nested = [[a * b for b in ws] for a in ws[:2]]
    total = sum(np.sum(h) for h in hs)                 # a generator, evaluated at once
    return total + np.sum(np.array(squares)) + sum(pairs.values()) + np.sum(np.array(nested)) * x[0]


def nested_functions(x, a):
    scale = 2.0

    def f(v, c=3.0):
        return c * v * scale + a

    square = lambda v: v * v  # noqa: E731 -- the construct under test
    scale = 0.5                          # a closure sees the name's value when it runs
    return np.sum(f(x)) + np.sum(square(x)) + np.sum(list(map(square, [a, 2.0 * a])))


def closure_in_a_run_time_loop(u, n):
    def rhs():
        return -0.5 * u                  # u is rebound by the loop: each pass reads the new one

    for t in range(n):
        u = u + 0.1 * rhs()
    return np.sum(u * u)


def closure_returned_by_a_helper(x):
    def make(c):
        def g(v):
            return c * v
        return g
    g2, g3 = make(2.0), make(3.0)
    return np.sum(g2(x) + g3(x * x))


def star_arguments(x, ws):
    def weighted(v, *coefs, power=2.0):
        return sum(c * v ** power for c in coefs)
    opts = {"power": 3.0}
    return np.sum(weighted(x, *ws)) + np.sum(weighted(x, 1.0, **opts))


def isinstance_and_builtins(x, s, ws):
    out = np.sum(x)
    if isinstance(x, np.ndarray) and x.ndim == 1:
        out = out * 2.0
    if isinstance(s, float) and not isinstance(s, int):
        out = out + s
    if isinstance(ws, (list, tuple)) and "a" in {"a": 1}:
        out = out + max(ws) * min(x[0], x[1]) + max([x[0], x[1], s])
    return out


def np_append_and_atleast_3d(x, y):
    z = np.append(x, y)
    w = np.append(x[None, :], x[None, :] * 2.0, axis=0)
    a, b, c = np.atleast_3d(x[0], x, w)
    return np.sum(z ** 2) + np.sum(w) + np.sum(a) + np.sum(b * b) + np.sum(c * 3.0) + float(c.shape[2])


CASES = [
    pytest.param(loop_over_a_list, lambda: (U, [0.5, 1.5, -2.0]), (0, 1), id="for-over-list"),
    pytest.param(loop_over_a_global_list, lambda: (U,), 0, id="for-over-global-list"),
    pytest.param(zip_lists_and_ranges, lambda: (U, [0.5, 1.5, -2.0]), (0, 1), id="zip-enumerate"),
    pytest.param(dict_items, lambda: ({"a": 1.5, "b": -0.5, "skip": 9.0}, U), (0, 1), id="dict-items"),
    pytest.param(enumerate_an_array, lambda: (X,), 0, id="enumerate-array"),
    pytest.param(unrolled_break_continue, lambda: (U, [0.5, -1.0, 2.0, 4.0]), (0, 1), id="break-continue"),
    pytest.param(unrolled_return, lambda: (U, [0.1, 0.5, 4.0]), (0, 1), id="return-in-loop"),
    pytest.param(nested_unrolled, lambda: (U, (0.5, 1.5, -2.0)), (0, 1), id="nested"),
    pytest.param(appends_in_a_known_loop, lambda: (U,), 0, id="append-stack-array-sum"),
    pytest.param(comprehensions, lambda: (U, [0.5, 1.5, -2.0]), (0, 1), id="comprehensions"),
    pytest.param(nested_functions, lambda: (U, 0.7), (0, 1), id="nested-def-lambda"),
    pytest.param(closure_in_a_run_time_loop, lambda: (U, 4), 0, id="closure-in-loop"),
    pytest.param(closure_returned_by_a_helper, lambda: (U,), 0, id="closure-returned"),
    pytest.param(star_arguments, lambda: (U, [0.5, 1.5]), (0, 1), id="star-arguments"),
    pytest.param(isinstance_and_builtins, lambda: (U, 0.3, [0.5, 1.5]), (0, 1, 2), id="isinstance"),
    pytest.param(np_append_and_atleast_3d, lambda: (U, RNG.standard_normal(2)), (0, 1), id="append-atleast_3d"),
]


@pytest.mark.parametrize("fn, make, wrt", CASES)
def test_construct(fn, make, wrt, backend):
    check_forward(fn, make(), backend=backend)
    check_grad(fn, make(), wrt=wrt, backend=backend)


def test_unrolled_return_every_path(backend):
    for ws in ([0.1, 0.2], [5.0, 0.1], [-5.0, 5.0]):
        check_forward(unrolled_return, (U, ws), backend=backend)


def test_print_is_ignored_with_a_warning(backend):
    def f(x, n):
        s = 0.0
        for t in range(n):
            s = s + np.sum(x) * t
            print(f"step {t}: {s}")
        return s
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_forward(f, (U, 3), backend=backend)
    messages = [str(w.message) for w in caught if "print()" in str(w.message)]
    assert messages and "test_python_constructs.py:" in messages[0] and "ignored" in messages[0]


def grows_in_a_run_time_loop(x, n):
    out = []
    for i in range(n):
        out.append(x[i] * 2.0)
    return np.sum(np.array(out))


def grows_in_a_long_loop(x):
    out = []
    for i in range(1000):
        out.append(x * i)
    return np.sum(np.array(out))


def grows_under_a_run_time_branch(x):
    out = [x]
    if np.sum(x) > 0.0:
        out.append(x * 2.0)
    return np.sum(np.array(out))


def grows_in_a_while_loop(x):
    out = []
    s = 0.0
    while s < 3.0:
        s = s + 1.0
        out.append(x * s)
    return np.sum(np.array(out))


def keeps_a_generator(x):
    g = (v * v for v in x)
    return sum(g)


def indexes_a_list_with_a_run_time_value(x, ws, k):
    return ws[k] * np.sum(x)


@pytest.mark.parametrize("fn, args, pattern", [
    (grows_in_a_run_time_loop, (U, 3), r"test_python_constructs.py:\d+: unsupported out.append\(\) in the for loop "
                                       r"at line \d+ on a Python list made before that loop \(which runs a number "
                                       r"of times known only at run time.*preallocate an array"),
    (grows_in_a_long_loop, (U,), r"makes 1000 passes: flowgrad unrolls such a loop for at most 256.*preallocate"),
    (grows_under_a_run_time_branch, (U,), r"under the condition at line \d+ on a Python list made before that branch "
                                          r"\(known only at run time"),
    (grows_in_a_while_loop, (U,), r"while loop at line \d+"),
    (keeps_a_generator, (U,), r"test_python_constructs.py:\d+: unsupported generator expression other than as a "
                              r"call's argument: use a list comprehension"),
    (indexes_a_list_with_a_run_time_value, (U, [1.0, 2.0], 1), r"indexing a Python list, tuple or dict with a value "
                                                               r"known only at run time"),
])
def test_refused(fn, args, pattern, backend):
    with pytest.raises(flowgrad.UnsupportedError, match=pattern):
        flowgrad.jit(fn, backend=backend)(*args)


# ----------------------------------------------------------------------------- scipy.stats


pytestmark_scipy = pytest.mark.skipif(not have_module("scipy"), reason="needs scipy")


def stats_densities(x, mu, sigma, cov):
    return (np.sum(scipy.stats.norm.logpdf(x, mu, sigma)) + np.sum(scipy.stats.norm(mu, 2.0 * sigma).logpdf(x))
            + np.sum(scipy.stats.t.logpdf(x, 3.5, mu, sigma)) + np.sum(scipy.stats.norm.pdf(x, loc=mu))
            + np.sum(scipy.stats.multivariate_normal.logpdf(np.stack([x[:2], x[2:]]), np.array([mu, -mu]), cov))
            + scipy.stats.multivariate_normal.logpdf(x[:2], np.zeros(2), np.diag(cov))
            + np.sum(scipy.stats.norm.logcdf(x, mu, sigma)))


COV = np.array([[1.5, 0.3], [0.3, 0.8]])


@pytestmark_scipy
def test_scipy_stats_densities(backend):
    args = (U, 0.3, 1.7, COV)
    check_forward(stats_densities, args, backend=backend, rtol=1e-10)
    check_grad(stats_densities, args, wrt=(0, 1, 2, 3), backend=backend)


@pytest.mark.jax
@pytest.mark.skipif(not (have_module("jax") and have_module("scipy")), reason="needs jax and scipy")
def test_scipy_stats_against_jax():
    import jax
    import jax.numpy as jnp
    import jax.scipy.stats as jstats
    jax.config.update("jax_enable_x64", True)

    def theirs(x, mu, sigma, cov):
        return (jnp.sum(jstats.norm.logpdf(x, mu, sigma)) + jnp.sum(jstats.norm.logpdf(x, mu, 2.0 * sigma))
                + jnp.sum(jstats.t.logpdf(x, 3.5, mu, sigma)) + jnp.sum(jstats.norm.pdf(x, loc=mu))
                + jnp.sum(jstats.multivariate_normal.logpdf(jnp.stack([x[:2], x[2:]]), jnp.array([mu, -mu]), cov))
                + jstats.multivariate_normal.logpdf(x[:2], jnp.zeros(2), jnp.diag(jnp.diag(cov)))
                + jnp.sum(jstats.norm.logcdf(x, mu, sigma)))
    args = (U, 0.3, 1.7, COV)
    ours = flowgrad.value_and_grad(stats_densities, wrt=(0, 1, 2, 3), backend="numpy")(*args)
    value = theirs(*args)
    grads = jax.grad(theirs, argnums=(0, 1, 2, 3))(*args)
    np.testing.assert_allclose(ours[0], float(value), rtol=1e-10)
    for a, b in zip(ours[1][:3], grads[:3]):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-8, atol=1e-10)
    # SciPy's (and NumPy's Cholesky) read the lower triangle of the covariance only, so the
    # gradient flowgrad gives lies there; JAX gives its symmetric part: compare those
    sym = lambda g: (np.asarray(g) + np.asarray(g).T) / 2.0  # noqa: E731
    np.testing.assert_allclose(sym(ours[1][3]), sym(grads[3]), rtol=1e-8, atol=1e-10)


def rebinds_to_another_structure(u, n):
    st = (u,)
    for i in range(n):
        st = (u, u)
    return np.sum(st[0])


def test_rebinding_to_another_structure_in_a_run_time_loop(backend):
    with pytest.raises(flowgrad.UnsupportedError, match=r"rebinding 'st' to Python values of different structures "
                                                        r"in the for loop at line \d+.*give 'st' values of one"):
        flowgrad.jit(rebinds_to_another_structure, backend=backend)(U, 3)
