"""Forward mode: ``jvp``, ``jacfwd``, ``hvp`` and ``hessian``.

Oracles: central differences in random directions (float64) for ``jvp``; differences of the
reverse-mode gradient for ``hvp``; reverse mode row by row for ``jacfwd``; ``jax.jvp`` where JAX
is installed. The programs have ``for`` and ``while`` loops, ``break``, branches, in-place slice
updates, views, scatters and gathers, matmul, solve and reductions.
"""

import copy

import numpy as np
import pytest

import flowgrad
from flowgrad.errors import InputError, UnsupportedError

EPS = 1e-6


def U(shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def _direction(rng, v):
    return rng.standard_normal(v.shape) if isinstance(v, np.ndarray) else float(rng.standard_normal())


def _along(fn, args, positions, dirs, step):
    moved = list(copy.deepcopy(tuple(args)))
    for p, d in zip(positions, dirs):
        moved[p] = moved[p] + step * d
    return np.asarray(fn(*moved), dtype=np.float64)


def check_jvp(fn, args, wrt, backend, n_dirs=2, rtol=1e-6, atol=1e-7, seed=0):
    """flowgrad.jvp: its value equals ``fn``'s, its tangent the central difference along random
    directions, and the caller's arguments are left as they were."""
    wrt = (wrt,) if not isinstance(wrt, tuple) else wrt
    positions = [w if isinstance(w, int) else fn.__code__.co_varnames.index(w) for w in wrt]
    rng = np.random.default_rng(seed)
    saved = copy.deepcopy(tuple(args))
    expected = fn(*copy.deepcopy(tuple(args)))
    for _ in range(n_dirs):
        dirs = [_direction(rng, args[p]) for p in positions]
        tangents = [None] * len(args)
        for p, d in zip(positions, dirs):
            tangents[p] = d
        out, t = flowgrad.jvp(fn, args, tangents, wrt=wrt, backend=backend)
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12, err_msg=f"{fn.__name__}: value")
        fd = (_along(fn, args, positions, dirs, EPS) - _along(fn, args, positions, dirs, -EPS)) / (2 * EPS)
        assert np.shape(t) == np.shape(expected), f"{fn.__name__}: tangent shape {np.shape(t)}"
        np.testing.assert_allclose(t, fd, rtol=rtol, atol=atol, err_msg=f"{fn.__name__}: jvp vs differences")
    for a, b in zip(args, saved):
        np.testing.assert_array_equal(a, b, err_msg=f"{fn.__name__} changed the caller's arguments")


# ---------------------------------------------------------------------------------------
# programs
# ---------------------------------------------------------------------------------------


def heat(u, kappa, steps):
    for t in range(steps):
        u[1:-1] += kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2])
    return np.sum(u * u)


def shifted_overwrite(x, y):
    # right side first: x[1:] reads the old x[:-1]
    x[1:] = x[:-1] * y[1:] + np.sin(x[1:])
    x[0] = x[0] * x[-1]
    return np.exp(x) * x


def newton_sqrt(a, x0):
    x = x0
    while abs(x * x - a) > 1e-13 * a:
        x = 0.5 * (x + a / x)
    return x * x * x


def first_big(x, w):
    s = 0.0
    for i in range(x.shape[0]):
        if x[i] > 0.8:
            break
        s = s + np.tanh(w * x[i]) * x[i]
    return s


def branches(x, c):
    if np.sum(x) > 0:
        y = np.sin(x) * c
    else:
        y = np.cos(x) / c
    for i in range(x.shape[0]):
        if x[i] < 0:
            y[i] = y[i] * y[i]
    return y


def views(A, b):
    At = A.T
    col = A[:, 1]
    col *= 2.0
    r = At @ b
    r[::2] += np.sqrt(A[0, ::2] ** 2 + 1.0)
    return r


def scatters(x, v):
    idx = np.array([0, 2, 2, 4])
    y = np.zeros(6)
    np.add.at(y, idx, v * x[idx])
    y[np.array([1, 5])] = x[np.array([3, 0])] ** 2
    m = x > 0
    z = x.copy()
    z[m] = np.exp(x[m])
    return y + z


def linalg(A, b):
    M = A @ A.T + 3.0 * np.eye(A.shape[0])
    x = np.linalg.solve(M, b)
    L = np.linalg.cholesky(M)
    return np.concatenate([x, np.sum(L, axis=0), [np.linalg.det(M), np.linalg.slogdet(M)[1]]])


def reductions(X):
    return np.concatenate([np.sum(X * X, axis=0), np.prod(X, axis=1), [np.max(X)], np.min(X, axis=0),
                           np.cumsum(X, axis=1).ravel(), [np.mean(X)]])


def matmul_loop(W, x, n):
    h = x
    for k in range(n):
        h = np.tanh(W @ h)
    return h


def complex_abs(x, y):
    z = x + 1j * y
    w = z * z + np.exp(1j * x)
    return np.abs(w) + np.real(np.conj(w) * z) + np.angle(w)


PROGRAMS = [
    ("heat", heat, lambda: (U(9, seed=1), 0.2, 6), ("u", "kappa")),
    ("shifted_overwrite", shifted_overwrite, lambda: (U(6, seed=2), U(6, seed=3)), ("x", "y")),
    ("newton_sqrt", newton_sqrt, lambda: (2.5, 1.0), ("a",)),
    ("first_big", first_big, lambda: (np.array([0.1, -0.4, 0.5, 0.9, 0.2]), 0.7), ("x", "w")),
    ("branches_pos", branches, lambda: (np.array([0.5, -0.2, 0.3]), 1.5), ("x", "c")),
    ("branches_neg", branches, lambda: (np.array([-0.5, -0.2, 0.3]), 1.5), ("x", "c")),
    ("views", views, lambda: (U((4, 4), seed=4), U(4, seed=5)), ("A", "b")),
    ("scatters", scatters, lambda: (U(6, seed=6), U(4, seed=7)), ("x", "v")),
    ("linalg", linalg, lambda: (U((4, 4), seed=8), U(4, seed=9)), ("A", "b")),
    ("reductions", reductions, lambda: (U((3, 4), 0.5, 1.5, seed=10),), ("X",)),
    ("matmul_loop", matmul_loop, lambda: (U((4, 4), seed=11), U(4, seed=12), 3), ("W", "x")),
    ("complex_abs", complex_abs, lambda: (U(5, seed=13), U(5, seed=14)), ("x", "y")),
]


@pytest.mark.parametrize("name,fn,make,wrt", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_jvp_against_differences(name, fn, make, wrt, backend):
    check_jvp(fn, make(), wrt, backend)


@pytest.mark.parametrize("name,fn,make,wrt", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_jvp_one_argument(name, fn, make, wrt, backend):
    """Differentiating one argument: the others are constants (their tangents ignored)."""
    check_jvp(fn, make(), wrt[-1], backend, n_dirs=1, seed=1)


def test_jvp_default_wrt_is_every_float_argument(backend):
    u, v = U(9, seed=1), U(9, seed=2)
    out, t = flowgrad.jvp(heat, (u, 0.2, 5), (v, 0.5, None), backend=backend)
    _, t_u = flowgrad.jvp(heat, (u, 0.2, 5), (v, None, None), wrt="u", backend=backend)
    _, t_k = flowgrad.jvp(heat, (u, 0.2, 5), (None, 0.5, None), wrt="kappa", backend=backend)
    np.testing.assert_allclose(t, t_u + t_k, rtol=1e-12)
    g = flowgrad.grad(heat, wrt=("u", "kappa"), backend=backend)(u, 0.2, 5)
    np.testing.assert_allclose(t, g[0] @ v + g[1] * 0.5, rtol=1e-12)


def test_jvp_pytree_result(backend):
    def f(x):
        return {"s": np.sum(x * x), "y": np.sin(x)}
    x, v = U(4), U(4, seed=1)
    out, t = flowgrad.jvp(f, (x,), (v,), backend=backend)
    np.testing.assert_allclose(t["s"], 2 * x @ v, rtol=1e-12)
    np.testing.assert_allclose(t["y"], np.cos(x) * v, rtol=1e-12)


def test_jvp_source_is_printable():
    from flowgrad.api_forward import _transform
    src = _transform(heat, ("u",), "numpy", "jvp").source(U(9), 0.2, 3)
    assert "def heat_jvp(u, kappa, steps, t_u)" in src
    assert "for t in range(0, steps)" in src, "the loop stays a loop"


# ---------------------------------------------------------------------------------------
# JAX
# ---------------------------------------------------------------------------------------


@pytest.mark.jax
def test_jvp_against_jax(backend):
    jax = pytest.importorskip("jax", reason="jax is not installed: the cross-check against jax.jvp is skipped")
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def heat_jax(u, kappa):
        for _ in range(6):
            u = u.at[1:-1].add(kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2]))
        return jnp.sum(u * u)

    def linalg_jax(A, b):
        M = A @ A.T + 3.0 * jnp.eye(A.shape[0])
        x = jnp.linalg.solve(M, b)
        L = jnp.linalg.cholesky(M)
        return jnp.concatenate([x, jnp.sum(L, axis=0), jnp.array([jnp.linalg.det(M), jnp.linalg.slogdet(M)[1]])])

    def complex_jax(x, y):
        z = x + 1j * y
        w = z * z + jnp.exp(1j * x)
        return jnp.abs(w) + jnp.real(jnp.conj(w) * z) + jnp.angle(w)

    cases = [(heat, heat_jax, (U(9, seed=1), 0.2), (6,)), (linalg, linalg_jax, (U((4, 4), seed=8), U(4, seed=9)), ()),
             (complex_abs, complex_jax, (U(5, seed=13), U(5, seed=14)), ())]
    rng = np.random.default_rng(0)
    for fn, jfn, primals, extra in cases:
        tangents = tuple(_direction(rng, p) for p in primals)
        wrt = tuple(range(len(primals)))
        out, t = flowgrad.jvp(fn, primals + extra, tangents + (None,) * len(extra), wrt=wrt, backend=backend)
        jout, jt = jax.jvp(jfn, primals, tangents)
        np.testing.assert_allclose(out, np.asarray(jout), rtol=1e-10, err_msg=fn.__name__)
        np.testing.assert_allclose(t, np.asarray(jt), rtol=1e-9, atol=1e-12, err_msg=fn.__name__)


# ---------------------------------------------------------------------------------------
# jacfwd, hvp, hessian
# ---------------------------------------------------------------------------------------


def test_jacfwd_equals_reverse_mode_rows(backend):
    A, b = U((4, 4), seed=8), U(4, seed=9)
    J = flowgrad.jacfwd(linalg, wrt=0, backend=backend)(A, b)
    out, pull = flowgrad.vjp(linalg, A, b, wrt="A", backend="numpy")
    assert J.shape == out.shape + A.shape
    for i in range(out.shape[0]):
        e = np.zeros_like(out)
        e[i] = 1.0
        np.testing.assert_allclose(J[i], pull(e)[0], rtol=1e-9, atol=1e-12)


def test_jacfwd_tuple_wrt_and_scalar_result(backend):
    def f(x, c):
        return np.sum(np.sin(x) * c) + c ** 3
    x = U(5)
    jx, jc = flowgrad.jacfwd(f, wrt=(0, 1), backend=backend)(x, 0.4)
    gx, gc = flowgrad.grad(f, wrt=(0, 1), backend=backend)(x, 0.4)
    np.testing.assert_allclose(jx, gx, rtol=1e-12)
    np.testing.assert_allclose(jc, gc, rtol=1e-12)
    assert jx.shape == (5,) and np.shape(jc) == ()


@pytest.mark.parametrize("name,fn,make,wrt", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_jacrev_equals_jacfwd(name, fn, make, wrt):
    """Loops, ``while``, branches, in-place and shifted updates, scatters, solves: the Jacobian
    row by row (reverse) equals it column by column (forward), in JAX's layout."""
    args = make()
    saved = copy.deepcopy(args)
    forward = flowgrad.jacfwd(fn, wrt=wrt, backend="numpy")(*args)
    reverse = flowgrad.jacrev(fn, wrt=wrt, backend="numpy")(*args)
    assert isinstance(reverse, tuple) and len(reverse) == len(wrt)
    out = fn(*copy.deepcopy(args))
    for w, jf, jr in zip(wrt, forward, reverse):
        x = args[fn.__code__.co_varnames.index(w)]
        assert jr.shape == np.shape(out) + np.shape(x), f"{name}: {w}"
        np.testing.assert_allclose(jr, jf, rtol=1e-9, atol=1e-12, err_msg=f"{name}: {w}")
    for a, b in zip(args, saved):
        np.testing.assert_array_equal(a, b)


def test_jacrev_single_wrt_and_scalar_result(backend):
    def f(x, c):
        return np.sum(np.sin(x) * c) + c ** 3
    x = U(5)
    jx = flowgrad.jacrev(f, backend=backend)(x, 0.4)
    np.testing.assert_allclose(jx, flowgrad.grad(f, wrt=0, backend="numpy")(x, 0.4), rtol=1e-12)
    assert jx.shape == (5,)


def test_jacrev_refuses_a_tuple_result():
    with pytest.raises(InputError, match="jacrev of pair requires an array or scalar result"):
        def pair(x):
            return x * 2.0, np.sum(x)
        flowgrad.jacrev(pair, backend="numpy")(U(3))


@pytest.mark.parametrize("name,fn,make,wrt", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_linearize_equals_jvp(name, fn, make, wrt):
    args = make()
    out, f_jvp = flowgrad.linearize(fn, *args, wrt=wrt, backend="numpy")
    np.testing.assert_allclose(out, fn(*copy.deepcopy(args)), rtol=1e-12, atol=1e-12)
    rng = np.random.default_rng(5)
    positions = [fn.__code__.co_varnames.index(w) for w in wrt]
    for _ in range(2):
        tangents = [None] * len(args)
        for p in positions:
            tangents[p] = _direction(rng, args[p])
        _, expected = flowgrad.jvp(fn, args, tangents, wrt=wrt, backend="numpy")
        np.testing.assert_allclose(f_jvp(*tangents), expected, rtol=1e-12, atol=1e-12, err_msg=name)


def test_linearize_keeps_the_primals_and_checks_the_tangents():
    x = U(4)
    out, f_jvp = flowgrad.linearize(lambda x: np.sin(x) * x, x, backend="numpy")
    x0 = x.copy()
    x[:] = 7.0                       # the linearisation point is the value when linearize was called
    np.testing.assert_allclose(f_jvp(np.ones(4)), np.cos(x0) * x0 + np.sin(x0), rtol=1e-12)
    with pytest.raises(InputError, match="takes one tangent per primal: got 1 primals and 2 tangents"):
        f_jvp(np.ones(4), np.ones(4))


HVP_PROGRAMS = [
    ("heat", heat, lambda: (U(9, seed=1), 0.2, 6), "u"),
    ("heat_kappa", heat, lambda: (U(9, seed=1), 0.2, 6), "kappa"),
    ("shifted_overwrite", lambda x, y: np.sum(shifted_overwrite(x, y) ** 2), lambda: (U(6, seed=2), U(6, seed=3)), 0),
    ("first_big", first_big, lambda: (np.array([0.1, -0.4, 0.5, 0.9, 0.2]), 0.7), "x"),
    ("views", lambda A, b: np.sum(views(A, b) ** 3), lambda: (U((4, 4), seed=4), U(4, seed=5)), 0),
    ("scatters", lambda x, v: np.sum(np.sin(scatters(x, v))), lambda: (U(6, seed=6), U(4, seed=7)), 0),
    ("solve", lambda A, b: np.sum(np.linalg.solve(A @ A.T + 3 * np.eye(4), b) ** 2),
     lambda: (U((4, 4), seed=8), U(4, seed=9)), 0),
    ("matmul_loop", lambda W, x, n: np.sum(matmul_loop(W, x, n) ** 2), lambda: (U((4, 4), seed=11), U(4, seed=12), 3),
     0),
]


@pytest.mark.parametrize("name,fn,make,wrt", HVP_PROGRAMS, ids=[p[0] for p in HVP_PROGRAMS])
def test_hvp_against_differences_of_the_gradient(name, fn, make, wrt, backend):
    args = make()
    pos = wrt if isinstance(wrt, int) else fn.__code__.co_varnames.index(wrt)
    rng = np.random.default_rng(3)
    v = _direction(rng, args[pos])
    tangents = [None] * len(args)
    tangents[pos] = v
    hv = flowgrad.hvp(fn, args, tangents, wrt=wrt, backend=backend)
    g = flowgrad.grad(fn, wrt=wrt, backend="numpy")
    plus, minus = list(copy.deepcopy(args)), list(copy.deepcopy(args))
    plus[pos], minus[pos] = plus[pos] + EPS * v, minus[pos] - EPS * v
    fd = (np.asarray(g(*plus)) - np.asarray(g(*minus))) / (2 * EPS)
    assert np.shape(hv) == np.shape(args[pos])
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6)


def newton_cubic(p, x0):
    """The root of x^3 + p0 x - p1 = 0 by Newton's method in a while loop, to convergence."""
    x = x0
    err = 1.0
    while err > 1e-14:
        f = x ** 3 + p[0] * x - p[1]
        x_new = x - f / (3.0 * x ** 2 + p[0])
        err = abs(x_new - x)
        x = x_new
    return x * x + p[0] * p[1]


def test_hessian_through_a_while_newton_iteration(backend):
    """JAX cannot take this: reverse mode does not go through a while loop there."""
    p = np.array([1.3, 0.8])
    H = flowgrad.hessian(newton_cubic, backend=backend)(p, 1.0)
    assert H.shape == (2, 2)
    # the implicit function theorem: x(p) solves F(x, p) = x^3 + p0 x - p1 = 0
    g = flowgrad.grad(newton_cubic, backend="numpy")
    fd = np.stack([(g(p + EPS * e, 1.0) - g(p - EPS * e, 1.0)) / (2 * EPS) for e in np.eye(2)])
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)


def test_hessian_of_a_quadratic_form(backend):
    A = U((3, 3), seed=1)

    def f(x):
        y = x.copy()
        y[1:] += 0.5 * x[:-1]
        return y @ A @ y + np.sum(y ** 4)
    x = U(3, seed=2)
    H = flowgrad.hessian(f, backend=backend)(x)
    B = np.eye(3) + 0.5 * np.eye(3, k=-1)
    y = B @ x
    expected = B.T @ (A + A.T + np.diag(12 * y ** 2)) @ B
    np.testing.assert_allclose(H, expected, rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------------------
# refusals
# ---------------------------------------------------------------------------------------


def test_op_without_a_tangent_rule_is_named(monkeypatch):
    from flowgrad.autodiff.rules import CALLS
    monkeypatch.setattr(CALLS["eigh"], "jvp", None)      # every op has one: take one away

    def f(A):
        w, V = np.linalg.eigh(A + A.T)
        return np.sum(w * w)
    with pytest.raises(UnsupportedError, match=r"test_forward_mode.py:\d+: unsupported forward-mode differentiation "
                                               r"of eigh: it has no tangent rule"):
        flowgrad.jvp(f, (U((3, 3)),), (U((3, 3)),), backend="numpy")


def test_integer_argument_gets_no_tangent():
    with pytest.raises(InputError, match="only float"):
        flowgrad.jvp(heat, (U(9), 0.2, 3), (U(9), 0.1, 1), wrt=("u", "steps"), backend="numpy")


def test_tangent_shape_is_checked():
    with pytest.raises(InputError, match="has shape"):
        flowgrad.jvp(heat, (U(9), 0.2, 3), (U(8), None, None), wrt="u", backend="numpy")


def test_every_op_has_its_rules():
    """Every differentiable primitive has a tangent and an adjoint (an adjoint call: a tangent),
    and every call both lowerings; what needs none says why in the rule table itself."""
    from flowgrad.autodiff.rules import CALLS, missing_rules
    from flowgrad.backends.native_calls import CALL_LOWERING
    assert missing_rules(CALL_LOWERING) == []
    assert all(callable(rule.numpy) for rule in CALLS.values())
    assert "missing: nothing" in flowgrad.coverage()


def test_missing_rules_names_the_op_and_what_it_lacks():
    from flowgrad.autodiff.rules import CALLS, CallRule, missing_rules
    CALLS["made_up"] = CallRule(lambda i, a: "0.0", doc="test op")
    try:
        assert {"made_up: no tangent (jvp)", "made_up: no adjoint (vjp)", "made_up: no lowering"} <= \
            set(missing_rules(lowered=()))
    finally:
        del CALLS["made_up"]


def test_coverage_reports_tangents():
    text = flowgrad.coverage()
    assert "solve" in text and "jvp" in text and "adjoint of eigh" in text
    from flowgrad.autodiff.rules import CALLS
    for name in ("sum", "prod", "max", "matmul", "solve", "det", "slogdet", "cholesky", "cumsum", "gather",
                 "scatter", "add_at", "mask_gather", "mask_scatter", "einsum", "fft", "solve_triangular"):
        assert CALLS[name].jvp is not None, f"{name} has no tangent rule"


# ---------------------------------------------------------------------------------------
# every program of the feature tests and of the kernel corpus
# ---------------------------------------------------------------------------------------

from test_features import CASES as FEATURE_CASES  # noqa: E402

try:
    import benchmarks.kernels as kernels
    CORPUS = list(kernels.NAMES)
except ImportError:          # the corpus is optional
    kernels, CORPUS = None, []


def _wrt_tuple(wrt):
    return tuple(wrt) if isinstance(wrt, (tuple, list)) else (wrt,)


@pytest.mark.parametrize("fn, make, wrt", FEATURE_CASES)
def test_feature_jvp(fn, make, wrt, backend):
    check_jvp(fn, make(), _wrt_tuple(wrt), backend, n_dirs=1, rtol=1e-5, atol=1e-6)


# the native runs of the whole corpus compile about 100 programs: a slow test (-m slow)
NUMPY_AND_SLOW_NATIVE = ["numpy", pytest.param("native", marks=[pytest.mark.native, pytest.mark.slow])]


@pytest.mark.skipif(not CORPUS, reason="benchmarks.kernels is not importable")
@pytest.mark.parametrize("backend", NUMPY_AND_SLOW_NATIVE)
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_jvp(name, backend):
    mod = kernels.load(name)
    check_jvp(mod.kernel, mod.args("test"), _wrt_tuple(mod.WRT), backend, n_dirs=1, rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not CORPUS, reason="benchmarks.kernels is not importable")
@pytest.mark.parametrize("backend", NUMPY_AND_SLOW_NATIVE)
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_hvp(name, backend):
    """H v against central differences of the reverse-mode gradient, for the first wrt argument."""
    mod = kernels.load(name)
    args = mod.args("test")
    wrt = _wrt_tuple(mod.WRT)[0]
    pos = wrt if isinstance(wrt, int) else mod.kernel.__code__.co_varnames.index(wrt)
    v = _direction(np.random.default_rng(0), args[pos])
    tangents = [None] * len(args)
    tangents[pos] = v
    hv = flowgrad.hvp(mod.kernel, args, tangents, wrt=wrt, backend=backend)
    g, eps = flowgrad.grad(mod.kernel, wrt=wrt, backend="numpy"), 1e-5
    plus, minus = list(copy.deepcopy(args)), list(copy.deepcopy(args))
    plus[pos], minus[pos] = plus[pos] + eps * v, minus[pos] - eps * v
    fd = (np.asarray(g(*plus)) - np.asarray(g(*minus))) / (2 * eps)
    np.testing.assert_allclose(hv, fd, rtol=1e-4, atol=1e-4 * (np.max(np.abs(fd)) + 1e-8))


# ---------------------------------------------------------------------------------------
# many directions in one program (jacfwd, hessian)
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("name,fn,make,wrt", HVP_PROGRAMS, ids=[p[0] for p in HVP_PROGRAMS])
def test_hessian_rows_are_hvps(name, fn, make, wrt):
    """The batched Hessian times a direction equals the difference of the gradient along it
    (and the one-direction hvp)."""
    args = make()
    pos = wrt if isinstance(wrt, int) else fn.__code__.co_varnames.index(wrt)
    H = flowgrad.hessian(fn, wrt=wrt, backend="numpy")(*args)
    x = args[pos]
    v = _direction(np.random.default_rng(3), x)
    tangents = [None] * len(args)
    tangents[pos] = v
    hv = flowgrad.hvp(fn, args, tangents, wrt=wrt, backend="numpy")
    Hv = np.tensordot(H, v, axes=np.ndim(x))
    np.testing.assert_allclose(Hv, hv, rtol=1e-10, atol=1e-12)
    g = flowgrad.grad(fn, wrt=wrt, backend="numpy")
    plus, minus = list(copy.deepcopy(args)), list(copy.deepcopy(args))
    plus[pos], minus[pos] = plus[pos] + EPS * v, minus[pos] - EPS * v
    fd = (np.asarray(g(*plus)) - np.asarray(g(*minus))) / (2 * EPS)
    np.testing.assert_allclose(Hv, fd, rtol=1e-5, atol=1e-6)


def _counting(transform, monkeypatch):
    """Count the calls of the compiled programs of ``transform`` (a jacfwd or hessian)."""
    calls = []
    compiled = transform.t.compiled

    def counted(*a, **k):
        entry = compiled(*a, **k)
        func = entry.func
        if not getattr(func, "_counted", False):
            def wrapped(*args):
                calls.append(args)
                return func(*args)
            wrapped._counted = True
            monkeypatch.setattr(entry, "func", wrapped)
        return entry
    monkeypatch.setattr(transform.t, "compiled", counted)
    return calls


def test_jacfwd_and_hessian_run_one_program_for_all_directions(backend, monkeypatch):
    def f(x):
        y = x.copy()
        for i in range(1, x.shape[0]):
            y[i] = y[i] + np.sin(y[i - 1]) * x[i]
        return y
    x = U(6, seed=4)
    jac = flowgrad.jacfwd(f, backend=backend)
    calls = _counting(jac, monkeypatch)
    J = jac(x)
    assert len(calls) == 1 and calls[0][-1] == 6          # six directions, one call
    _, pull = flowgrad.vjp(f, x, backend="numpy")
    np.testing.assert_allclose(J, np.stack([pull(e)[0] for e in np.eye(6)]), rtol=1e-12, atol=1e-14)
    hess = flowgrad.hessian(lambda x: np.sum(f(x) ** 2), backend=backend)
    calls = _counting(hess, monkeypatch)
    H = hess(x)
    assert len(calls) == 1 and calls[0][-1] == 6
    np.testing.assert_allclose(H, H.T, rtol=1e-10, atol=1e-12)


def test_many_directions_are_taken_in_several_calls(monkeypatch):
    """A Jacobian too large for one batch of directions is taken in several, with the same result."""
    import flowgrad.api_forward as api_forward
    x, y = U(7, seed=5), U(3, seed=6)

    def f(x, y):
        return np.cumsum(np.sin(x) * y[0]) + y[1] * y[2]
    whole = flowgrad.jacfwd(f, wrt=(0, 1), backend="numpy")(x, y)
    monkeypatch.setattr(api_forward, "DIRECTIONS_BYTES", 16 * 7 * 3)        # three directions a call
    jac = flowgrad.jacfwd(f, wrt=(0, 1), backend="numpy")
    calls = _counting(jac, monkeypatch)
    parts = jac(x, y)
    assert [c[-1] for c in calls] == [3, 3, 3, 1]
    for a, b in zip(whole, parts):
        np.testing.assert_array_equal(a, b)

    def g(x):                        # an intermediate larger than the input and the result
        y = np.outer(x, x)
        y[0, 0] = 1.0
        return np.sum(np.sin(y) ** 2, axis=0)
    x4 = U(4, seed=7)
    whole = flowgrad.jacfwd(g, backend="numpy")(x4)
    monkeypatch.setattr(api_forward, "DIRECTIONS_BYTES", 16 * 16 * 2)       # the 4 x 4 outer product: two
    jac = flowgrad.jacfwd(g, backend="numpy")
    calls = _counting(jac, monkeypatch)
    np.testing.assert_array_equal(jac(x4), whole)
    assert [c[-1] for c in calls] == [2, 2]


def cholesky_logdet(A):
    """log det of a symmetric positive definite matrix by a hand-written Cholesky factorisation:
    loops whose bounds depend on the outer index (``range(j)``, ``range(j + 1, n)``)."""
    n = A.shape[0]
    L = np.zeros_like(A)
    for j in range(n):
        s = A[j, j]
        for k in range(j):
            s -= L[j, k] ** 2
        L[j, j] = np.sqrt(s)
        for i in range(j + 1, n):
            t = A[i, j]
            for k in range(j):
                t -= L[i, k] * L[j, k]
            L[i, j] = t / L[j, j]
    return 2.0 * np.sum(np.log(np.diag(L)))


def test_hessian_of_a_triangular_factorisation(backend):
    """JAX cannot take this as written: loops with bounds set by the outer loop's index. The
    factorisation reads the lower triangle, so log det's Hessian is that of the symmetrised
    matrix: d2/dA_ij dA_kl log det(A) = -(A^-1)_li (A^-1)_jk over the lower entries."""
    rng = np.random.default_rng(7)
    B = rng.standard_normal((4, 4))
    A = B @ B.T + 4.0 * np.eye(4)
    H = flowgrad.hessian(cholesky_logdet, backend=backend)(A)
    assert H.shape == (4, 4, 4, 4)
    np.testing.assert_allclose(cholesky_logdet(A.copy()), np.linalg.slogdet(A)[1], rtol=1e-12)
    # the oracle: differences of the reverse-mode gradient in every direction
    g = flowgrad.grad(cholesky_logdet, backend="numpy")
    fd = np.zeros((4, 4, 4, 4))
    for k in range(4):
        for l in range(4):
            E = np.zeros((4, 4))
            E[k, l] = EPS
            fd[:, :, k, l] = (g(A + E) - g(A - E)) / (2 * EPS)
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-7)
    # and in closed form, for the lower triangle the factorisation reads (each off-diagonal
    # entry stands for two of the symmetric matrix)
    Ai = np.linalg.inv(A)
    low = [(i, j) for i in range(4) for j in range(i + 1)]
    for (i, j) in low:
        for (k, l) in low:
            w1 = 1.0 if i == j else 2.0
            w2 = 1.0 if k == l else 2.0
            sym = -0.5 * (Ai[l, i] * Ai[j, k] + Ai[k, i] * Ai[j, l])
            np.testing.assert_allclose(H[i, j, k, l], w1 * w2 * sym, rtol=1e-8, atol=1e-10)
    upper = [(i, j) for i in range(4) for j in range(i + 1, 4)]
    assert all(np.all(H[i, j] == 0.0) for i, j in upper)        # never read: no derivative


@pytest.mark.skipif(not CORPUS, reason="benchmarks.kernels is not importable")
@pytest.mark.parametrize("backend", NUMPY_AND_SLOW_NATIVE)
@pytest.mark.parametrize("name", CORPUS)
def test_corpus_jacfwd_and_hessian(name, backend):
    """Every input direction in one program: jacfwd of the scalar kernel is its reverse-mode
    gradient; its Hessian times a direction is the one-direction hvp (itself checked against
    differences of the gradient in ``test_corpus_hvp``)."""
    mod = kernels.load(name)
    args = mod.args("test")
    saved = copy.deepcopy(args)
    wrt = _wrt_tuple(mod.WRT)
    J = flowgrad.jacfwd(mod.kernel, wrt=wrt, backend=backend)(*args)
    G = flowgrad.grad(mod.kernel, wrt=wrt, backend="numpy")(*args)
    for j, g in zip(J, G if isinstance(G, tuple) else (G,)):
        np.testing.assert_allclose(j, g, rtol=1e-9, atol=1e-12 * (np.max(np.abs(g)) + 1.0))
    pos = mod.kernel.__code__.co_varnames.index(wrt[0]) if not isinstance(wrt[0], int) else wrt[0]
    H = flowgrad.hessian(mod.kernel, wrt=wrt[0], backend=backend)(*args)
    v = _direction(np.random.default_rng(1), args[pos])
    tangents = [None] * len(args)
    tangents[pos] = v
    hv = flowgrad.hvp(mod.kernel, args, tangents, wrt=wrt[0], backend="numpy")
    np.testing.assert_allclose(np.tensordot(H, v, axes=np.ndim(v)), hv, rtol=1e-9,
                               atol=1e-12 * (np.max(np.abs(hv)) + 1.0))
    for a, b in zip(args, saved):
        np.testing.assert_array_equal(a, b)


def rebinds_an_undifferentiated_argument(x, A):
    for i in range(3):
        A = 0.5 * np.tanh(A @ A.T) + 0.5 * A      # A read, then rebound: its tangent starts at 0
        A[1, :] = 0.8 * A[1, :] + 0.2 * np.sin(x[1:4])
    return np.sum(np.cos(A)) + np.sum(x ** 2)


def test_tangent_of_an_argument_read_before_a_loop_rebinds_it_starts_at_zero(backend):
    # (random program 33) the tangent of A was left unset because its first write overwrites
    # it whole, though the loop reads A before: the hvp came out as whatever the memory held
    x, A = U(5, seed=1), U((3, 3), seed=2)
    check_jvp(rebinds_an_undifferentiated_argument, (x, A), ("x",), backend)
    v = _direction(np.random.default_rng(0), x)
    hv = flowgrad.hvp(rebinds_an_undifferentiated_argument, (x, A), (v, None), wrt="x", backend=backend)
    g = flowgrad.grad(rebinds_an_undifferentiated_argument, wrt="x", backend="numpy")
    fd = (g(x + EPS * v, A) - g(x - EPS * v, A)) / (2 * EPS)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-7)
    tp = flowgrad.api_forward._transform(rebinds_an_undifferentiated_argument, "x", backend, "hvp")
    text = next(iter(tp.cache.values())).ir_text()
    assert any(line.strip().startswith("t_A = 0") for line in text.splitlines()), text


# ---------------------------------------------------------------------------------------
# transforms of grad(f): forward over reverse
# ---------------------------------------------------------------------------------------


def sweep_with_a_parameter(x, c):
    y = x.copy()
    for i in range(1, x.shape[0]):
        y[i] = y[i] + np.sin(y[i - 1]) * x[i] * c
    return np.sum(y ** 2)


def test_transforms_of_grad(backend):
    """jvp, jacfwd, linearize and jit take grad(f) as JAX's do: jvp(grad(f)) is the hvp,
    jacfwd(grad(f)) the Hessian, and a tangent in another argument the mixed derivative."""
    x, v = U(5, seed=3), U(5, seed=4)
    g = flowgrad.grad(sweep_with_a_parameter, backend=backend)
    gx = flowgrad.grad(sweep_with_a_parameter, backend="numpy")(x, 0.7)
    out, t = flowgrad.jvp(g, (x, 0.7), (v, None), wrt="x", backend=backend)
    np.testing.assert_allclose(out, gx, rtol=1e-13)
    plus = flowgrad.grad(sweep_with_a_parameter, backend="numpy")(x + EPS * v, 0.7)
    minus = flowgrad.grad(sweep_with_a_parameter, backend="numpy")(x - EPS * v, 0.7)
    np.testing.assert_allclose(t, (plus - minus) / (2 * EPS), rtol=1e-6, atol=1e-8)
    H = flowgrad.jacfwd(g, backend=backend)(x, 0.7)
    np.testing.assert_allclose(H, flowgrad.hessian(sweep_with_a_parameter, backend=backend)(x, 0.7),
                               rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(H @ v, t, rtol=1e-12, atol=1e-14)
    _, t_c = flowgrad.jvp(g, (x, 0.7), (None, 1.0), wrt="c", backend=backend)
    gp = flowgrad.grad(sweep_with_a_parameter, backend="numpy")
    np.testing.assert_allclose(t_c, (gp(x, 0.7 + EPS) - gp(x, 0.7 - EPS)) / (2 * EPS), rtol=1e-6, atol=1e-8)
    _, f_jvp = flowgrad.linearize(g, x, 0.7, wrt="x", backend=backend)
    np.testing.assert_allclose(f_jvp(v, None), t, rtol=1e-13)
    np.testing.assert_allclose(flowgrad.jit(g, backend=backend)(x, 0.7), gx, rtol=1e-13)
    # a scalar function of a scalar: the second derivative
    d2 = flowgrad.jacfwd(flowgrad.grad(lambda s: s ** 3 * np.sin(s), backend=backend), backend=backend)(0.4)
    np.testing.assert_allclose(d2, 6 * 0.4 * np.sin(0.4) + 6 * 0.4 ** 2 * np.cos(0.4) - 0.4 ** 3 * np.sin(0.4),
                               rtol=1e-12)
