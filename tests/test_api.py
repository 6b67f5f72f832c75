"""The public API: wrt conventions, value_and_grad, vjp, jit, caching, source/ir.

Where a gradient has a closed form the test compares against it; elsewhere the oracles
(finite differences, plain NumPy) decide.
"""

import numpy as np
import pytest

import flowgrad
from oracle import check_forward, check_grad, check_vjp


def U(shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def assert_close(got, expected, what=""):
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12, err_msg=what)


# ---------------------------------------------------------------------------------------
# wrt: name, position, tuple, default
# ---------------------------------------------------------------------------------------


def three_args(A, B, c):
    return np.sum(A * B) + c * np.sum(A ** 2) + c ** 2


def three_args_inputs():
    A, B, c = U((3, 4)), U((3, 4), seed=1), 0.7
    grads = {"A": B + 2.0 * c * A, "B": A.copy(), "c": float(np.sum(A ** 2) + 2.0 * c)}
    return (A, B, c), grads


def test_wrt_by_name(backend):
    args, expected = three_args_inputs()
    g = flowgrad.grad(three_args, wrt="B", backend=backend)(*args)
    assert isinstance(g, np.ndarray), f"one wrt name gives one array, got {type(g)}"
    assert_close(g, expected["B"])


def test_wrt_by_position(backend):
    args, expected = three_args_inputs()
    g = flowgrad.grad(three_args, wrt=1, backend=backend)(*args)
    assert isinstance(g, np.ndarray)
    assert_close(g, expected["B"])


def test_wrt_default_is_first_argument(backend):
    args, expected = three_args_inputs()
    g = flowgrad.grad(three_args, backend=backend)(*args)
    assert isinstance(g, np.ndarray) and g.shape == args[0].shape
    assert_close(g, expected["A"])


def test_wrt_tuple_mixes_names_and_positions(backend):
    args, expected = three_args_inputs()
    gA, gc = flowgrad.grad(three_args, wrt=("A", 2), backend=backend)(*args)
    assert_close(gA, expected["A"], "dA")
    assert_close(gc, expected["c"], "dc")


def test_wrt_tuple_keeps_the_given_order(backend):
    args, expected = three_args_inputs()
    grads = flowgrad.grad(three_args, wrt=("c", "B", 0), backend=backend)(*args)
    assert isinstance(grads, tuple) and len(grads) == 3
    for name, g in zip(("c", "B", "A"), grads):
        assert_close(g, expected[name], f"d{name}")


def test_wrt_one_element_tuple_gives_a_tuple(backend):
    args, expected = three_args_inputs()
    grads = flowgrad.grad(three_args, wrt=("A",), backend=backend)(*args)
    assert isinstance(grads, tuple) and len(grads) == 1
    assert_close(grads[0], expected["A"])


def test_float_scalar_argument_gradient_is_a_float(backend):
    args, expected = three_args_inputs()
    gc = flowgrad.grad(three_args, wrt="c", backend=backend)(*args)
    assert isinstance(gc, float), f"a float argument's gradient should be a float, got {type(gc)}"
    assert_close(gc, expected["c"])


def test_same_function_different_wrt(backend):
    args, expected = three_args_inputs()
    for name in ("A", "B", "c", "A"):
        g = flowgrad.grad(three_args, wrt=name, backend=backend)(*args)
        assert_close(g, expected[name], f"d{name}")


def test_value_and_grad(backend):
    args, expected = three_args_inputs()
    value, (gA, gB) = flowgrad.value_and_grad(three_args, wrt=("A", "B"), backend=backend)(*args)
    assert np.ndim(value) == 0
    assert_close(value, three_args(*args))
    assert_close(gA, expected["A"])
    assert_close(gB, expected["B"])


# ---------------------------------------------------------------------------------------
# Gradients that are exactly zero
# ---------------------------------------------------------------------------------------


def ignores_y(x, y, n):
    s = np.sum(x ** 2)
    if n > 100:
        s = s + np.sum(y)
    return s


def test_gradient_of_unread_argument_is_exact_zero(backend):
    x, y = U((4,)), U((2, 3), seed=1)
    gx, gy = flowgrad.grad(ignores_y, wrt=("x", "y"), backend=backend)(x, y, 3)
    assert_close(gx, 2.0 * x)
    assert isinstance(gy, np.ndarray) and gy.shape == y.shape and gy.dtype == np.float64
    assert np.array_equal(gy, np.zeros_like(y)), f"expected exact zeros, got {gy!r}"


def test_gradient_through_the_other_branch_is_not_zero(backend):
    x, y = U((4,)), U((2, 3), seed=1)
    gy = flowgrad.grad(ignores_y, wrt="y", backend=backend)(x, y, 101)
    assert_close(gy, np.ones_like(y))


# ---------------------------------------------------------------------------------------
# The caller's arrays are never modified, and repeated calls agree
# ---------------------------------------------------------------------------------------


def mutates_everything(A, B, n):
    A *= 2.0
    A[0] = A[1] * B[0]
    for t in range(n):
        B[1:] = B[1:] + 0.5 * np.sin(A[1:])
        A += B * 0.1
    B[:] = 0.0
    return np.sum(A ** 2)


def test_caller_arrays_unchanged_and_calls_repeatable(backend):
    A, B = U((3, 4)), U((3, 4), seed=1)
    A0, B0 = A.copy(), B.copy()
    g = flowgrad.grad(mutates_everything, wrt=("A", "B"), backend=backend)
    first = g(A, B, 3)
    assert np.array_equal(A, A0) and np.array_equal(B, B0), "grad modified the caller's arrays"
    second = g(A, B, 3)
    for a, b in zip(first, second):
        assert np.array_equal(a, b), "two calls with the same inputs gave different gradients"
    check_grad(mutates_everything, (A, B, 3), ("A", "B"), backend=backend)


# ---------------------------------------------------------------------------------------
# Caching: shapes, int and float scalars change between calls
# ---------------------------------------------------------------------------------------


def shape_generic(x):
    return np.sum(np.sin(x) * x)


def test_cache_across_shapes(backend):
    g = flowgrad.grad(shape_generic, backend=backend)
    for i, shape in enumerate([(3,), (5,), (2, 3), (3,), (1,), (2, 3)]):
        x = U(shape, seed=i)
        got = g(x)
        assert got.shape == shape, f"call {i}: gradient shape {got.shape} for input {shape}"
        assert_close(got, np.cos(x) * x + np.sin(x), f"call {i}, shape {shape}")


def steps(x, n, dt):
    y = x.copy()
    for t in range(n):
        y = y + dt * np.sin(y) * x
    return np.sum(y ** 2)


def test_cache_across_int_scalars(backend):
    x = U((4,))
    vg = flowgrad.value_and_grad(steps, wrt="x", backend=backend)
    for n in [3, 1, 0, 5, 3]:
        _, (gx,) = check_grad(steps, (x, n, 0.1), "x", backend=backend, vg=vg)
        if n == 0:
            assert_close(gx, 2.0 * x, "n=0: no step taken")


def test_cache_across_float_scalars(backend):
    x = U((4,))
    vg = flowgrad.value_and_grad(steps, wrt=("x", "dt"), backend=backend)
    for dt in [0.1, 0.35, -0.2]:
        check_grad(steps, (x, 2, dt), ("x", "dt"), backend=backend, vg=vg)


def test_cache_across_values(backend):
    vg = flowgrad.value_and_grad(steps, wrt="x", backend=backend)
    for seed in range(3):
        check_grad(steps, (U((4,), seed=seed), 2, 0.2), "x", backend=backend, vg=vg)


def test_a_repeated_call_gives_the_first_calls_gradients(backend):
    # the second call of a signature takes the answer the first settled on; both agree, each float
    # gradient is a float, and a wrt named twice gets two arrays every time
    x, n = U((4,)), 3
    g = flowgrad.grad(steps, wrt=("x", "dt", "x"), backend=backend)
    first = g(x, n, 0.1)
    for _ in range(3):
        again = g(x, n, 0.1)
        assert type(again[1]) is float
        assert again[0] is not again[2] and not np.shares_memory(again[0], again[2])
        for a, b in zip(first, again):
            assert_close(a, b)
    check_grad(steps, (x, n, 0.1), ("x", "dt"), backend=backend)


def test_calls_with_many_integers_keep_a_bounded_record(backend):
    vg = flowgrad.value_and_grad(steps, wrt="x", backend=backend)
    x = U((3,))
    for n in range(vg.CALLS_KEPT + 6):
        vg(x, n % 3 + 100 * (n // 3), 0.0)      # dt 0: y stays x for every trip count
    assert 0 < len(vg.calls) <= vg.CALLS_KEPT
    assert_close(vg(x, 7, 0.0)[1], 2.0 * x)


# ---------------------------------------------------------------------------------------
# vjp for array-valued functions
# ---------------------------------------------------------------------------------------


def vjp_elementwise(A, B):
    return np.sin(A) * B + A ** 2


def vjp_matvec(A, x):
    return A @ np.tanh(x)


def vjp_stencil(u0, n):
    u = u0.copy()
    for t in range(n):
        u[1:-1] = u[1:-1] + 0.2 * (u[2:] - 2.0 * u[1:-1] + u[:-2]) + 0.1 * u[1:-1] ** 2
    return u


def vjp_returns_mutated_argument(A):
    A[1:] += A[:-1] ** 2
    return A


def vjp_matrix_from_loops(x):
    n = x.shape[0]
    M = np.zeros((n, n))
    for i in range(n):
        for j in range(i + 1):
            M[i, j] = x[i] * x[j] + np.sin(x[i - j])
    return M


def vjp_scalar_output(x):
    return np.sum(x ** 3)


VJP_CASES = [
    pytest.param(vjp_elementwise, lambda: (U((3, 4)), U((3, 4), seed=1)), ("A", "B"), id="elementwise"),
    pytest.param(vjp_matvec, lambda: (U((3, 4)), U((4,), seed=1)), ("A", "x"), id="matvec"),
    pytest.param(vjp_matvec, lambda: (U((3, 4)), U((4,), seed=1)), "x", id="matvec-one-wrt"),
    pytest.param(vjp_stencil, lambda: (U((7,)), 3), None, id="stencil-default-wrt"),
    pytest.param(vjp_returns_mutated_argument, lambda: (U((5,)),), "A", id="returns-mutated-argument"),
    pytest.param(vjp_matrix_from_loops, lambda: (U((4,)),), None, id="matrix-from-loops"),
    pytest.param(vjp_scalar_output, lambda: (U((4,)),), "x", id="scalar-output"),
]


@pytest.mark.parametrize("fn, make, wrt", VJP_CASES)
def test_vjp(fn, make, wrt, backend):
    check_vjp(fn, make(), wrt, backend=backend)


@pytest.mark.parametrize("fn, make, wrt", VJP_CASES)
def test_jit_array_outputs(fn, make, wrt, backend):
    check_forward(fn, make(), backend=backend)


def mixed_kinds(A, idx, x, n, s, flag):
    y = A[idx] * s
    for t in range(n):
        y = y + x[: y.shape[0]] ** 2
    if flag:
        y = y * 2.0
    return y


def test_vjp_default_wrt_is_every_float_argument(backend):
    args = (U((4,)), np.array([0, 2, 2]), U((5,), seed=1), 2, 0.5, True)
    out, pullback = flowgrad.vjp(mixed_kinds, *args, backend=backend)
    grads = pullback(np.ones(3))
    assert isinstance(grads, tuple) and len(grads) == 3, (
        f"default wrt should be A, x and s (the float arguments), got {len(grads)} gradients"
    )
    assert grads[0].shape == (4,) and grads[1].shape == (5,) and np.ndim(grads[2]) == 0
    check_vjp(mixed_kinds, args, None, backend=backend)


def test_pullback_returns_a_tuple_for_one_wrt(backend):
    A, x = U((3, 4)), U((4,), seed=1)
    out, pullback = flowgrad.vjp(vjp_matvec, A, x, wrt="A", backend=backend)
    grads = pullback(np.ones(3))
    assert isinstance(grads, tuple) and len(grads) == 1
    assert_close(grads[0], np.outer(np.ones(3), np.tanh(x)))


def test_pullback_is_linear_and_reusable(backend):
    A, x = U((3, 4)), U((4,), seed=1)
    out, pullback = flowgrad.vjp(vjp_matvec, A, x, wrt=("A", "x"), backend=backend)
    c1, c2 = U((3,), seed=2), U((3,), seed=3)
    g1, g2, g12 = pullback(c1), pullback(c2), pullback(2.0 * c1 + c2)
    for a, b, c in zip(g1, g2, g12):
        assert_close(c, 2.0 * a + b)
    assert_close(g1[1], (A.T @ c1) * (1.0 - np.tanh(x) ** 2))


def test_scalar_pullback_is_linear_and_reusable_after_the_caller_changes_a_gradient(backend):
    A, x = U((3, 4)), U((4,), seed=1)
    out, pullback = flowgrad.vjp(sum_matvec, A, x, wrt=("A", "x"), backend=backend)
    want = pullback(1.0)
    want = tuple(w.copy() for w in want)
    g1 = pullback(1.0)
    for g in g1:
        g[...] = 7.0        # the caller owns what it was given
    g3 = pullback(3.0)
    for w, g in zip(want, g3):
        assert_close(g, 3.0 * w)
    assert_close(want[1], A.T @ np.ones(3) * (1.0 - np.tanh(x) ** 2))


def sum_matvec(A, x):
    return np.sum(vjp_matvec(A, x))


# ---------------------------------------------------------------------------------------
# Entry points share one function; generated source and IR are inspectable
# ---------------------------------------------------------------------------------------


def test_entry_points_agree(backend):
    A, B = U((3, 4)), U((3, 4), seed=1)
    fn_out = flowgrad.jit(vjp_elementwise, backend=backend)(A, B)
    out, pullback = flowgrad.vjp(vjp_elementwise, A, B, wrt="A", backend=backend)
    g = flowgrad.grad(sum_elementwise, wrt="A", backend=backend)(A, B)
    assert_close(fn_out, np.sin(A) * B + A ** 2)
    assert_close(out, fn_out)
    assert_close(pullback(np.ones((3, 4)))[0], g)
    assert_close(g, np.cos(A) * B + 2.0 * A)


def sum_elementwise(A, B):
    return np.sum(vjp_elementwise(A, B))


def test_source_and_ir_are_readable(backend):
    args, _ = three_args_inputs()
    g = flowgrad.grad(three_args, wrt=("A", "c"), backend=backend)
    src = g.source(*args)
    ir = g.ir(*args)
    for kind, text in (("source", src), ("ir", ir)):
        assert isinstance(text, str) and text.strip(), f"g.{kind}() returned {text!r}"
        assert "three_args" in text, f"g.{kind}() does not mention the function name:\n{text}"
    compile(src, "<flowgrad generated source>", "exec")  # ordinary Python
    # Asking for the source does not disturb the gradient.
    _, expected = three_args_inputs()
    gA, gc = g(*args)
    assert_close(gA, expected["A"])
    assert_close(gc, expected["c"])


# ---------------------------------------------------------------------------------------
# what a capture depends on besides the arguments; what a pullback holds
# ---------------------------------------------------------------------------------------

GAIN = 0.5
STEPS = 2


def _doubled(x):
    return x * 2.0


def _times_seven(x):
    return x * 7.0


_scaled = _doubled


def uses_globals(x):
    s = 0.0
    for i in range(STEPS):
        s += np.sum(_scaled(x) * GAIN)
    return s


def test_a_rebound_global_or_helper_is_seen_by_the_next_call(backend):
    # the capture folds module globals in; rebinding one (or redefining a helper) captures anew,
    # as Python would run the function with the new value
    global GAIN, STEPS, _scaled
    x = U((3,))
    g, f = flowgrad.grad(uses_globals, backend=backend), flowgrad.jit(uses_globals, backend=backend)
    saved = GAIN, STEPS, _scaled
    try:
        for gain, steps, factor in ((0.5, 2, 2.0), (2.0, 3, 7.0), (0.5, 2, 2.0)):
            GAIN, STEPS = gain, steps
            _scaled = _doubled if factor == 2.0 else _times_seven
            assert_close(g(x), np.full(3, gain * steps * factor))
            assert_close(f(x), uses_globals(x))
    finally:
        GAIN, STEPS, _scaled = saved


def sin_times(x, c):
    return np.sin(x) * c


def squares(x):
    return np.sum(x * x)


def test_a_pullback_differentiates_at_the_values_given_to_vjp(backend):
    x = np.array([0.1, 0.2, 0.3])
    _, pullback = flowgrad.vjp(sin_times, x, 2.0, backend=backend)
    x[:] = 5.0                                   # the caller's array changes afterwards
    for _ in range(2):
        gx, gc = pullback(np.ones(3))
        assert_close(gx, 2.0 * np.cos([0.1, 0.2, 0.3]))
        assert_close(gc, np.sum(np.sin([0.1, 0.2, 0.3])))


def test_a_wrt_named_twice_gets_two_arrays(backend):
    x = np.array([1.0, 2.0, 3.0])
    _, pullback = flowgrad.vjp(squares, x, wrt=(0, 0), backend=backend)
    for _ in range(2):
        ga, gb = pullback(2.0)
        assert_close(ga, 4.0 * x)
        assert_close(gb, 4.0 * x)
        assert not np.shares_memory(ga, gb)
