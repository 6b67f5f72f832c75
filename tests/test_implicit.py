"""Fixed points differentiated implicitly (``flowgrad.fixed_point``).

Oracles: central differences of the NumPy function (``fixed_point`` outside captured code is the
plain iteration); the gradient of the same iteration written as a ``while`` loop, differentiated
through the loop (within 1e-8 at convergence); JAX's derivatives of the fixed point by the
implicit function theorem where JAX is installed.
"""
import numpy as np
import pytest

import flowgrad
from conftest import have_module

EPS = 1e-6
W = np.random.default_rng(1).normal(size=(6, 6)) * 0.15


def step(x, b, a):
    return 0.5 * np.cos(a * x) + 0.3 * (W @ np.tanh(x)) + b


def implicit_loss(b, a):
    x = flowgrad.fixed_point(step, np.zeros_like(b), b, a, tol=1e-14)
    return np.sum(x ** 2) + a * np.sum(x)


def loop_loss(b, a):
    x = np.zeros_like(b)
    err = 1.0
    while err > 1e-14:
        new = 0.5 * np.cos(a * x) + 0.3 * (W @ np.tanh(x)) + b
        err = np.max(np.abs(new - x))
        x = new
    return np.sum(x ** 2) + a * np.sum(x)


def _args():
    return np.linspace(0.1, 1.0, 6), 1.3


def test_outside_captured_code_it_is_the_iteration():
    b, a = _args()
    assert implicit_loss(b, a) == loop_loss(b, a)


def test_gradient_against_differences_and_the_loop(backend):
    b, a = _args()
    assert flowgrad.jit(implicit_loss, backend=backend)(b, a) == pytest.approx(loop_loss(b, a), rel=1e-14)
    gb, ga = flowgrad.grad(implicit_loss, wrt=(0, 1), backend=backend)(b, a)
    lb, la = flowgrad.grad(loop_loss, wrt=(0, 1), backend=backend)(b, a)
    np.testing.assert_allclose(gb, lb, rtol=1e-8, atol=1e-10)
    assert ga == pytest.approx(la, rel=1e-8)
    d = np.random.default_rng(2).standard_normal(6)
    fd = (loop_loss(b + EPS * d, a) - loop_loss(b - EPS * d, a)) / (2 * EPS)
    assert gb @ d == pytest.approx(fd, rel=1e-6)


def test_tangents_and_second_derivatives(backend):
    b, a = _args()
    d = np.random.default_rng(3).standard_normal(6)
    out, t = flowgrad.jvp(implicit_loss, (b, a), (d, 0.5), backend=backend)
    fd = (loop_loss(b + EPS * d, a + EPS * 0.5) - loop_loss(b - EPS * d, a - EPS * 0.5)) / (2 * EPS)
    assert t == pytest.approx(fd, rel=1e-6)
    # forward over reverse and reverse over reverse agree with differences of the gradient
    g = flowgrad.grad(loop_loss, backend="numpy")
    expected = (g(b + EPS * d, a) - g(b - EPS * d, a)) / (2 * EPS)
    np.testing.assert_allclose(flowgrad.hvp(implicit_loss, (b, a), (d, None), backend=backend), expected,
                               rtol=1e-5, atol=1e-7)
    hv = flowgrad.grad(lambda b: flowgrad.grad(implicit_loss)(b, a) @ d, backend=backend)(b)
    np.testing.assert_allclose(hv, expected, rtol=1e-5, atol=1e-7)


def test_a_scalar_fixed_point_and_a_value_the_step_closes_over(backend):
    c = np.array([0.3, -0.2, 0.5])

    def loss(s, v):
        # the step reads v through its closure, not as a parameter: its derivative still flows
        x = flowgrad.fixed_point(lambda x, s: 0.4 * np.sin(x) + s * np.sum(v * c), 0.0, s)
        return x * x

    def plain(s, v):
        x = 0.0
        for _ in range(1000):
            new = 0.4 * np.sin(x) + s * np.sum(v * c)
            done = abs(new - x) <= 1e-10
            x = new
            if done:
                break
        return x * x

    s, v = 0.7, np.array([1.0, 2.0, -1.0])
    gs, gv = flowgrad.grad(loss, wrt=(0, 1), backend=backend)(s, v)
    assert gs == pytest.approx((plain(s + EPS, v) - plain(s - EPS, v)) / (2 * EPS), rel=1e-6)
    d = np.array([0.3, -1.0, 0.4])
    assert gv @ d == pytest.approx((plain(s, v + EPS * d) - plain(s, v - EPS * d)) / (2 * EPS), rel=1e-6)


def test_batched_directions_are_refused_by_name():
    b, a = _args()
    with pytest.raises(flowgrad.UnsupportedError, match=r"test_implicit.py:\d+: unsupported batched directions "
                                                        r"\(jacfwd, hessian\) through control flow"):
        flowgrad.hessian(implicit_loss, backend="numpy")(b, a)
    # jacrev (reverse mode, row by row) takes it
    J = flowgrad.jacrev(lambda b: flowgrad.fixed_point(step, np.zeros_like(b), b, 1.3), backend="numpy")(b)
    assert J.shape == (6, 6)


def test_a_step_of_the_wrong_shape_is_refused():
    def loss(b):
        return np.sum(flowgrad.fixed_point(lambda x, b: np.sum(x * b), np.zeros(3), b))
    with pytest.raises(flowgrad.InputError, match="the step of fixed_point .* returns shape"):
        flowgrad.grad(loss)(np.ones(3))


@pytest.mark.jax
@pytest.mark.skipif(not have_module("jax"), reason="needs jax")
def test_against_jax_implicit_function_theorem():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    b, a = _args()
    x = flowgrad.fixed_point(step, np.zeros_like(b), b, a, tol=1e-15)

    def stepj(x, b):
        return 0.5 * jnp.cos(a * x) + 0.3 * (W @ jnp.tanh(x)) + b
    jx = jax.jacobian(stepj, 0)(x, b)
    jb = jax.jacobian(stepj, 1)(x, b)
    dxdb = np.linalg.solve(np.eye(6) - jx, jb)
    expected = (2 * x + a) @ dxdb
    np.testing.assert_allclose(flowgrad.grad(implicit_loss, backend="numpy")(b, a), expected, rtol=1e-10)


def _slow_rotation(n=6, rate=0.999, seed=4):
    """A linear step whose Jacobian is a rotation scaled by ``rate``: not symmetric, and the
    iteration contracts by only 0.1% a step (some 25,000 steps to 1e-11)."""
    rng = np.random.default_rng(seed)
    q, _ = np.linalg.qr(rng.standard_normal((n, n)))
    return rate * q


def test_a_slowly_contracting_nonsymmetric_fixed_point(backend):
    """The adjoint and the tangent are solved by a Krylov method: exact against the linear solve
    ``x* = (I - M)^-1 b``, whose gradient of ``w . x*`` is ``(I - M)^-T w``."""
    M = _slow_rotation()
    w = np.linspace(-1.0, 1.0, M.shape[0])

    def loss(b):
        x = flowgrad.fixed_point(lambda x, b: M @ x + b, np.zeros_like(b), b, tol=1e-11, max_iter=100_000)
        return np.sum(w * x)

    b = np.cos(np.arange(M.shape[0]))
    eye = np.eye(M.shape[0])
    want = np.linalg.solve((eye - M).T, w)
    got = flowgrad.grad(loss, backend=backend)(b)
    np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-9)
    d = np.sin(np.arange(M.shape[0]) + 1.0)
    _, tangent = flowgrad.jvp(loss, (b,), (d,), backend=backend)
    np.testing.assert_allclose(tangent, w @ np.linalg.solve(eye - M, d), rtol=1e-7)


# ---------------------------------------------------------------- implicit_while=True


def picard(f, c, tol):
    """The Picard iteration of the benchmark, written as a user writes it."""
    u = np.zeros_like(f)
    err = 1.0
    k = 0
    while err > tol:
        left = np.concatenate((np.zeros(1), u[:-1]))
        right = np.concatenate((u[1:], np.zeros(1)))
        new = (5.0 * (left + right) + f - c * np.tanh(u)) / 11.0
        err = np.max(np.abs(new - u))
        u = new
        k += 1
    return np.sum(u * u) + 0.0 * k


def test_implicit_while_matches_the_loop_with_memory_independent_of_the_count(backend):
    f = np.sin(3 * np.pi * np.linspace(0.0, 1.0, 300)) + 0.5
    through = flowgrad.grad(picard, wrt=(0, 1), backend=backend)(f, 0.5, 1e-13)
    g = flowgrad.grad(picard, wrt=(0, 1), backend=backend, implicit_while=True)
    got = g(f, 0.5, 1e-13)
    np.testing.assert_allclose(got[0], through[0], rtol=0, atol=1e-8 * np.max(np.abs(through[0])))
    assert abs(got[1] - through[1]) <= 1e-8 * abs(through[1])
    plan = flowgrad.explain(picard, f, 0.5, 1e-13, wrt=(0, 1), backend=backend, implicit_while=True)
    assert not plan.loops and any(v.decision.startswith("implicit") for v in plan.values)
    if backend == "numpy":
        import tracemalloc
        peaks = []
        for tol in (1e-4, 1e-12):          # about 60 and 300 iterations
            g(f, 0.5, tol)
            tracemalloc.start()
            g(f, 0.5, tol)
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()
        assert peaks[1] <= 1.1 * peaks[0], peaks


def halving(x, s):
    while np.max(x) > 1.0:               # a test on the iterate alone: not a fixed point
        x = 0.5 * x * s
    return np.sum(x * x)


def two_states(u, dt):
    t = 0.0
    while t < 1.0:                       # a time loop: u and t carried, no fixed point
        u = u + dt * np.sin(u)
        t = t + dt
    return np.sum(u)


@pytest.mark.parametrize("fn,args", [(halving, (np.array([3.0, 5.0, 7.0]), 1.1)),
                                     (two_states, (np.array([0.3, 0.7]), 0.125))])
def test_implicit_while_leaves_other_loops_to_differentiation_through(fn, args):
    want = flowgrad.grad(fn, wrt=(0, 1), backend="numpy")(*args)
    got = flowgrad.grad(fn, wrt=(0, 1), backend="numpy", implicit_while=True)(*args)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)
    plan = flowgrad.explain(fn, *args, wrt=(0, 1), backend="numpy", implicit_while=True)
    assert not any(v.decision.startswith("implicit") for v in plan.values)


def test_implicit_while_on_vjp_value_and_grad_and_pickled():
    import pickle
    f = np.sin(np.linspace(0.0, 3.0, 40)) + 0.5
    want = flowgrad.grad(picard, wrt=(0, 1), backend="numpy")(f, 0.5, 1e-13)
    value, got = flowgrad.value_and_grad(picard, wrt=(0, 1), backend="numpy", implicit_while=True)(f, 0.5, 1e-13)
    assert value == pytest.approx(picard(f, 0.5, 1e-13), rel=1e-14)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-8, atol=1e-12)
    _, pull = flowgrad.vjp(picard, f, 0.5, 1e-13, wrt=(0, 1), backend="numpy", implicit_while=True)
    np.testing.assert_allclose(pull(1.0)[0], want[0], rtol=1e-8, atol=1e-12)
    g = pickle.loads(pickle.dumps(flowgrad.grad(picard, wrt=(0, 1), backend="numpy", implicit_while=True)))
    assert g.implicit_while
    np.testing.assert_allclose(g(f, 0.5, 1e-13)[0], want[0], rtol=1e-8, atol=1e-12)
