"""What the native lowering does for speed keeps the reference semantics: exp, log and tanh of
float64 compiled into the loops, NumPy ufuncs for other large transcendentals, hoisted broadcast sub-expressions, multi-accumulator reductions, matrix-vector
loops over strided views, reductions, the workspace kept between calls, tape reservation, dead-statement
removal and direct adjoint writes. Each test checks values against NumPy / finite differences
and, where the change is visible, that the generated code shows it."""
import ast
import platform
import re
import warnings

import numpy as np
import pytest

import flowgrad
from oracle import check_forward, check_grad
from test_passes import _csr, csr_rows

pytestmark = pytest.mark.native

pytest.importorskip("numba")
native = "native"


def transcendental(x, y):
    a = np.exp(x) * np.tanh(y) + np.log1p(x * x)
    return np.sum(a * np.arctan(y)) + np.sum(np.exp(1000.0 * x) > 0)   # overflows to inf: no warning


def broadcast_costly(t1, t2):
    temp = np.cos(t1[:, None]) * np.cos(t2[None, :]) + np.sqrt(t1[:, None] + 1.0)
    return np.sum(temp * temp)


def reductions(x):
    return np.sum(x * x) + np.sum(x[:, :5], axis=1) @ x[:, 0] + np.max(x)


def strided_matvec(A, x):
    out = 0.0
    for i in range(A.shape[1] - 1):
        row = x[: A.shape[0]] @ A[:, i + 1:]          # vector @ strided view
        col = A[:, i + 1:] @ x[i + 1: A.shape[1]]     # strided view @ vector
        rows = A[1:, i + 1:].T @ x[1: A.shape[0]]     # transposed view @ vector: rows added
        out += np.sum(row * row) + np.sum(col) + np.sum(np.sin(rows))
    return out


def time_loop(u, c, n_steps):
    for t in range(n_steps):
        for k in range(3):
            u[1:-1] = u[1:-1] + c * (u[2:] - 2.0 * u[1:-1] + u[:-2]) * (k + 1)
    return np.sum(u * u)


def rows_then_sum(A, x):
    y = np.zeros(A.shape[1])
    dead = np.exp(A) * 3.0            # noqa: F841 (computed and never used)
    for i in range(A.shape[0]):
        y += A[i, :] * (A[i, :] @ x)
    return np.sum(y * y)


def test_vector_math_matches_numpy_without_warnings():
    rng = np.random.default_rng(0)
    args = (rng.uniform(-1, 1, (40, 50)), rng.uniform(-1, 1, (40, 50)))     # 2000 elements: vectorised
    with np.errstate(over="ignore"):
        want = transcendental(*args)
    with warnings.catch_warnings():
        warnings.simplefilter("error")           # NumPy warns about the overflow; flowgrad does not
        got = flowgrad.jit(transcendental, backend=native)(*args)
    np.testing.assert_allclose(got, want, rtol=1e-13)
    src = flowgrad.jit(transcendental, backend=native).source(*args)
    assert "_rt.vector_math(" in src
    with np.errstate(over="ignore"):
        check_grad(transcendental, args, ("x", "y"), backend=native)


def test_vector_math_float32():
    x = np.random.default_rng(1).uniform(-2, 2, 3000).astype(np.float32)

    def f(x):
        return np.tanh(x) * 2.0 + np.exp(x)
    got = flowgrad.jit(f, backend=native)(x)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, f(x), rtol=2e-6)


def masked_exp(s, mask):
    return np.exp(s + mask)


def test_exp_of_masked_scores_matches_numpy():
    # far-negative arguments (a causal mask's -1e9 or -inf) and arguments with subnormal results:
    # float32 runs NumPy's ufunc (bit for bit, with a path of its own for the far-negative ones),
    # float64 the compiled exp, within one ulp
    rng = np.random.default_rng(14)
    for dtype, ulps in ((np.float64, 1), (np.float32, 0)):
        s = rng.uniform(-3, 3, (96, 96)).astype(dtype)
        for fill in (-1e9, -np.inf, -740.0 if dtype == np.float64 else -90.0):
            mask = np.where(np.triu(np.ones((96, 96)), 1) > 0, fill, 0.0).astype(dtype)
            got, want = flowgrad.jit(masked_exp, backend=native)(s, mask), masked_exp(s, mask)
            assert got.dtype == dtype
            assert np.all(np.abs(got - want) <= ulps * np.spacing(want))
        src = flowgrad.jit(masked_exp, backend=native).source(s, mask)
        if dtype == np.float32:
            # the argument is written into the result and exp runs there: no temporary, no copy
            assert "_rt.vector_math(0, result)" in src
        else:
            assert "_rt.exp64(" in src and "vector_math" not in src


def _ulps(got, want):
    """Distance in units of the last place of ``want``, 0 where both are the same inf or NaN."""
    same = (got == want) | (np.isnan(got) & np.isnan(want))
    with np.errstate(invalid="ignore"):
        return np.where(same, 0.0, np.abs(got - want) / np.spacing(np.abs(want)))


_TRIG_RANGES = [(-1, 1), (-4, 4), (-100, 100), (-1.6e6, 1.6e6), (-1e-9, 1e-9), (1e6, 1e12), (-1e300, 1e300)]


@pytest.mark.parametrize("name, ranges, most", [
    ("exp", [(-1, 1), (-30, 30), (-745, 745), (-1e-12, 1e-12)], 1),
    ("log", [(0.5, 2), (0.9999, 1.0001), (1e-310, 1e-300), (1e300, 1.7e308)], 1),
    ("tanh", [(-1e-12, 1e-12), (-1e-5, 1e-5), (-1, 1), (-30, 30)], 3),
    ("sin", _TRIG_RANGES, 1),
    ("cos", _TRIG_RANGES, 1),
    ("arctan", [(-1e-9, 1e-9), (-1, 1), (-3, 3), (-1e3, 1e3), (-1e300, 1e300)], 1),
])
def test_compiled_element_functions_match_numpy(name, ranges, most):
    """exp, log, tanh, sin, cos and arctan of float64 are compiled into the calling loop
    (``_rt.exp64`` ...): within a few ulp of NumPy everywhere, and NumPy's exact values at the
    edges (0, inf, NaN, overflow, underflow to subnormals and to 0, negative arguments of log,
    the C library's sin and cos beyond 2^20 pi/2), compiled with the fast-math flags of the
    generated code."""
    import numba
    from flowgrad.backends import native_runtime as rt
    fn = getattr(rt, name + "64")

    @numba.njit(error_model="numpy", fastmath={"reassoc"})
    def apply(x, out):
        for i in range(x.size):
            out[i] = fn(x[i])
    rng = np.random.default_rng(3)
    ref = getattr(np, name)
    for lo, hi in ranges:
        x = rng.uniform(lo, hi, 1 << 16)
        out = np.empty_like(x)
        apply(x, out)
        with np.errstate(over="ignore"):
            assert _ulps(out, ref(x)).max() <= most, (lo, hi)
    edges = np.array([0.0, -0.0, 1.0, -1.0, 0.5, 2.0, 19.0, 20.0, 21.0, 709.78, 709.79, 1e3, -708.4, -720.0,
                      -745.1, -745.2, -1e9, 5e-324, -5e-324, 1e-300, 2.2250738585072014e-308,
                      1.7976931348623157e308, np.inf, -np.inf, np.nan])
    out = np.empty_like(edges)
    apply(edges, out)
    with np.errstate(all="ignore"):
        want = ref(edges)
    assert _ulps(out, want).max() <= most
    exact = ~np.isfinite(edges) | ~np.isfinite(want) | (want == 0)
    assert np.array_equal(out[exact], want[exact], equal_nan=True)
    assert np.array_equal(np.signbit(out[want == 0]), np.signbit(want[want == 0]))
    if name in ("sin", "cos"):      # next to multiples of pi/2, where the reduction cancels most bits
        x = rng.integers(-2 ** 20, 2 ** 20, 1 << 14) * (np.pi / 2)
        x = np.concatenate([x, np.nextafter(x, np.inf), np.nextafter(x, -np.inf)])
        out = np.empty_like(x)
        apply(x, out)
        assert _ulps(out, ref(x)).max() <= most


def test_arctan2_matches_numpy():
    """arctan2 of float64 in all four quadrants, over wide ranges of |y / x|, within 1 ulp of
    NumPy; zeros, infinities and NaN (which take the C library's function) exactly as NumPy's."""
    import numba
    from flowgrad.backends import native_runtime as rt

    @numba.njit(error_model="numpy", fastmath={"reassoc"})
    def apply(y, x, out):
        for i in range(x.size):
            out[i] = rt.arctan2_64(y[i], x[i])
    rng = np.random.default_rng(4)
    for ys, xs in [((-1, 1), (-1, 1)), ((-1e10, 1e10), (-1, 1)), ((-1e-300, 1e-300), (-1, 1)),
                   ((-1e300, 1e300), (-1e300, 1e300))]:
        y, x = rng.uniform(*ys, 1 << 16), rng.uniform(*xs, 1 << 16)
        out = np.empty_like(x)
        apply(y, x, out)
        assert _ulps(out, np.arctan2(y, x)).max() <= 1, (ys, xs)
    edges = np.array([0.0, -0.0, 1.0, -1.0, 5e-324, 1e-300, -1e300, np.inf, -np.inf, np.nan])
    y, x = (g.ravel() for g in np.meshgrid(edges, edges))
    out = np.empty_like(x)
    apply(y, x, out)
    want = np.arctan2(y, x)
    assert np.array_equal(out, want, equal_nan=True)
    assert np.array_equal(np.signbit(out), np.signbit(want))


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="checks x86-64 SIMD code")
def test_loops_call_the_vector_versions_of_sin():
    """A loop over sin runs its vector version (several lanes a call), which takes the C
    library's sin only for the lanes whose argument is beyond the fast reduction."""
    import numba
    from flowgrad.backends import native_runtime as rt

    @numba.njit(error_model="numpy", fastmath={"reassoc"})
    def apply(x, out):
        for i in range(x.size):
            out[i] = rt.sin64(x[i])
    x = np.random.default_rng(6).uniform(-3, 3, 1001)
    x[[5, 6, 500]] = [1e7, np.inf, -3e15]
    out = np.empty_like(x)
    apply(x, out)
    with np.errstate(invalid="ignore"):
        assert _ulps(out, np.sin(x)).max() <= 1
    code = apply.inspect_llvm(apply.signatures[0])
    assert re.search(r"call .*<[248] x double> @flowgrad_sin64_\w+_v[248]\(", code)


def element_functions(x, y):
    return np.sum(np.exp(x - 1.0) * np.tanh(y) + np.log(x * x + 1.0))


def test_element_functions_join_the_loop_that_uses_them():
    rng = np.random.default_rng(5)
    args = (rng.uniform(-2, 2, (60, 70)), rng.uniform(-2, 2, (60, 70)))
    check_forward(element_functions, args, native)
    check_grad(element_functions, args, ("x", "y"), backend=native)
    src = flowgrad.jit(element_functions, backend=native).source(*args)
    assert "vector_math" not in src                 # no temporary and no NumPy call
    body = [line for line in src.splitlines() if "_rt.exp64(" in line]
    assert len(body) == 1 and "_rt.tanh64(" in body[0] and "_rt.log64(" in body[0]


def waves(x):
    return np.sum(np.sin(x) * np.cos(2.0 * x))


def test_float32_sin_and_cos_run_as_numpy_ufuncs():
    """float32 sin and cos of a large operand run as NumPy's ufuncs (SIMD code), float64 ones
    compiled into the loop."""
    x = np.random.default_rng(10).uniform(-4, 4, (60, 70))
    for dtype, compiled, rtol in ((np.float64, True, 1e-12), (np.float32, False, 1e-5)):
        args = (x.astype(dtype),)
        check_forward(waves, args, native, rtol=rtol)       # float32: the sum's order differs
        src = flowgrad.jit(waves, backend=native).source(*args)
        assert ("_rt.sin64(" in src and "_rt.cos64(" in src) == compiled
        assert ("_rt.vector_math(" in src) != compiled


def integer_arguments(x, k):
    a = np.arange(k)
    return np.sum(np.sin(a) * x + np.exp(a / k) * x + np.arctan2(a, x) + np.log(a + 1) * np.tanh(x))


def test_element_functions_of_integers():
    """The compiled element functions take float64: an integer argument is converted, as NumPy's
    ufuncs convert it."""
    args = (np.random.default_rng(8).uniform(0.5, 2.0, 30), 30)
    check_forward(integer_arguments, args, native)
    check_grad(integer_arguments, args, ("x",), backend=native)
    src = flowgrad.jit(integer_arguments, backend=native).source(*args)
    assert "_rt.sin64(np.float64(" in src and "_rt.arctan2_64(np.float64(" in src


def test_broadcast_subexpression_is_computed_once_per_row():
    rng = np.random.default_rng(2)
    args = (rng.uniform(0, 1, 9), rng.uniform(0, 1, 11))
    check_forward(broadcast_costly, args, native)
    check_grad(broadcast_costly, args, ("t1", "t2"), backend=native)
    src = flowgrad.jit(broadcast_costly, backend=native).source(*args)
    # cos(t1) over a (9, 1) temporary, not inside the (9, 11) nest
    assert "(9, 1, )" in src and "_rt.cos64(t1[" in src


@pytest.mark.parametrize("n", [1, 3, 4, 7, 9])
def test_reductions_any_length(n):
    x = np.random.default_rng(n).uniform(-1, 1, (6, n + 4))
    check_forward(reductions, (x,), native)
    check_grad(reductions, (x,), ("x",), backend=native)


def stepped_rows(A, x):
    return np.sum(np.sin(x[1::2] @ A[::-2, 1:]))        # v @ M over every other row, backwards


def reversed_windows(r, w):
    y = w.copy()
    for k in range(1, r.shape[0]):
        y[:k] = y[:k] + r[k] * y[k - 1::-1]
        y[k] = y[k] * r[k - 1::-1][0]
    return np.sum(y * w)


def test_offsets_known_at_run_time_index_unsigned():
    """An element index with an offset known only at run time (``y[k - 1 - i]`` in the reversed
    loop of an adjoint) goes through unsigned: Numba's fix-up of negative indices would keep the
    loop from vectorising, and a view's index is never negative."""
    rng = np.random.default_rng(9)
    args = (rng.uniform(-0.3, 0.3, 12), rng.uniform(-1, 1, 12))
    check_forward(reversed_windows, args, native)
    check_grad(reversed_windows, args, ("r", "w"), backend=native)
    src = flowgrad.grad(reversed_windows, wrt=("r", "w"), backend=native).source(*args)
    assert re.search(r"y\[np\.uint64\(\(k - 1\) \+ _i\d+ \* -1\)\]", src)
    assert re.search(r"y\[_i\d+\]", src)      # a plain loop index stays as it is


@pytest.mark.parametrize("rows", [6, 7, 9, 11])
def test_matvec_over_strided_views(rows):
    rng = np.random.default_rng(3)
    args = (rng.uniform(-1, 1, (rows, 8)), rng.uniform(-1, 1, max(rows, 8)))
    check_forward(strided_matvec, args, native)
    check_grad(strided_matvec, args, ("A", "x"), backend=native)
    src = flowgrad.jit(strided_matvec, backend=native).source(*args)
    assert "np.ascontiguousarray(A[" not in src          # no copy of the strided view
    # v @ M runs four rows per pass over the result, the rest one by one (any row count and step)
    args = (rng.uniform(-1, 1, (2 * rows, 5)), rng.uniform(-1, 1, 2 * rows))
    check_forward(stepped_rows, args, native)
    check_grad(stepped_rows, args, ("A", "x"), backend=native)


def test_workspace_reuse_keeps_returned_arrays_and_release_works():
    rng = np.random.default_rng(4)
    g = flowgrad.grad(time_loop, wrt=("u", "c"), backend=native)
    u1, u2 = rng.uniform(0, 1, 30), rng.uniform(0, 1, 30)
    ref1 = flowgrad.grad(time_loop, wrt=("u", "c"), backend="numpy")(u1, 0.1, 7)
    ref2 = flowgrad.grad(time_loop, wrt=("u", "c"), backend="numpy")(u2, 0.1, 9)
    first = g(u1, 0.1, 7)
    kept = [np.copy(a) for a in first]
    second = g(u2, 0.1, 9)                   # same buffers, different trip count
    for a, b in zip(first, kept):
        np.testing.assert_array_equal(a, b)  # the first call's results are the caller's alone
    for got, want in zip((first, second), (ref1, ref2)):
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, rtol=1e-12)
    g.release()
    for a, b in zip(g(u1, 0.1, 7), ref1):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    src = g.source(u1, 0.1, 7)
    # one capacity check per tape before the time loop, none per push inside it
    grows = [line for line in src.splitlines() if "_rt.room(" in line and "_ws[" not in line]
    assert grows and all("_rt.trip_count(0, n_steps, 1) *" in line for line in grows)
    # buffers of a shape known here are the caller's; the function hands back only the others
    types = ast.literal_eval(src.split("WORKSPACE_time_loop_grad = ")[1].splitlines()[0])
    handed = [line for line in src.splitlines() if line.strip().startswith("return ")][-1]
    fixed = [t for t in types if t[2] is not None]
    assert fixed and all(isinstance(t[2], tuple) for t in fixed), types
    assert handed.rstrip(")").rsplit("(", 1)[1].count(",") == len(types) - len(fixed), (handed, types)


def summed_products(xs, W):
    h = np.zeros((xs.shape[1], W.shape[1]))
    for t in range(xs.shape[0]):
        h = np.tanh(xs[t] @ W + h)               # g_W += xs[t].T @ (adjoint of the product), each step
    return np.sum(h * h)


def test_a_weight_gradient_summed_over_steps_adds_each_product_in_its_blas_call():
    rng = np.random.default_rng(6)
    args = (rng.standard_normal((4, 5, 3)), rng.standard_normal((3, 6)) * 0.5)
    check_grad(summed_products, args, ("xs", "W"), backend=native)
    src = flowgrad.grad(summed_products, wrt=("xs", "W"), backend=native).source(*args)
    assert "_rt.matmul_acc(" in src and "g_W)" in src, src     # no product array added to g_W


def head_products(x, W, n_heads):
    out = np.zeros((x.shape[0], W.shape[1]))
    hd = W.shape[1] // n_heads
    for h in range(n_heads):
        out[:, h * hd:(h + 1) * hd] = np.tanh(x @ W[:, h * hd:(h + 1) * hd])
    return np.sum(out * out)


def test_products_summed_into_a_block_of_columns_or_into_an_input_adjoint_are_blas_sums():
    # per head: g_W[:, lo:hi] += x.T @ g (a block of columns: BLAS writes it with the row stride
    # of g_W) and g_x += g @ W[:, lo:hi].T (a plain product whose only read is the sum)
    rng = np.random.default_rng(7)
    args = (rng.standard_normal((5, 4)), rng.standard_normal((4, 6)) * 0.5, 3)
    check_grad(head_products, args, ("x", "W"), backend=native)
    src = flowgrad.grad(head_products, wrt=("x", "W"), backend=native).source(*args)
    sums = [line.strip() for line in src.splitlines() if "_rt.matmul_acc(" in line]
    assert len(sums) == 2, src
    assert sums[0].endswith(", g_x)") or sums[1].endswith(", g_x)"), sums
    assert any(re.search(r", g_W\[0:0 \+ 4, .*\]\)$", line) for line in sums), sums


def transposed_operands(A, B, X):
    m = A.shape[0]
    P = A[2:, :].T @ X[: m - 2, :]          # a view read transposed on the left
    Q = X[:, 1:4] @ B[:, 3:6].T             # and on the right
    return np.sum(np.tanh(P)) + np.sum(Q * Q)


def test_adjoints_of_operands_read_transposed_are_added_in_their_own_layout():
    """Each adjoint is computed transposed (``X @ g.T`` where ``g @ X.T`` would need adding
    through strided columns) and added by BLAS into the view itself."""
    rng = np.random.default_rng(8)
    args = (rng.standard_normal((9, 5)), rng.standard_normal((6, 8)), rng.standard_normal((7, 6)))
    for backend in ("numpy", native):
        check_grad(transposed_operands, args, (0, 1, 2), backend=backend)
    src = flowgrad.grad(transposed_operands, wrt=(0, 1, 2), backend=native).source(*args)
    sums = [line.strip() for line in src.splitlines() if "_rt.matmul_acc(" in line]
    assert any(line.endswith(", g_A[2:2 + 7, 0:0 + 5])") for line in sums), src
    assert any(line.endswith(", g_B[0:0 + 6, 3:3 + 3])") for line in sums), src


def triangular_overwrites(x, w):
    for k in range(1, x.shape[0]):
        x[:k] = np.sin(x[:k]) * w + x[k]          # overwrites (and saves) k elements
    return np.sum(x * x)


def test_a_loop_whose_pushes_grow_with_its_index_reserves_their_sum_before_it():
    rng = np.random.default_rng(5)
    args = (rng.uniform(-1, 1, 9), 0.7)
    check_grad(triangular_overwrites, args, ("x", "w"), backend=native)
    src = flowgrad.grad(triangular_overwrites, wrt=("x", "w"), backend=native).source(*args)
    lines = src.splitlines()
    rooms = [line for line in lines if "_rt.room(" in line and line.strip().startswith("tape")]
    assert rooms and all(line.startswith("    tape") for line in rooms), src   # no tape's inside a loop
    assert any("+= (np.maximum(0, k))" in line for line in lines), src          # the loop adding them up


def test_returned_arrays_are_recycled_only_once_the_caller_lets_go():
    rng = np.random.default_rng(4)
    g = flowgrad.grad(time_loop, wrt=("u", "c"), backend=native)
    u = rng.uniform(0, 1, 30)
    want = flowgrad.grad(time_loop, wrt=("u", "c"), backend="numpy")(u, 0.1, 7)[0]
    address = g(u, 0.1, 7)[0].ctypes.data        # dropped at once
    held = g(u, 0.1, 7)[0]
    assert held.ctypes.data == address           # the dropped array came back
    view = held[2:5]
    del held
    others = [g(u, 0.1, 7)[0] for _ in range(3)]
    assert all(not np.shares_memory(view, o) for o in others)    # a view keeps its memory the caller's
    for o in others:
        np.testing.assert_allclose(o, want, rtol=1e-12)
    np.testing.assert_allclose(view, want[2:5], rtol=1e-12)
    out = flowgrad.jit(time_loop, backend=native)
    np.testing.assert_allclose(out(u, 0.1, 7), time_loop(u.copy(), 0.1, 7), rtol=1e-12)


def test_dead_statements_and_zero_fills_disappear():
    rng = np.random.default_rng(5)
    args = (rng.uniform(-1, 1, (5, 6)), rng.uniform(-1, 1, 6))
    check_forward(rows_then_sum, args, native)
    check_grad(rows_then_sum, args, ("A", "x"), backend=native)
    g = flowgrad.grad(rows_then_sum, wrt=("A", "x"), backend=native)
    src = g.source(*args)
    assert "np.exp(" not in src                     # the unused exp(A) is gone
    assert "g_A[_" not in src.split("for _k")[0]     # g_A is not zero-filled before the loop ...
    assert "g_A[i, " in src                          # ... each row is written in its own iteration


def stencil_updates(ex, hz, n_steps):
    for t in range(n_steps):
        ex[:, 1:] -= 0.5 * (hz[:, 1:] - hz[:, :-1])
        hz[:-1, :] -= 0.7 * (ex[1:, :] - ex[:-1, :])
    return np.sum(hz * hz) + np.sum(np.tanh(ex) * ex)


def test_update_adjoints_read_the_adjoint_in_place_in_one_pass():
    rng = np.random.default_rng(6)
    args = (rng.uniform(-1, 1, (5, 7)), rng.uniform(-1, 1, (5, 7)), 3)
    check_grad(stencil_updates, args, ("ex", "hz"), backend=native)
    check_grad(stencil_updates, args, ("ex", "hz"), backend="numpy")
    g = flowgrad.grad(stencil_updates, wrt=("ex", "hz"), backend=native)
    backward = g.ir(*args).split("# backward")[1]
    assert "gold" not in backward                  # no saved copy of g_hz, no write-back
    # the two sums into g_hz (offsets 1 and 0 along the last axis) are one sum per element
    assert any(ln.strip().startswith("g_hz[") and ln.count("g_ex[") == 2 for ln in backward.splitlines())


def concat_steps(xs, h, W):
    for t in range(xs.shape[0]):
        z = np.concatenate((xs[t], h), axis=1)
        h = np.tanh(z @ W) + 0.5 * np.tanh(h)
    return np.sum(h * h)


@pytest.mark.parametrize("backend", ["numpy", native])
def test_concatenate_in_a_loop_fills_once_and_tapes_once(backend):
    rng = np.random.default_rng(7)
    args = (rng.uniform(-1, 1, (3, 4, 2)), rng.uniform(-1, 1, (4, 3)), rng.uniform(-1, 1, (5, 3)))
    check_forward(concat_steps, args, backend)
    check_grad(concat_steps, args, ("xs", "h", "W"), backend=backend)
    ir = flowgrad.grad(concat_steps, wrt=("xs", "h", "W"), backend=backend).ir(*args)
    forward = ir.split("# backward")[0]
    assert "concat" in forward
    assert not re.search(r"concat\w* = 0", forward)  # the pieces cover it: no zero fill to save
    assert len(re.findall(r"push \w+ <- concat", forward)) == 2      # one save per piece


def one_factor(u, kappa, n_steps):
    n = u.shape[0]
    M = np.eye(n) * (1.0 + 2.0 * kappa) - kappa * np.eye(n, k=1)       # not symmetric
    for t in range(n_steps):
        u = np.linalg.solve(M, u + 0.01 * np.sin(u))
    return np.sum(u * u)


def test_gradient_of_implicit_steps_factorises_once():
    rng = np.random.default_rng(8)
    args = (rng.uniform(-1, 1, 6), 0.4, 4)
    check_grad(one_factor, args, ("u", "kappa"), backend=native)
    src = flowgrad.grad(one_factor, wrt=("u", "kappa"), backend=native).source(*args)
    assert src.count("_rt.lu_factor_into(") == 1 and ", 1)" in src       # transposed solves: trans=1


def shifted_total(a):
    trace = 0.0
    for i in range(a.shape[0]):
        trace += np.tanh(a[i, i])
    out = a + trace
    return np.sum(out * out) / a.size


def test_whole_reduction_runs_in_the_pass_that_writes_the_adjoint():
    a = np.random.default_rng(9).uniform(-1, 1, (6, 6))
    check_forward(shifted_total, (a,), native)
    check_grad(shifted_total, (a,), ("a",), backend=native)
    src = flowgrad.grad(shifted_total, wrt=("a",), backend=native).source(a)
    lines = [ln.strip() for ln in src.splitlines()]
    k = next(i for i, ln in enumerate(lines) if ln.startswith("_flat") and "] = ((g_sum" in ln)
    assert lines[k - 1].startswith("_acc")           # g_a written and summed in one loop, the
    # sum first: it reads nothing the store writes, and after a store the compiler must assume it might
    # ... and the forward's own sum of ``out * out`` runs in that loop too: one pass over ``a``
    # after the trace, the scalar ``g_sum = g / a.size`` moved ahead of it, ``result`` after it
    assert sum(ln.startswith("for ") and "range(36)" in ln for ln in lines) == 1
    assert lines.index("result = np.float64((sum_1 / 36))") > k


def scalars_between_passes(x, y, c0):
    u = x * 2.0
    c = c0 + 1.0                  # runs after the nest of u and v (neither reads it) ...
    v = y * 3.0
    w = x * c                     # ... so w, which reads it, must not join that nest
    d = np.sum(w)                 # a sum ...
    e = d * 2.0 + c0              # ... read by a scalar ...
    z = y * c0                    # ... then a pass the scalar's value is not needed by
    return np.sum(u * v) + np.sum(w * w) + e + np.sum(z)


def row_normalised(x, w):
    s = np.sum(x, axis=1, keepdims=True)
    p = x / s
    return np.sum(p * w) + np.sum(w / s)


def test_scalars_between_fused_passes_run_before_or_after_as_their_readers_need():
    rng = np.random.default_rng(12)
    args = (rng.uniform(-1, 1, 40), rng.uniform(-1, 1, 40), 0.7)
    check_forward(scalars_between_passes, args, native)
    check_grad(scalars_between_passes, args, ("x", "y", "c0"), backend=native)


def test_row_values_a_fused_nest_does_not_write_are_loaded_once_per_row():
    rng = np.random.default_rng(13)
    args = (rng.uniform(0.5, 1, (8, 16)), rng.uniform(-1, 1, (8, 16)))
    check_forward(row_normalised, args, native)
    check_grad(row_normalised, args, ("x", "w"), backend=native)
    src = flowgrad.grad(row_normalised, wrt=("x", "w"), backend=native).source(*args)
    assert re.search(r"_ld\d+ = sum_1\[_i\d+, 0\]", src)     # ahead of the inner loop, not in it


def rank_two_rows(C, A, B):
    for i in range(C.shape[0]):
        for k in range(A.shape[1]):
            C[i, :i + 1] += A[:i + 1, k] * B[i, k] + B[:i + 1, k] * A[i, k]
    return np.sum(C * C)


def test_sums_into_one_gradient_commute_so_its_column_passes_share_a_nest():
    # the adjoint writes g_A[:i + 1, k] and g_B[:i + 1, k], each also summed into at [i, k] from
    # a dot product: the element sums run after the nest, which walks both columns in one pass
    rng = np.random.default_rng(14)
    args = (rng.standard_normal((5, 5)), rng.standard_normal((5, 3)), rng.standard_normal((5, 3)))
    check_grad(rank_two_rows, args, ("C", "A", "B"), backend=native)
    src = flowgrad.grad(rank_two_rows, wrt=("C", "A", "B"), backend=native).source(*args)
    a = re.search(r"g_A\[(_i\d+), k\] \+=", src)
    b = re.search(r"g_B\[(_i\d+), k\] \+=", src)
    assert a and b and a.group(1) == b.group(1), src


def overlapping_updates(V, A):
    n = V.shape[0]
    for i in range(n - 2, -1, -1):
        V[:i + 1] = 0.5 * (V[1:i + 2] + V[:i + 1])      # reads ahead of the write: in place
    V[1:] = V[:-1] * 0.25 + V[1:]                        # reads behind: needs a temporary
    A[0, :] = A[1, :] * 2.0 + A[0, :]                   # another row: in place
    A[1:, 1:] = A[:-1, 1:] + A[1:, :-1]                  # behind on both axes
    A[:-1, :-1] = A[1:, 1:] - A[:-1, :-1] * 0.5         # ahead on both axes: in place
    return np.sum(V * V) + np.sum(A * A)


def test_overlapping_reads_ahead_run_in_place_and_behind_through_a_temporary():
    rng = np.random.default_rng(10)
    args = (rng.uniform(-1, 1, 9), rng.uniform(-1, 1, (4, 5)))
    check_forward(overlapping_updates, args, native)
    check_grad(overlapping_updates, args, ("V", "A"), backend=native)
    src = flowgrad.jit(overlapping_updates, backend=native).source(*args)
    assert len(set(re.findall(r"_tmp\d+", src))) == 2      # only the two statements reading behind


def angles(y, x):
    return np.sum(np.arctan2(np.sqrt(y * y), x - 0.5) * x) + np.sum(np.arctan2(y[:3], x[:3]))


def test_two_operand_vector_math():
    rng = np.random.default_rng(11)
    args = (rng.uniform(-1, 1, (40, 50)), rng.uniform(-1, 1, (40, 50)))
    check_forward(angles, args, native)
    check_grad(angles, args, ("y", "x"), backend=native)
    src = flowgrad.jit(angles, backend=native).source(*args)
    # float64: compiled into both loops; float32: NumPy's ufunc over the large operand, the small
    # one inline
    assert src.count("_rt.arctan2_64(") == 2 and "vector_math2" not in src
    args32 = tuple(a.astype(np.float32) for a in args)
    check_forward(angles, args32, native)
    src = flowgrad.jit(angles, backend=native).source(*args32)
    assert src.count("_rt.vector_math2(") == 1


def test_parallel_loops_numba_cannot_compile_run_on_one_thread():
    import numba
    from flowgrad.backends.native import Kernel

    def parallel(x, _ws, _out):
        raise numba.core.errors.LoweringError("an internal error of Numba's parallel passes")

    def serial(x, _ws, _out):
        return x * 2.0, ()
    k = Kernel(parallel, (), (), serial=lambda: Kernel(serial, (), ()))
    with pytest.warns(RuntimeWarning, match="parallel loops of parallel .*one thread"):
        assert k(3.0) == 6.0
    assert k(4.0) == 8.0
    # an error of the program itself is not taken for a compiler failure
    k = Kernel(lambda x, _ws, _out: 1.0 / x, (), (), serial=lambda: Kernel(serial, (), ()))
    with pytest.raises(ZeroDivisionError):
        k(0.0)


def pairs_and_reuse(A, r, c, w):
    picked = A[r, c]                         # one consumer: read where it is used
    twice = A[c, r]                          # two consumers: stays a gather into a temporary
    return np.sum(picked * w) + np.sum(twice * twice) + np.sum(twice)


def test_gathers_are_read_where_their_one_consumer_uses_them():
    rng = np.random.default_rng(6)
    args = _csr(rng, 7)
    check_forward(csr_rows, args, native)
    check_grad(csr_rows, args, ("data", "x"), backend=native)
    g = flowgrad.grad(csr_rows, wrt=("data", "x"), backend=native)
    forward, backward = g.ir(*args).split("# backward")
    # the row's index slice and gather are no arrays of their own: the dot loads x[indices[k]]
    assert "take(x, indices[" in forward and "gather(" not in forward and "idx =" not in forward, forward
    assert "take(x, indices[" in backward and "gather(" not in backward, backward
    loop = g.source(*args).split("for i in range")[1].split("for ")[1]
    assert "np.empty" not in loop
    # two index arrays, negative positions; a gather read twice stays one
    A = rng.standard_normal((5, 5))
    r, c = np.array([0, -1, 2, 4]), np.array([3, 0, -2, 1])
    args = (A, r, c, rng.standard_normal(4))
    check_forward(pairs_and_reuse, args, native)
    check_grad(pairs_and_reuse, args, ("A", "w"), backend=native)
    forward = flowgrad.jit(pairs_and_reuse, backend=native).ir(*args)
    assert forward.count("take(A, r, c)") == 1 and forward.count("gather(A, c, r") == 1, forward


def sliding_windows(x, w):
    n = x.shape[0] - 2
    out = np.zeros(n)
    for i in range(3):
        out += x[i:i + n] * w[i]
    return np.sum(out * out)


def test_window_extents_are_constants():
    # x[i:i + n] has n elements whatever i is: (i + n) - i folds to n, so the window's shape, and
    # every buffer of that shape, is fixed when the function is compiled
    rng = np.random.default_rng(15)
    args = (rng.uniform(-1, 1, 10), rng.uniform(-1, 1, 3))
    check_forward(sliding_windows, args, native)
    check_grad(sliding_windows, args, ("x", "w"), backend=native)
    g = flowgrad.grad(sliding_windows, wrt=("x", "w"), backend=native)
    assert "x[i:+8]" in g.ir(*args) and "np.maximum(" not in g.source(*args)


def row_softmax(x, w):
    # half the maximum: not the shift the shifts pass takes as a constant, so the maximum's adjoint
    # (a second row sum) stays
    e = np.exp(x - 0.5 * np.max(x, axis=-1, keepdims=True))
    p = e / np.sum(e, axis=-1, keepdims=True)
    return np.sum(p * w)


def test_row_sums_share_the_pass_over_their_rows_with_element_wise_statements():
    # the softmax adjoint's row sums (g_p * e / s^2, g_e * e) are taken in the nests that write
    # g_e and g_x: an accumulator per row, started before the innermost loop and stored after it
    rng = np.random.default_rng(8)
    args = (rng.standard_normal((3, 4, 6)), rng.standard_normal((3, 4, 6)))
    check_forward(row_softmax, args, native)
    check_grad(row_softmax, args, ("x", "w"), backend=native)
    src = flowgrad.grad(row_softmax, wrt=("x", "w"), backend=native).source(*args)
    stored = re.findall(r"^( +)(gsum\w*)\[_i\d+, _i\d+, 0\] = (_acc\d+)$", src, re.M)
    assert len(stored) == 2, src
    for pad, name, acc in stored:
        body = src[:src.index(f"{pad}{name}[")]
        # the accumulator starts in the same nest, one level out from the loop that adds to it
        assert f"\n{pad}{acc} = 0.0\n" in body and f"{pad}    {acc} = {acc} + " in body, src
        assert re.search(rf"\n{pad}    g_\w+\[_i\d+, _i\d+, _i\d+\] \+?= ", body[body.rindex(f"{pad}{acc} = 0.0"):]), src


def carried_states(x, a, b):
    h = x.shape[1]
    y = np.zeros_like(x)
    ym1 = np.zeros(x.shape[0])
    ym2 = np.zeros(x.shape[0])
    for j in range(h):                       # state vectors carried from step to step
        y[:, j] = a * x[:, j] + b * ym1 - 0.3 * ym2
        ym2 = ym1
        ym1 = np.tanh(y[:, j])
    return np.sum(y * y)


def test_restored_vectors_are_read_where_they_lie_on_the_tape():
    rng = np.random.default_rng(9)
    args = (rng.standard_normal((5, 7)), 0.8, 0.5)
    check_grad(carried_states, args, ("x", "a", "b"), backend=native)
    src = flowgrad.grad(carried_states, wrt=("x", "a", "b"), backend=native).source(*args)
    # each pop of a state vector binds it to the popped part of its tape: no copy back
    views = re.findall(r"^ +(\w+) = (tape_\w+)\[\2_top:\2_top \+ 5\]$", src, re.M)
    assert views, src
    # the adjoint column the step's sums read is cleared in their nest, after their last read
    nests = re.findall(r"\n( +)_acc\d+ = 0\.0\n(?:.*\n)*?\1for _i\d+ in range\(5\):\n((?:\1    .*\n)+)", src)
    bodies = [body.splitlines() for _, body in nests]
    cleared = [[k for k, line in enumerate(b) if re.search(r"g_\w+\[_i\d+, j\] = 0\.0", line)] for b in bodies]
    summed = [[k for k, line in enumerate(b) if "_acc" in line] for b in bodies]
    assert any(c and s and c[0] > max(s) for c, s in zip(cleared, summed)), src


def matrix_steps(h, W):
    for t in range(3):
        h = np.tanh(h @ W)                   # the whole matrix h is saved before each step
    return np.sum(h * h)


def test_a_whole_matrix_goes_to_and_from_the_tape_as_one_flat_copy():
    rng = np.random.default_rng(10)
    args = (rng.standard_normal((6, 4)), rng.standard_normal((4, 4)) * 0.5)
    check_grad(matrix_steps, args, ("h", "W"), backend=native)
    src = flowgrad.grad(matrix_steps, wrt=("h", "W"), backend=native).source(*args)
    pushes = re.findall(r"^ +(tape_\w+)\[\1_top:\1_top \+ 6 \* 4\] = (_flat\d+)$", src, re.M)
    pops = re.findall(r"^ +(_flat\d+)\[:\] = (tape_\w+)\[(_p\d+):\3 \+ 6 \* 4\]$", src, re.M)
    assert pushes and pops, src


def shrinking_steps(V, p):
    n = V.shape[0]
    for i in range(n - 2, -1, -1):         # overlapping, shrinking slices updated in place
        V[:i + 1] = p * V[1:i + 2] + (1.0 - p) * V[:i + 1]
    return V[0] * V[0]


def explicit_steps(u, k):
    for t in range(4):
        u[1:-1] = u[1:-1] + k * (u[:-2] - 2.0 * u[1:-1] + u[2:])
    return np.sum(u * u)


def _loop_bodies(src):
    """The statements of each innermost loop of generated source."""
    lines, out = src.split("\n"), []
    for k, line in enumerate(lines):
        m = re.match(r"( *)for \w+ in (numba\.p)?range", line)
        if not m:
            continue
        body, pad = [], len(m.group(1)) + 4
        for nxt in lines[k + 1:]:
            depth = len(nxt) - len(nxt.lstrip())
            if not nxt.strip() or depth < pad:
                break
            if nxt.strip().startswith("for "):
                body = None
                break
            body.append(nxt.strip())
        if body:
            out.append(body)
    return out


def fresh_states(x, w):
    t = np.tanh(x[0] * w)
    s = np.sum(t * t)
    for k in range(1, x.shape[0]):
        t = np.tanh(x[k] * w + s * 1e-3)     # all of t written anew, none of it read: the push binds
        s = s + np.sum(t * t * w)            # t to fresh memory on its tape, the pop to the memory below
    return s + np.sum(t * x[0])


def overwritten_argument(u, w):
    s = np.sum(u * w)
    for k in range(5):
        s = s + np.sum(np.tanh(u) * w)
        u = np.sin(w * (k + 1) + s)          # the caller's values first lie at the bottom of the tape
    return s + np.sum(u * u)


def test_a_vector_written_whole_in_a_loop_moves_along_its_tape_instead_of_being_copied():
    rng = np.random.default_rng(12)
    # 40 steps of 50 elements: the tape grows past its first 1,024 elements while t lies on it
    for fn, args, wrt, name in ((fresh_states, (rng.standard_normal((40, 50)), rng.uniform(0.5, 1.5, 50)),
                                 ("x", "w"), "t"),
                                (overwritten_argument, (rng.standard_normal(9), rng.uniform(0.5, 1.5, 9)),
                                 ("u", "w"), "u")):
        check_grad(fn, args, wrt, backend=native)
        src = flowgrad.grad(fn, wrt=wrt, backend=native).source(*args)
        n = args[1].shape[0]
        push = re.findall(rf"^ +({name}\w*) = tape_\1\[tape_\1_top:tape_\1_top \+ {n}\]$", src, re.M)
        assert push, src
        tape = "tape_" + push[0]
        assert re.search(rf"^ +{push[0]} = {tape}\[{tape}_top - {n}:{tape}_top - {n} \+ {n}\]$", src, re.M), src
        # nothing copied to or from the tape but the caller's values, once
        assert not re.search(rf"{tape}\[np\.uint64|_slot\d+ = {tape}\[{tape}_top|= {tape}\[_p", src), src


def test_vectors_go_to_and_from_the_tape_in_the_nest_of_their_step():
    # an overlapping slice restored in the pass of its step's adjoint, and one saved in the update
    for fn, args, wrt, first, then in (
            (explicit_steps, (np.linspace(0.5, 1.5, 9), 0.3), ("u", "k"),
             r"u\[1 \+ (_i\d+)\] = _slot\d+\[\1\]$", r"\w+\[(1 \+ )?_i\d+\] = "),
            (shrinking_steps, (np.linspace(0.5, 1.5, 9), 0.3), ("V", "p"),
             r"_slot\d+\[(_i\d+)\] = V\[\1\]$", r"V\[_i\d+\] = ")):
        check_grad(fn, args, wrt, backend=native)
        src = flowgrad.grad(fn, wrt=wrt, backend=native).source(*args)
        assert any(re.match(first, b[0]) and len(b) > 1 and re.match(then, b[1])
                   for b in _loop_bodies(src)), src


def second_order_filter(x, a, b):
    n, m = x.shape
    y = np.zeros_like(x)
    y1 = np.zeros(n)
    y2 = np.zeros(n)
    for j in range(m):
        y[:, j] = a * x[:, j] + b * y1 - 0.25 * y2 * y1
        y2 = y1                          # the older state moves on along its tape (y1 being no
        y1 = np.tanh(y[:, j])            # column of y, it is not taken from y again)
    return np.sum(np.sin(y) * x)


def test_a_step_reading_the_state_its_push_moves_on_runs_in_one_nest():
    # the column is computed from the old y2 and y2 = y1 moves on in the same pass over the
    # column: the nest reads y2's old place, which the push leaves below the tape's new top
    rng = np.random.default_rng(5)
    args = (rng.standard_normal((7, 9)), 0.6, 0.3)
    check_grad(second_order_filter, args, ("x", "a", "b"), backend=native)
    src = flowgrad.grad(second_order_filter, wrt=("x", "a", "b"), backend=native).source(*args)
    old = re.search(r"^ +(_(\w+)_was\d+) = \2$", src, re.M)
    assert old, src
    assert any(any(old.group(1) + "[" in t for t in b) and any(re.match(rf"{old.group(2)}\[\w+\] = ", t) for t in b)
               for b in _loop_bodies(src)), src


def test_a_loop_nest_reads_and_writes_at_most_ten_arrays():
    kernels = pytest.importorskip("benchmarks.kernels")
    m = kernels.load("vadv")
    args = m.args("bench")     # (arrays of a page or less stay in cache, and do not count: see ``_small``)
    for src in (flowgrad.jit(m.kernel, backend=native).source(*args),
                flowgrad.grad(m.kernel, wrt=m.WRT, backend=native).source(*args)):
        widths = [len(set(re.findall(r"\b(\w+)\[", "\n".join(b)))) for b in _loop_bodies(src)]
        assert max(widths) <= 10 and 8 <= max(widths), (widths, src)


def fresh_arrays_per_pass(x, n):
    s = 0.0
    for i in range(n):
        t = x[:i + 1] * 2.0              # an array of run-time size, allocated on every pass
        t[0] = s * 0.1                   # (written, so that it is not fused away)
        s += np.sum(t * np.sin(t))
    return s


def prefix_times_two(x, n):
    return x[:n] * 2.0                   # handed to the caller: never carved from a kept buffer


def test_arrays_allocated_in_a_loop_come_from_a_kept_buffer():
    rng = np.random.default_rng(6)
    x = rng.uniform(-1, 1, 12)
    g = flowgrad.grad(fresh_arrays_per_pass, backend=native)
    for n in (3, 12, 5):                 # the buffer grows, then is reused
        check_grad(fresh_arrays_per_pass, (x, n), 0, backend=native)
        np.testing.assert_allclose(g(x, n), flowgrad.grad(fresh_arrays_per_pass, backend="numpy")(x, n), rtol=1e-12)
    src = g.source(x, 4)
    assert any(line.startswith("        ") and "_rt.room(_ws" in line for line in src.splitlines()), src
    f = flowgrad.jit(prefix_times_two, backend=native)
    first = f(x, 5)
    kept = first.copy()
    second = f(x, 7)
    np.testing.assert_array_equal(first, kept)
    np.testing.assert_array_equal(second, x[:7] * 2.0)


def _every_elementwise_op():
    """A program writing each elementwise primitive of ``ir.core.ELEMENTWISE`` (on real, complex,
    boolean or integer operands as it takes them) into one row of its float64 result."""
    from flowgrad.ir.core import ELEMENTWISE, Assign, Const, Container, Index, Op, Program, Read, Ref, Slice, op
    x = Container("x", np.float64, (5,), "arg")
    y = Container("y", np.float64, (5,), "arg")
    X, Y = Read(Ref(x)), Read(Ref(y))
    Z = op("add", op("complex128", X), op("multiply", Const(1j), Y))
    operands = {"arccosh": (op("add", X, Const(1.0)),), "logical_and": (op("greater", X, Const(0.5)),
                                                                        op("greater", Y, Const(0.5))),
                "logical_or": (op("greater", X, Const(0.5)), op("greater", Y, Const(0.5))),
                "logical_not": (op("greater", X, Const(0.5)),),
                "where": (op("greater", X, Y), X, Y), "checked_index": (Const(-2), Const(5)),
                "polygamma": (Const(3), X),
                "real": (Z,), "imag": (Z,), "conj": (Z,), "angle": (Z,)}
    names = sorted(ELEMENTWISE)
    out = Container("out", np.float64, (len(names), 5), "transient")
    body = []
    for k, name in enumerate(names):
        args = operands.get(name, (X, Y)[:ELEMENTWISE[name][0]])
        e = op(name, *args)
        if e.dtype.kind == "c":
            e = op("real", e)
        if e.dtype != np.float64:
            e = op("float64", e)
        body.append(Assign(Ref(out, (Index(k), Slice(0, 5, 1))), e))
    return names, Program("every_op", [x, y], body, [out], {c.name: c for c in (x, y, out)})


def test_both_backends_lower_every_elementwise_op():
    """What ``flowgrad.coverage()`` says of the elementwise primitives: each one is lowered by the
    numpy and the native backend, and they agree (the numpy backend's value against NumPy itself
    for the ufuncs NumPy has by that name)."""
    from flowgrad.backends import native as native_backend
    from flowgrad.backends import numpy as numpy_backend
    names, prog = _every_elementwise_op()
    x, y = np.linspace(0.2, 0.8, 5), np.linspace(0.7, 0.3, 5)
    ref = numpy_backend.compile_source(numpy_backend.emit_forward(prog), prog.name, "<every_op>")(x, y)
    got = native_backend.compile_source(native_backend.emit_forward(prog), prog.name)(x, y)
    ref, got = np.asarray(ref), np.asarray(got)
    assert ref.shape == got.shape == (len(names), 5)
    for k, name in enumerate(names):
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-13, atol=1e-15, err_msg=name)
        fn = getattr(np, name, None)
        if isinstance(fn, np.ufunc) and fn.nin == 2 and fn.nout == 1 and name not in ("logical_and", "logical_or"):
            np.testing.assert_allclose(ref[k], np.asarray(fn(x, y), dtype=np.float64), rtol=1e-15, err_msg=name)
        elif isinstance(fn, np.ufunc) and fn.nin == 1 and name not in ("logical_not", "real", "imag", "conj", "angle",
                                                                        "arccosh"):
            np.testing.assert_allclose(ref[k], np.asarray(fn(x), dtype=np.float64), rtol=1e-15, err_msg=name)


_CONTROL = 0xFFC0        # MXCSR without its sticky exception flags


def decaying(x, scale):
    y = x * scale           # 1e-160 * 1e-150: the adjoint reaching x is 1e-310, a subnormal number
    return np.sum(y * 1e-150) + np.sum(x) * 1e-310


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="flushing is x86 only")
def test_adjoint_sweep_flushes_subnormals_and_forward_does_not():
    """The adjoint sweep runs with subnormal numbers flushed to zero (as XLA on CPU), the forward
    sweep in IEEE arithmetic: the value a gradient call returns is NumPy's, subnormal included,
    and the caller's floating-point mode is the same after the call."""
    from flowgrad.backends.native_math import fp_mode
    x = np.linspace(1.0, 2.0, 8)
    before = fp_mode() & _CONTROL
    value, (g,) = flowgrad.value_and_grad(decaying, wrt=("x",), backend=native)(x, 1e-160)
    assert fp_mode() & _CONTROL == before
    assert value == decaying(x, 1e-160) and 0 < abs(value) < np.finfo(float).tiny   # forward: subnormal kept
    _, (g_ieee,) = flowgrad.value_and_grad(decaying, wrt=("x",), backend="numpy")(x, 1e-160)
    assert np.all(g_ieee > 0) and np.all(g_ieee < np.finfo(float).tiny)                # IEEE: 2e-310 each
    np.testing.assert_array_equal(g, 0.0)                                                # flushed
    np.testing.assert_allclose(flowgrad.grad(decaying, wrt=("x",), backend=native)(x, 1.0)[0],
                               np.full(8, 1e-150), rtol=1e-12, atol=0)                   # normal: unchanged


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="flushing is x86 only")
def test_mode_is_restored_when_the_adjoint_sweep_stops():
    """An error between flushing and restoring (an index check in the adjoint sweep, a failed
    allocation) leaves the caller's floating-point mode as it was."""
    import numba
    from flowgrad.backends.native_kernel import Kernel
    from flowgrad.backends.native_math import flush_subnormals, fp_mode

    @numba.njit
    def stops(x, _ws, _out):
        flush_subnormals()
        raise ValueError("stopped in the adjoint sweep")

    before = fp_mode() & _CONTROL
    kernel = Kernel(stops, (), flushes=True)
    with pytest.raises(ValueError, match="stopped"):
        kernel(1.0)
    assert fp_mode() & _CONTROL == before
    assert fp_mode() & 0x8040 == 0 and 1e-308 * 0.5 > 0


def matvec_loss(A, x):
    return np.sum(np.tanh(A @ x))


def matvec_t_loss(A, x):
    return np.sum(np.tanh(A.T @ x))


def _nest_of(src, text):
    """The loop headers enclosing the first line containing ``text``, outermost first."""
    lines = src.splitlines()
    k = next(i for i, ln in enumerate(lines) if text in ln)
    depth, heads = len(lines[k]) - len(lines[k].lstrip()), []
    for ln in reversed(lines[:k]):
        d = len(ln) - len(ln.lstrip())
        if d < depth and ln.strip().startswith("for "):
            heads.append(ln.strip())
            depth = d
    return heads[::-1]


def test_matrix_vector_adjoints_walk_rows():
    """The adjoint of ``A @ x`` for ``x`` (a column sum of ``A * g``) runs in the pass writing the
    adjoint for ``A``; that of ``A.T @ x`` writes ``A``'s adjoint row by row and sums each row of
    ``A`` for ``x``'s: every pass over ``A`` and its adjoint walks their rows."""
    rng = np.random.default_rng(5)
    A = rng.standard_normal((30, 20))
    for fn, x in ((matvec_loss, rng.standard_normal(20)), (matvec_t_loss, rng.standard_normal(30))):
        check_grad(fn, (A, x), (0, 1), backend=native)
        src = flowgrad.grad(fn, wrt=(0, 1), backend=native).source(A, x)
        lines = [ln.strip() for ln in src.splitlines()]
        write = next(i for i, ln in enumerate(lines) if ln.startswith("g_A["))
        assert "range(30)" in _nest_of(src, "g_A[")[0] and "range(20)" in _nest_of(src, "g_A[")[-1]
        if fn is matvec_loss:       # one nest: the sum for g_x next to the write of g_A
            assert lines[write - 1].startswith("g_x[")
        else:                       # a running sum along each row of A
            assert "range(20)" in _nest_of(src, "* g_matmul[")[-1] and "range(30)" in _nest_of(src, "* g_matmul[")[0]


def normalised_rows(x, g, b):
    # two layer norms' worth of row statistics: the statements reading sqrt(var + eps) per row
    # hoist it ahead of their nest and still share the nest with their neighbours
    mean = np.mean(x, axis=1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=1, keepdims=True)
    h = (x - mean) / np.sqrt(var + 1e-5) * g + b
    return np.sum(np.tanh(h) * x)


def test_statements_with_hoisted_row_values_share_a_nest():
    rng = np.random.default_rng(15)
    args = (rng.standard_normal((6, 40)), rng.uniform(0.5, 1.5, 40), rng.standard_normal(40))
    check_forward(normalised_rows, args, native)
    check_grad(normalised_rows, args, ("x", "g", "b"), backend=native)
    src = flowgrad.grad(normalised_rows, wrt=("x", "g", "b"), backend=native).source(*args)
    # a nest computing an element-wise adjoint (into its array, or a variable where only the nest
    # reads it) also sums a row of the adjoint
    adjoint = r"(g\w+\[_i\d+, _i\d+\]|_el\d+) = .*/ _ld\d+\)"
    assert re.search(r"_acc\d+ = _acc\d+ \+ .*\n\s+" + adjoint, src) or \
        re.search(adjoint + r"\n(.*\n)*?\s+_acc\d+ = _acc\d+ \+", src)


def written_then_hoisted(x, y):
    a = x * 2.0 + 1.0
    b = np.log1p(a) * y         # a large log1p: its argument copied and the ufunc run ahead of the nest
    return np.sum(a * b)


def test_a_hoisted_part_reading_what_the_nest_writes_keeps_its_own_nest():
    # in one nest with the write of ``a``, ``log1p(a)``, computed ahead of it, would read ``a``
    # before that write: the two statements keep a nest each
    rng = np.random.default_rng(16)
    args = (rng.uniform(0.5, 1.0, (40, 40)), rng.standard_normal((40, 40)))
    check_forward(written_then_hoisted, args, native)
    check_grad(written_then_hoisted, args, ("x", "y"), backend=native)
    src = flowgrad.jit(written_then_hoisted, backend=native).source(*args)
    assert "np.log1p" in src


def transposed_products(A, x, y):
    # A.T @ y and A @ x: the adjoints of both, for A and for the vectors, in one pass over A
    return np.sum((A.T @ y) ** 2) + np.sum(np.tanh(A @ x))


def test_adjoints_of_a_matrix_read_transposed_share_the_pass_over_it():
    rng = np.random.default_rng(17)
    args = (rng.standard_normal((30, 20)), rng.standard_normal(20), rng.standard_normal(30))
    check_grad(transposed_products, args, ("A", "x", "y"), backend=native)
    check_grad(transposed_products, args, ("A", "x", "y"), backend="numpy")
    src = flowgrad.grad(transposed_products, wrt=("A", "x", "y"), backend=native).source(*args)
    backward = src[src.index("flush_subnormals"):]
    # g_A is written in one nest over A's rows: set there once and added to in the same nest
    nests = re.findall(r"\n(\s+)for _i\d+ in range\(30\):\n(?:\1    .*\n)*?\1    for _i\d+ in range\(20\):\n"
                       r"((?:\1        .*\n)+)", backward)
    writes = [body for _, body in nests if "g_A[" in body]
    assert len(writes) == 1 and "g_A[" in writes[0] and "+=" in writes[0], backward


def pair_terms(a, b):
    """Every pair of an element of ``a`` and one of ``b``, through broadcasting (arc_distance's
    shape): its gradient's statements over the pairs, with the vectors they broadcast, fit one nest."""
    d = np.sin((b[None, :] - a[:, None]) / 2.0) ** 2 + np.cos(a[:, None]) * np.cos(b[None, :])
    return np.sum(np.sqrt(d + 1.0) * np.tanh(d))


def kept_temporary(x, y):
    t = np.exp(x) * y                   # read again after its nest: it stays an array
    return np.sum(t * x) + np.sum(t[::2, 1:] * 0.5)


def test_temporaries_only_their_nest_reads_are_held_in_variables():
    rng = np.random.default_rng(16)
    args = (rng.uniform(-1, 1, 30), rng.uniform(-1, 1, 40))
    check_forward(pair_terms, args, native)
    check_grad(pair_terms, args, ("a", "b"), backend=native)
    src = flowgrad.grad(pair_terms, wrt=("a", "b"), backend=native).source(*args)
    # one pass over the pairs, and no array of them stored: every value on a pair is a variable
    passes = [b for b in _loop_bodies(src) if re.search(r"_el\d+ = ", "\n".join(b))]
    assert len(passes) == 1 and not any(re.match(r"\w+\[_i\d+, _i\d+\] \+?= ", ln) for ln in passes[0]), src
    args = (rng.uniform(-1, 1, (6, 8)), rng.uniform(-1, 1, (6, 8)))
    check_forward(kept_temporary, args, native)
    check_grad(kept_temporary, args, ("x", "y"), backend=native)


def scaled_in_place(A, x):
    A *= 2.0                             # the program writes its argument
    A[0, :] += x
    return np.sum(A * A)


def returned_in_place(A, x):
    A[1, :] = x                          # the written argument is the result itself
    return A


def test_large_written_arguments_are_copied_into_a_kept_buffer():
    rng = np.random.default_rng(17)
    f = flowgrad.jit(scaled_in_place, backend=native)
    src = f.source(rng.standard_normal((800, 400)), rng.standard_normal(400))      # 2.4 MiB
    assert "A = _rt.copied(_ws[" in src and "A.copy()" not in src, src
    assert "A = A.copy()" in f.source(rng.standard_normal((4, 5)), rng.standard_normal(5))   # a small one: new memory
    for seed in range(3):                # new arrays each call: values of their own, callers' arrays kept
        args = (rng.standard_normal((800, 400)), rng.standard_normal(400))
        kept = [a.copy() for a in args]
        assert np.allclose(f(*args), scaled_in_place(*[a.copy() for a in args]), rtol=1e-12)
        assert all(np.array_equal(a, k) for a, k in zip(args, kept))
        check_grad(scaled_in_place, args, ("A", "x"), backend=native)
    # an argument handed back is a copy of its own, which a later call does not overwrite
    g = flowgrad.jit(returned_in_place, backend=native)
    first = g(np.zeros((3, 4)), np.ones(4))
    second = g(np.ones((3, 4)), np.full(4, 5.0))
    assert first[1, 0] == 1.0 and first[0, 0] == 0.0 and second[1, 0] == 5.0 and second[0, 0] == 1.0
