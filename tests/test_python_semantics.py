"""Python's semantics of scalar expressions in captured code, on every backend: ``and``/``or``
give the value of the operand that decides and evaluate the right one only where it must be
(``i < len(x) and x[i] > 0`` does not index past the end), as conditional expressions evaluate
only the side they take and chained comparisons stop at the first that fails. Each case: the
forward program against plain Python/NumPy and the gradient against finite differences.

The programs live at module level: flowgrad captures them from this file's source.
"""
import math

import numpy as np
import pytest

from oracle import check_forward, check_grad

X = np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])


def or_value(x, n, s):
    return x[0] * (n or 5) + x[1] * (s or 2.0)


def and_or_value(x, n):
    return x[0] * (n and 3 or 5)


def guarded_while(x):
    i = 0
    while i < len(x) and x[i] > 0:
        i += 1
    return x[0] * i + np.sum(x[:i] ** 2)


def guarded_if(x, k):
    s = np.sum(x)
    if k < len(x) and x[k] > 0:
        s = s * x[k]
    if k >= len(x) or x[k] > 3.5:
        s = s + 1.0
    return s


def guarded_pick(x, k, s):
    a = x[k] * 2.0 if k < len(x) else 0.0
    b = math.log(s) if s > 0 else 0.0           # no log of a negative s
    return x[1] * a + x[2] * b


def chained(x, k):
    return x[0] * (1.0 if 0 <= k < len(x) and x[k] > 2.5 else 3.0)


def guarded_in_loop(x, k):
    s = 0.0
    for i in range(len(x)):
        if i + k < len(x) and x[i + k] > 2.0:
            s += x[i] * x[i + k]
    return s


def is_none(x, c):
    return np.sum(x) if c is None else np.sum(x * c) + (c is not None)


def int_powers(x, n, m):
    return x[0] * n ** -1 + x[1] * n ** m + x[2] * 10 ** m + np.sum(x) / 4294967296


CASES = [
    (int_powers, (X, 4, 3)),
    (is_none, (X, None)), (is_none, (X, 0.5)),
    (or_value, (X, 0, 0.0)), (or_value, (X, 2, 1.5)),
    (and_or_value, (X, 0)), (and_or_value, (X, 2)),
    (guarded_while, (X,)), (guarded_while, (X - 3.5,)),
    (guarded_if, (X, 4)), (guarded_if, (X, 6)), (guarded_if, (X, 2)),
    (guarded_pick, (X, 6, -1.0)), (guarded_pick, (X, 2, 2.0)),
    (chained, (X, 7)), (chained, (X, 2)), (chained, (X, -1)),
    (guarded_in_loop, (X, 2)), (guarded_in_loop, (X, 9)),
]
IDS = [f"{fn.__name__}-{'-'.join(str(a) for a in args[1:])}" for fn, args in CASES]


@pytest.mark.parametrize("fn, args", CASES, ids=IDS)
def test_forward(fn, args, backend):
    check_forward(fn, args, backend=backend)


@pytest.mark.parametrize("fn, args", CASES, ids=IDS)
def test_grad(fn, args, backend):
    check_grad(fn, args, 0, backend=backend)


def test_a_negative_run_time_exponent_of_an_integer_raises(backend):
    # Python's 4 ** -2 is a float; flowgrad's integer power is an integer: it raises, as NumPy's
    # integer power does, instead of rounding to 0
    import flowgrad
    with pytest.raises(ValueError, match=r"test_python_semantics.py:\d+: integer \*\* negative integer \(-2\)"):
        flowgrad.jit(int_powers, backend=backend)(X, 4, -2)


def mixed_products(B, A, v, i):
    return np.sum(A @ B) + np.dot(v, B[:, 0]) + np.sum(i @ B) + np.sum(i @ i)


def test_products_of_mixed_dtypes(backend):
    # one float dtype for both operands (BLAS takes no mixed or integer ones); an integer product
    # is an integer, as NumPy's
    args = (np.arange(6.0).reshape(3, 2), np.ones((2, 3), dtype=np.float32), np.ones(3, dtype=np.float32),
            np.arange(3))
    check_forward(mixed_products, args, backend=backend)
    check_grad(mixed_products, args, 0, backend=backend)


def scaled(x, s, n):
    c = s * 2.0                      # Python arithmetic on Python scalars: still weak
    acc = 0.0
    for i in range(x.shape[0]):
        acc += x[i] * c              # a NumPy float32 from here on, as in Python
    return x * s + n + acc


@pytest.mark.parametrize("s, n", [(0.5, 3), (np.float64(0.5), 3), (0.5, np.int64(3))], ids=["python", "np-float", "np-int"])
def test_python_scalars_are_weak_in_promotion(s, n, backend):
    # NumPy 2 (NEP 50): a float32 array times a Python float stays float32; a NumPy float64
    # scalar makes it float64
    import flowgrad
    x = np.arange(1.0, 4.0, dtype=np.float32)
    expected = scaled(x, s, n)
    got = flowgrad.jit(scaled, backend=backend)(x, s, n)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def numpy_scalar(x):
    return x * np.float64(2.0)           # a NumPy scalar is strong: float64


def python_floats(x, t):
    return float(x[0]) * x + x * math.cos(t)   # Python floats are weak: float32 stays


def widened_in_a_loop(x, n, t):
    for i in range(n):
        x = x * np.cos(t)                # float64 from the first pass on, as NumPy's name
    return x


@pytest.mark.parametrize("fn, args", [(numpy_scalar, ()), (python_floats, (0.3,)), (widened_in_a_loop, (2, 0.3))],
                         ids=["numpy-scalar", "python-floats", "widened-in-a-loop"])
def test_float32_promotion_follows_numpy(fn, args, backend):
    import flowgrad
    x = np.arange(1.0, 4.0, dtype=np.float32)
    expected, got = fn(x.copy(), *args), flowgrad.jit(fn, backend=backend)(x, *args)
    assert got.dtype == expected.dtype, (got.dtype, expected.dtype)
    np.testing.assert_allclose(got, expected, rtol=1e-6)
