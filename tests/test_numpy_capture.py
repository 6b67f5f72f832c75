"""Small NumPy forms met in user code: ``np.ndarray(shape)`` as an allocation, constants built in
the function and then written with active values (``C = np.eye(n); C[0, :] = x``), the
builtin ``slice(...)``, ``np.hstack``/``vstack``/``stack``/``concatenate`` of one array (NumPy
iterates over its first axis), ``np.tensordot`` and ``np.einsum`` with a 0-d operand, and the
standard deviation of equal values (whose derivative is taken as 0, what central differences
give, instead of sqrt's infinite slope times zero).

Each program is checked on every backend: its gradient against finite differences, its
forward value against plain NumPy. Refusals assert their message and the user's line.
"""

import numpy as np
import pytest

import flowgrad
from conftest import have_module
from oracle import check_forward, check_grad


def U(shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


A0, X0 = U((4, 3)), U((3,), seed=1)
IDX = np.array([0, 2, 2])


def ndarray_allocation(x):
    y = np.ndarray((3,), dtype=float)
    y[:] = x * 2.0
    z = np.ndarray(shape=(2, 3))
    z[0], z[1] = x, x ** 2
    return np.sum(y * z)


def eye_written_with_active_values(x):
    C = np.eye(3)
    C[0, :] = x
    C[:, 2] += x ** 2
    return np.sum(C @ C.T) + np.sum(np.eye(3) * x)


def correlation_matrix_from_a_parameter(rho, w):
    n = 3
    C = np.eye(n)
    for i in range(n):
        for j in range(i + 1, n):
            C[i, j] = C[j, i] = rho ** (j - i)
    L = np.linalg.cholesky(C)
    z = L @ w
    return np.sum(z ** 2) + np.sum(np.log(np.diag(L)))


def zeros_then_filled(x):
    Z = np.zeros((3, 3))
    Z[np.arange(3), np.arange(3)] = x
    O = np.ones(3)
    O[1:] = x[:2] * 3.0
    return np.sum(np.linalg.solve(Z + 2.0 * np.eye(3), O))


def builtin_slices(A, v):
    B = A.copy()
    np.add.at(B, (IDX, slice(None)), v)
    s = slice(1, None)
    return np.sum(B ** 2) + np.sum(v[slice(1, None)] ** 3) + np.sum(A[s, slice(None, 2)] * A[:3, :2])


def stacks_of_one_array(A, x):
    return (np.sum(np.hstack(x) * x) + np.sum(np.hstack(A) ** 2) + np.sum(np.vstack(A) * A)
            + np.sum(np.vstack(x) ** 3) + np.sum(np.stack(A, axis=1) ** 2) + np.sum(np.concatenate(A) * 2.0)
            + np.sum(np.hstack([x[0], x[1], x]) ** 2) + np.sum(np.stack(x) * x))


def tensordot_with_a_scalar(x, s):
    return (np.sum(np.tensordot(x, s, axes=0) ** 2) + np.sum(np.einsum("i,->i", x, s) ** 2)
            + np.tensordot(s, s, axes=0) + np.sum(np.tensordot(x, 2.0, axes=0)))


def std_of_equal_values(x, A):
    return np.std(x) + x.std() + np.sum(np.std(A, axis=0)) + np.std(x, ddof=1) * 2.0


CONST = np.full(4, 0.7)
A_EQUAL_COLUMNS = np.array([[1.0, 2.0, 0.3], [1.0, 2.5, 0.3], [1.0, -1.0, 0.3]])

CASES = [
    (ndarray_allocation, (X0,)),
    (eye_written_with_active_values, (X0,)),
    (correlation_matrix_from_a_parameter, (0.4, X0)),
    (zeros_then_filled, (X0 + 1.5,)),
    (builtin_slices, (A0, X0)),
    (stacks_of_one_array, (A0, X0)),
    (tensordot_with_a_scalar, (X0, 1.5)),
    (std_of_equal_values, (CONST, A_EQUAL_COLUMNS)),
]


@pytest.mark.parametrize("fn, args", CASES, ids=[c[0].__name__ for c in CASES])
def test_grad(fn, args, backend):
    wrt = tuple(i for i, a in enumerate(args) if isinstance(a, (float, np.ndarray)) and np.asarray(a).dtype.kind == "f")
    check_grad(fn, args, wrt, backend=backend)


@pytest.mark.parametrize("fn, args", CASES, ids=[c[0].__name__ for c in CASES])
def test_forward(fn, args, backend):
    check_forward(fn, args, backend=backend)


def test_std_of_equal_values_has_a_zero_gradient(backend):
    g = flowgrad.grad(std_of_equal_values, wrt=(0, 1), backend=backend)(CONST, A_EQUAL_COLUMNS)
    assert np.all(g[0] == 0.0)
    assert np.all(g[1][:, [0, 2]] == 0.0) and np.all(np.isfinite(g[1]))


@pytest.mark.jax
@pytest.mark.skipif(not have_module("jax"), reason="needs jax")
def test_std_elsewhere_agrees_with_jax():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def f(x):
        return np.std(x) + np.std(x, ddof=1) * 2.0

    def fj(x):
        return jnp.std(x) + jnp.std(x, ddof=1) * 2.0
    x = U((6,), seed=3)
    assert np.allclose(flowgrad.grad(f)(x), np.asarray(jax.grad(fj)(x)), rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- refusals


def stack_of_a_run_time_length(A, k):
    return np.stack(A[k:])


def ndarray_over_a_buffer(x):
    return np.ndarray((3,), buffer=x)


def hstack_of_a_scalar(x):
    return np.hstack(x[0])


@pytest.mark.parametrize("fn, args, error, words", [
    (stack_of_a_run_time_length, (A0, 1), flowgrad.UnsupportedError, "length known only at run time"),
    (ndarray_over_a_buffer, (X0,), flowgrad.UnsupportedError, "np.ndarray(buffer=..."),
    (hstack_of_a_scalar, (X0,), flowgrad.FlowgradError, "not a sequence of arrays"),
], ids=lambda v: getattr(v, "__name__", None))
def test_refused_with_a_message(fn, args, error, words, backend):
    with pytest.raises(error) as excinfo:
        flowgrad.jit(fn, backend=backend)(*args)
    assert words in str(excinfo.value)
    assert "test_numpy_capture.py:" in str(excinfo.value)
