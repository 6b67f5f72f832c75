"""Loops over independent iterations in the captured program, interchanged (``passes/order.py``,
``interchange_forward_loops``) where that walks memory row by row: the leading statements of a
loop split from the rest first when nothing private to an iteration passes between them. Each
program's value is checked against NumPy and its gradient against finite differences, on both
backends where marked."""
import numpy as np
import pytest

import flowgrad
from oracle import check_forward, check_grad


def columns_then_rows(alpha, C, A, B):
    """symm's loop: a column update of the rows above, then an element of row i."""
    m, n = C.shape
    for i in range(m):
        for j in range(n):
            C[:i, j] += alpha * B[i, j] * A[i, :i]
            t = B[i, j] * A[i, i]
            C[i, j] = 0.5 * C[i, j] + t
    return np.sum(C * C)


def private_between(C, A, B):
    """``s``, private to an iteration, passes from the column update to the element after it."""
    m, n = C.shape
    for i in range(m):
        for j in range(n):
            s = B[i, j] * 2.0
            C[:i, j] += s * A[i, :i]
            C[i, j] = np.sin(C[i, j]) + s
    return np.sum(C * C)


def variable_read_after(C, A):
    """(The frontend gives the variable its last value after the loop itself.)"""
    m, n = C.shape
    for j in range(n):
        C[:, j] = C[:, j] * A[:, j]
    return np.sum(C * C) + j


def variable_reused(C, A):
    m, n = C.shape
    for j in range(n):
        C[:, j] = np.tanh(C[:, j] * A[:, j])
    for j in range(n):
        C[0, j] += 0.5 * j
    return np.sum(C * C)


def _args(m=7, n=20, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((m, n)), rng.standard_normal((m, m)), rng.standard_normal((m, n))


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_a_column_loop_splits_and_walks_rows(backend):
    C, A, B = _args()
    args = (1.3, C, A, B)
    text = flowgrad.jit(columns_then_rows, backend=backend).ir(*args)
    assert "C[j_" in text and "0:+20] += " in text, text          # a row of C per iteration
    check_forward(columns_then_rows, args, backend=backend, rtol=1e-12)
    check_grad(columns_then_rows, args, (0, 1, 2, 3), backend=backend)


def _pair(seed=1):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((7, 20)), rng.standard_normal((7, 20))


@pytest.mark.parametrize("fn, args", [(private_between, _args()), (variable_read_after, _pair()),
                                      (variable_reused, _pair())],
                         ids=["private_between", "variable_read_after", "variable_reused"])
def test_loops_that_must_keep_their_order_or_their_variable(fn, args):
    text = flowgrad.jit(fn).ir(*args)
    if fn is private_between:
        assert "C[j_" not in text, text          # the loop over j stays as it was
    check_forward(fn, args, rtol=1e-12)
    check_grad(fn, args, tuple(range(len(args))))


def few_columns(C, A):
    m, n = C.shape
    for k in range(n):
        C[:, k] += A[:, k] * 2.0
    return np.sum(C * C)


def test_a_loop_of_few_iterations_is_not_turned_inside_out():
    # its iterations would become the elements of the statements inside: too few to vectorise
    args = _pair()[0][:, :5].copy(), _pair()[1][:, :5].copy()
    assert "C[j_" not in flowgrad.jit(few_columns).ir(*args)
    check_grad(few_columns, args, (0, 1))


def elements(beta, C, P):
    """A loop of statements on single elements, with a scalar private to an iteration."""
    m, n = C.shape
    for i in range(m):
        for j in range(n):
            t = P[i, j] * beta
            C[i, j] = beta * C[i, j] + np.tanh(t)
            C[i, j] = C[i, j] * t + P[i, j]
    return np.sum(C * C)


def elements_shifted(beta, C, P):
    """Iteration j reads the element iteration j + 1 writes: the order matters."""
    m, n = C.shape
    for i in range(m):
        for j in range(n - 1):
            C[i, j] = beta * C[i, j + 1] + P[i, j]
    return np.sum(C * C)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_a_loop_on_single_elements_becomes_statements_over_them(backend):
    C, P = _pair(2)
    args = (0.7, C, P)
    text = flowgrad.jit(elements, backend=backend).ir(*args)
    assert "C[i, 0:+20] = " in text and "for j" not in text, text
    check_forward(elements, args, backend=backend, rtol=1e-12)
    check_grad(elements, args, (0, 1, 2), backend=backend)
    text = flowgrad.jit(elements_shifted, backend=backend).ir(*args)
    assert "for j" in text, text
    check_grad(elements_shifted, args, (0, 1, 2), backend=backend)


def forward_substitution(L, b):
    """trisolv: the adjoint of ``x[i] -= L[i, j] * x[j]`` reads ``g_x[i]`` in a loop summing into
    ``g_x[j]``, ``j < i``: a part no iteration writes."""
    n = b.shape[0]
    x = np.zeros(n)
    for i in range(n):
        x[i] = b[i]
        for j in range(i):
            x[i] -= L[i, j] * x[j]
        x[i] = x[i] / L[i, i]
    return np.sum(x * x) + np.sum(np.sin(x))


def through_the_diagonal(L, b):
    """``j`` reaches ``i``: the adjoint reads an element its last iteration writes."""
    n = b.shape[0]
    x = b.copy()
    for i in range(n):
        for j in range(i + 1):
            x[i] = x[i] - 0.1 * L[i, j] * x[j]
    return np.sum(x * x)


def _backward(fn, args):
    return flowgrad.grad(fn, wrt=(0, 1)).ir(*args).split("# backward")[1]


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_a_reversed_loop_reading_a_part_it_never_writes_becomes_statements(backend):
    rng = np.random.default_rng(3)
    n = 9
    L = np.tril(rng.uniform(-1, 1, (n, n))) / n + np.diag(rng.uniform(1, 2, n))
    args = (L, rng.standard_normal(n))
    text = _backward(forward_substitution, args)
    # the statements read the element where it is: no iteration sums into it (g_x[i] beside
    # g_x[0:i]), so no copy of it is kept first
    assert "for j" not in text and "g_array[0:+maximum(0, i)] += (-g_array[i] * " in text, text
    check_grad(forward_substitution, args, (0, 1), backend=backend)
    text = _backward(through_the_diagonal, args)
    assert "for j in 0:(i + 1)" in text or "for j in reversed(0:(i + 1)" in text, text
    check_grad(through_the_diagonal, args, (0, 1), backend=backend)


def rows(alpha, A, B, D, x):
    """k2mm's and gemver's row loops: a row of a fill, a sum of a product into a row, a scalar
    per row broadcast along it."""
    n, m = A.shape
    tmp = np.zeros((n, m))
    for i in range(n):
        tmp[i, :] = alpha * (A[i, :] @ B)
    for i in range(n):
        D[i, :] += np.tanh(tmp[i, :]) * x[i] + x[i] * A[i, 0]
    return np.sum(D * D)


def rows_shifted(A, D):
    """Row i reads the row iteration i - 1 wrote: the order matters."""
    n = A.shape[0]
    for i in range(1, n):
        D[i, :] = 0.5 * D[i - 1, :] + A[i, :]
    return np.sum(D * D)


def rows_not_leading(A, D):
    """The loop moves the second axis of the views: its rows would not be the leading axis."""
    n = A.shape[1]
    for i in range(n):
        D[:, i, :] = np.sin(A[:, i, :]) * 2.0
    return np.sum(D * D)


def rows_private(A, D):
    """A value private to an iteration, in a loop starting past the first row with a step."""
    n = A.shape[0]
    for i in range(1, n, 2):
        t = np.tanh(A[i, :])
        D[i, :] += t * A[i, 0]
    return np.sum(D * D)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_a_loop_over_rows_becomes_statements_over_all_rows(backend):
    rng = np.random.default_rng(4)
    n = 20
    A, B, D, x = (rng.standard_normal((n, n)), rng.standard_normal((n, n)) / n, rng.standard_normal((n, n)),
                  rng.standard_normal(n))
    args = (0.8, A, B, D, x)
    text = flowgrad.grad(rows, wrt=(0, 1, 2, 3, 4), backend=backend).ir(*args)
    # no loop is left; the fill the first loop overwrites row by row is gone, the product is
    # summed into ``D`` whole and the scalar per row broadcasts along it (``x[0:+20, newaxis]``)
    assert "for " not in text and "array = 0.0" not in text and "x[0:+20, newaxis]" in text, text
    check_forward(rows, args, backend=backend, rtol=1e-12)
    check_grad(rows, args, (0, 1, 2, 3, 4), backend=backend)
    args = (rng.standard_normal((40, 5)), rng.standard_normal((40, 5)))
    assert "for i" not in flowgrad.jit(rows_private, backend=backend).ir(*args)
    check_forward(rows_private, args, backend=backend, rtol=1e-12)
    check_grad(rows_private, args, (0, 1), backend=backend)
    for fn in (rows_shifted, rows_not_leading):
        args = (A, D.copy()) if fn is rows_shifted else tuple(rng.standard_normal((3, n, 4)) for _ in 'AD')
        assert "for i" in flowgrad.jit(fn, backend=backend).ir(*args)
        check_forward(fn, args, backend=backend, rtol=1e-12)
        check_grad(fn, args, (0, 1), backend=backend)
