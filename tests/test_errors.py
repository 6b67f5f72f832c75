"""Errors are features (STYLE.md, rule 8): each names the problem, the place and the fix.

* UnsupportedError: raised at the first call, before any user code runs, with the message
  ``<file>:<line>: unsupported <construct>: <hint>``. Line numbers are found by searching
  the function's source for a marker, never hard-coded.
* InputError (also a ValueError): bad input at call time; the message names what is wrong.

After any error the caller's arrays are unchanged.
"""

import inspect
import os
import re

import numpy as np
import pytest

import flowgrad

try:
    import scipy.special
except ImportError:  # the test that needs it skips
    scipy = None

THIS_FILE = os.path.basename(__file__)


def line_of(fn, marker):
    """Absolute line number in this file of the first line of `fn` containing `marker`."""
    lines, start = inspect.getsourcelines(fn)
    for offset, text in enumerate(lines):
        if marker in text:
            return start + offset
    raise AssertionError(f"test bug: {marker!r} not in the source of {fn.__name__}")


def assert_unsupported_message(error, fn, marker, word_pattern):
    message = str(error)
    line = line_of(fn, marker)
    assert f"{THIS_FILE}:{line}:" in message, (
        f"message should name {THIS_FILE}:{line} (the line with {marker!r}), got: {message}"
    )
    assert re.search(rf"{re.escape(THIS_FILE)}:{line}: unsupported .+: \S", message), (
        f"message should read '<file>:<line>: unsupported <construct>: <hint>', got: {message}"
    )
    assert re.search(word_pattern, message, re.IGNORECASE), (
        f"message should name the construct ({word_pattern!r}), got: {message}"
    )


def U(shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


# ---------------------------------------------------------------------------------------
# Unsupported constructs
# ---------------------------------------------------------------------------------------


def uses_list_comprehension(x, n):
    y = x * 2.0
    parts = [y[i] * y[i] for i in range(n)]
    return np.sum(parts)


def uses_try(x):
    y = x * 2.0
    try:
        y = np.log(y)
    except FloatingPointError:
        y = y + 1.0
    return np.sum(y)


def uses_set_comprehension(x):
    square = {v for v in x}
    return np.sum(x)


def defines_class(x):
    class Box:
        scale = 2.0

    return np.sum(x) * Box.scale


def uses_fft(x):
    spectrum = np.fft.hfft(x)
    return np.sum(np.abs(spectrum))


def uses_eig(A):
    w, v = np.linalg.eig(A)
    return np.sum(np.abs(w))


def uses_scipy_gamma(x):
    return np.sum(scipy.special.gamma(x))


CALLS = 0


def uses_global(x):
    global CALLS
    CALLS += 1
    return np.sum(x) * CALLS


def _helper_with_lambda(x):
    seen = {v for v in x}
    return 2.0 * x


def calls_bad_helper(x):
    y = x ** 2
    return np.sum(_helper_with_lambda(y))


def unsupported_in_dead_branch(x, n):
    s = np.sum(x ** 2)
    if n > 1000:
        s = s + np.sum(list({v for v in x}))
    return s


def mutates_then_unsupported(A):
    A[0] = 99.0
    A *= 3.0
    rows = {a for a in A}
    return np.sum(rows)


def writes_through_reshape(x):
    y = x.reshape(2, 3)
    y[0, 0] = 5.0            # NumPy: changes x too
    return np.sum(x * x)     # refused: reads x after that write


def reads_reshape_after_source_write(x):
    y = x.reshape(2, 3)
    x[0] = 5.0
    return np.sum(y[0] * y[1])   # NumPy: y shows the write


def writes_source_of_reshape_in_loop(x, n):
    y = x.reshape(2, 3)
    s = 0.0
    for i in range(n):
        s += np.sum(y * y)
        x[i] += 1.0              # NumPy: the next pass's y shows the write
    return s


def writes_a_conditional_alias(x, c):
    y = x
    if c > 0:
        y = y * 2.0
    x *= 3.0                     # NumPy: y shows this when c <= 0
    return np.sum(y)


def swaps_with_an_argument(x, n):
    a = x
    b = x * 0.0
    for i in range(n):
        b[:] = a * 2.0               # NumPy: on odd passes b is x
        a, b = b, a
    return np.sum(x)


def loop_rebinds_a_view(x, n):
    y = x[:2]
    for i in range(n):
        y *= 2.0                     # NumPy: writes x[:2], then x[2:]
        y = x[2:]
    return np.sum(x)


def carries_a_view_it_then_overwrites(x):
    prev = np.zeros(x.shape[0])
    out = 0.0
    for j in range(1, x.shape[1]):
        x[:, j - 1] = 2.0 * x[:, j - 1]      # NumPy: prev, bound to x[:, j - 1] last pass, shows it
        out += np.sum(prev * prev)
        prev = x[:, j]
    return out


def carries_a_copied_view_it_then_overwrites(x):
    prev = np.zeros(x.shape[0])
    older = np.zeros(x.shape[0])
    out = 0.0
    for j in range(1, x.shape[1]):
        out += np.sum(older * older)
        older = prev
        x[:, j - 1] = 2.0 * x[:, j - 1]      # NumPy: older is x[:, j - 1], read on the next pass
        prev = x[:, j]
    return out


def view_after_a_loop(x, n):
    a = x
    for i in range(n):
        a = x[::-1]
    a[0] = 5.0                       # NumPy: x[0] when n == 0, else x[-1]
    return np.sum(x * np.arange(4.0))


def _pick(a, b, c):
    if c > 0.0:
        return a
    return b


def writes_a_helper_result(x, z, c):
    y = _pick(x, z, c)
    y *= 2.0                         # NumPy: doubles x or z
    return np.sum(x) + np.sum(z)


def writes_a_chained_reshape(x):
    y = x.reshape(2, 2).ravel()
    y *= 3.0
    return np.sum(x)


def shrinks_in_a_loop(x, n):
    v = x
    for i in range(n):
        v = v[1:]
    return np.sum(v)


def picks_different_shapes(x, c):
    y = x[2:4] if c > 0.0 else x[:]
    return np.sum(y)


def writes_a_chosen_array(u, v, axis):
    t = u if axis == 0 else v
    t[0] = 100.0                     # NumPy: writes u or v
    return np.sum(u) + np.sum(v)


UNSUPPORTED = [
    pytest.param(uses_list_comprehension, "for i in range(n)", r"comprehension", lambda: (U((4,)), 3),
                 id="list-comprehension-of-run-time-length"),
    pytest.param(uses_try, "try:", r"\btry\b", lambda: (U((4,), 0.5, 1.0),), id="try-except"),
    pytest.param(uses_set_comprehension, "for v in x", r"set comprehension", lambda: (U((4,)),), id="set-comprehension"),
    pytest.param(defines_class, "class Box", r"\bclass\b", lambda: (U((4,)),), id="class-definition"),
    pytest.param(uses_fft, "np.fft.hfft(x)", r"\b(np|numpy)\.fft\.hfft\b", lambda: (U((4,)),), id="np.fft.hfft"),
    pytest.param(
        uses_eig, "np.linalg.eig(A)", r"\b(np|numpy)\.linalg\.eig\b", lambda: (U((3, 3)),), id="np.linalg.eig"
    ),
    pytest.param(
        uses_scipy_gamma, "scipy.special.gamma(x)", r"gamma", lambda: (U((4,), 0.5, 2.0),), id="scipy.special.gamma"
    ),
    pytest.param(uses_global, "global CALLS", r"\bglobal\b", lambda: (U((4,)),), id="global"),
    pytest.param(unsupported_in_dead_branch, "for v in x", r"comprehension", lambda: (U((4,)), 3), id="dead-branch"),
    pytest.param(writes_through_reshape, "return np.sum(x * x)", r"reading 'x' after a write .* through a copy .*the result of reshape", lambda: (U((6,)),), id="write-through-reshape"),
    pytest.param(reads_reshape_after_source_write, "return np.sum(y[0] * y[1])", r"reading 'y' after a write .* into the array whose memory it stands for.*reshape",
                 lambda: (U((6,)),), id="read-reshape-after-source-write"),
    pytest.param(writes_source_of_reshape_in_loop, "x[i] += 1.0", r"in a loop.*reshape",
                 lambda: (U((6,)), 3), id="write-reshape-source-in-loop"),
    pytest.param(swaps_with_an_argument, "for i in range(n):", r"'a' shares another array's memory on entry",
                 lambda: (U((4,)), 2), id="swap-with-an-argument"),
    pytest.param(loop_rebinds_a_view, "y = x[2:]", r"reading 'x' after a write .*'y', which shares", lambda: (U((4,)), 2), id="loop-rebinds-a-view"),
    pytest.param(carries_a_view_it_then_overwrites, "x[:, j - 1] = 2.0 * x[:, j - 1]",
                 r"the part of 'x' that 'prev' views while the loop carries 'prev'.*\.copy\(\)", lambda: (U((3, 5)),),
                 id="carried-view-then-overwritten"),
    pytest.param(carries_a_copied_view_it_then_overwrites, "x[:, j - 1] = 2.0 * x[:, j - 1]",
                 r"the part of 'x' that 'older' views", lambda: (U((3, 5)),), id="carried-view-copied-on"),
    pytest.param(view_after_a_loop, "return np.sum(x * np.arange(4.0))", r"'a'.*whether the loop runs",
                 lambda: (U((4,)), 0), id="view-after-a-loop"),
    pytest.param(writes_a_helper_result, "return np.sum(x) + np.sum(z)", r"result of _pick\(\)",
                 lambda: (U((4,)), U((4,)), 1.0), id="helper-returns-an-argument"),
    pytest.param(writes_a_chained_reshape, "return np.sum(x)", r"reshape", lambda: (U((4,)),),
                 id="chained-reshape"),
    pytest.param(shrinks_in_a_loop, "for i in range(n):", r"changing shape", lambda: (U((6,)), 2),
                 id="shrinks-in-a-loop"),
    pytest.param(picks_different_shapes, "y = x[2:4] if c > 0.0 else x[:]", r"different shapes",
                 lambda: (U((6,)), 1.0), id="choice-of-shapes"),
    pytest.param(writes_a_chosen_array, "return np.sum(u) + np.sum(v)", r"reading 'u' .*conditional expression",
                 lambda: (U((3,)), U((3,)), 0), id="conditional-expression-alias"),
    pytest.param(writes_a_conditional_alias, "return np.sum(y)", r"'y'.*one path of the branch",
                 lambda: (U((4,)), -1), id="conditional-alias-then-write"),
]


@pytest.mark.parametrize("fn, marker, word, make", UNSUPPORTED)
def test_unsupported_construct(fn, marker, word, make, backend):
    if fn is uses_scipy_gamma and scipy is None:
        pytest.skip("scipy is not installed")
    args = make()
    saved = [np.copy(a) for a in args]
    with pytest.raises(flowgrad.UnsupportedError) as excinfo:
        flowgrad.grad(fn, backend=backend)(*args)
    assert_unsupported_message(excinfo.value, fn, marker, word)
    for a, s in zip(args, saved):
        assert np.array_equal(a, s), "caller's array changed after an UnsupportedError"


def test_unsupported_construct_in_a_helper_names_the_helper_line(backend):
    with pytest.raises(flowgrad.UnsupportedError) as excinfo:
        flowgrad.grad(calls_bad_helper, backend=backend)(U((4,)))
    assert_unsupported_message(excinfo.value, _helper_with_lambda, "for v in x", r"comprehension")


ENTRY_POINTS = {
    "grad": lambda fn, args, backend: flowgrad.grad(fn, backend=backend)(*args),
    "value_and_grad": lambda fn, args, backend: flowgrad.value_and_grad(fn, backend=backend)(*args),
    "vjp": lambda fn, args, backend: flowgrad.vjp(fn, *args, backend=backend),
    "jit": lambda fn, args, backend: flowgrad.jit(fn, backend=backend)(*args),
}


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_every_entry_point_reports_unsupported(entry, backend):
    with pytest.raises(flowgrad.UnsupportedError) as excinfo:
        ENTRY_POINTS[entry](uses_list_comprehension, (U((4,)), 3), backend)
    assert_unsupported_message(excinfo.value, uses_list_comprehension, "for i in range(n)", r"comprehension")


def test_unsupported_is_raised_before_any_user_code_runs(backend):
    global CALLS
    CALLS = 0
    with pytest.raises(flowgrad.UnsupportedError):
        flowgrad.grad(uses_global, backend=backend)(U((4,)))
    assert CALLS == 0, "the function body ran before the unsupported construct was reported"


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_caller_arrays_unchanged_after_unsupported(entry, backend):
    A = U((3, 4))
    saved = A.copy()
    with pytest.raises(flowgrad.UnsupportedError) as excinfo:
        ENTRY_POINTS[entry](mutates_then_unsupported, (A,), backend)
    assert np.array_equal(A, saved), "caller's array changed although the call failed"
    assert_unsupported_message(excinfo.value, mutates_then_unsupported, "for a in A", r"comprehension")


# ---------------------------------------------------------------------------------------
# InputError: bad input at call time
# ---------------------------------------------------------------------------------------


def test_error_hierarchy():
    assert issubclass(flowgrad.UnsupportedError, flowgrad.FlowgradError)
    assert issubclass(flowgrad.InputError, flowgrad.FlowgradError)
    assert issubclass(flowgrad.InputError, ValueError)
    assert issubclass(flowgrad.FlowgradError, Exception)


def simulate(field, alpha, steps):
    u = field.copy()
    for t in range(steps):
        u = u + alpha * np.sin(u)
    return np.sum(u ** 2)


def simulate_args():
    return U((5,)), 0.3, 2


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda b: flowgrad.grad(simulate, wrt="alpah", backend=b)(*simulate_args()), id="grad"),
        pytest.param(
            lambda b: flowgrad.grad(simulate, wrt=("field", "alpah"), backend=b)(*simulate_args()), id="grad-tuple"
        ),
        pytest.param(
            lambda b: flowgrad.value_and_grad(simulate, wrt="alpah", backend=b)(*simulate_args()), id="value_and_grad"
        ),
        pytest.param(lambda b: flowgrad.vjp(simulate, *simulate_args(), wrt=("alpah",), backend=b), id="vjp"),
    ],
)
def test_wrt_name_that_does_not_exist(call, backend):
    with pytest.raises(flowgrad.InputError) as excinfo:
        call(backend)
    message = str(excinfo.value)
    for needed in ("wrt", "alpah", "field", "alpha", "steps"):
        assert needed in message, f"message should mention {needed!r}: {message}"


def returns_array(A):
    A[0] *= 2.0
    return np.sin(A) * 2.0


def returns_one_element_array(x):
    return np.sum(x ** 2, keepdims=True)


@pytest.mark.parametrize("fn, arg", [(returns_array, (3, 4)), (returns_one_element_array, (4,))])
def test_grad_of_non_scalar_result(fn, arg, backend):
    A = U(arg)
    saved = A.copy()
    with pytest.raises(flowgrad.InputError) as excinfo:
        flowgrad.grad(fn, backend=backend)(A)
    message = str(excinfo.value)
    assert "scalar" in message and "vjp" in message, f"message should say 'scalar' and suggest vjp: {message}"
    assert np.array_equal(A, saved), "caller's array changed although the call failed"


def takes_non_float(x, idx, n, mask):
    return np.sum(x[idx] ** 2) * n + np.sum(x[mask])


def non_float_args():
    return U((5,)), np.array([0, 2, 4]), 3, np.array([True, False, True, False, True])


@pytest.mark.parametrize(
    "wrt", ["n", "idx", "mask", ("x", "idx"), 2], ids=["int-scalar", "int-array", "bool-array", "tuple", "position"]
)
def test_wrt_integer_or_bool_argument(wrt, backend):
    args = non_float_args()
    with pytest.raises(flowgrad.InputError) as excinfo:
        flowgrad.grad(takes_non_float, wrt=wrt, backend=backend)(*args)
    message = str(excinfo.value)
    assert "wrt" in message and "float" in message, f"message should say 'wrt' and 'float': {message}"


def plain_sum(x, y):
    return np.sum(x * 2.0) + np.sum(y)


@pytest.mark.parametrize(
    "x, y",
    [
        pytest.param(np.array([1.0, 2.0, 3.0], dtype=object), U((3,)), id="object-wrt"),
        pytest.param(U((3,)), np.array([1.0, 2.0, 3.0], dtype=object), id="object-other"),
        pytest.param(U((3,)).astype(np.float16), U((3,)), id="float16-wrt"),
        pytest.param(U((3,)), U((3,)).astype(np.float16), id="float16-other"),
    ],
)
def test_bad_array_dtype(x, y, backend):
    with pytest.raises(flowgrad.InputError) as excinfo:
        flowgrad.grad(plain_sum, backend=backend)(x, y)
    assert "dtype" in str(excinfo.value), f"message should mention 'dtype': {excinfo.value}"
    with pytest.raises(flowgrad.InputError) as excinfo:
        flowgrad.vjp(plain_sum, x, y, wrt="x", backend=backend)
    assert "dtype" in str(excinfo.value), f"vjp: message should mention 'dtype': {excinfo.value}"


def matrix_out(A, x):
    return A * x


@pytest.mark.parametrize("shape", [(4, 3), (4,), (3,), (12,), (), (1, 3, 4)])
def test_cotangent_of_wrong_shape(shape, backend):
    A, x = U((3, 4)), U((4,), seed=1)
    out, pullback = flowgrad.vjp(matrix_out, A, x, backend=backend)
    assert out.shape == (3, 4)
    with pytest.raises(flowgrad.InputError) as excinfo:
        pullback(np.ones(shape))
    message = str(excinfo.value)
    assert "cotangent" in message and "shape" in message, f"message should say 'cotangent' and 'shape': {message}"
    # The pullback still works after the error.
    gA, gx = pullback(np.ones((3, 4)))
    np.testing.assert_allclose(gA, np.broadcast_to(x, (3, 4)), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gx, A.sum(axis=0), rtol=1e-10, atol=1e-12)
