"""Regression tests for silent wrong gradients of in-place updates found by random programs.

Each case was once a wrong gradient that looked right: the adjoint of an in-place write read
the array as the write left it, or a loop sweeping an array in place read elements a later
iteration overwrote. Every case runs on every backend against finite differences.
"""
import numpy as np
import pytest

import flowgrad
from benchmarks.kernels import symm
from oracle import check_forward, check_grad


# ---------------------------------------------------------------- in-place Calls reading their destination


def add_at_reads_destination(x):
    np.add.at(x, np.array([0]), np.sin(x[0:1]))          # d/dx0 = 1 + cos(x0)
    return np.sum(x)


def add_at_scalar_value(x):
    np.add.at(x, np.array([0, 2, 0]), np.sin(x[0]))      # a 0-d value broadcast to the index
    return np.sum(x * x)


def add_at_permuted_overlap(x):
    np.add.at(x, np.array([1, 0, 1]), np.sin(x[0:3]) * x[1:4])
    return np.sum(x * x * x)


def add_at_broadcast_view(x):
    np.add.at(x, np.array([0, 2, 0]), x[1:2] * 2.0)
    return np.sum(x * x)


def scatter_reads_destination(x):
    idx = np.array([2, 0])
    x[idx] = np.sin(x[idx]) * x[idx]
    return np.sum(np.exp(x))


def scatter_add_reads_destination(x):
    x[np.array([1, 0])] += np.sin(x[0:2])
    return np.sum(x * x)


def mask_write_reads_destination(x):
    m = x > 0.5
    x[m] = np.sin(x[m]) * x[m]
    return np.sum(x * x)


@pytest.mark.parametrize("fn", [add_at_reads_destination, add_at_scalar_value, add_at_permuted_overlap,
                                add_at_broadcast_view, scatter_reads_destination,
                                scatter_add_reads_destination, mask_write_reads_destination],
                         ids=lambda f: f.__name__)
def test_in_place_call_adjoint_sees_values_before_the_write(fn, backend):
    x = np.array([0.3, 0.7, 0.4, 0.9])
    check_forward(fn, (x,), backend)
    check_grad(fn, (x,), backend=backend)


def test_add_at_gradient_matches_the_exact_derivative(backend):
    import flowgrad
    x = np.array([0.3, 0.7])
    g = flowgrad.grad(add_at_reads_destination, backend=backend)(x)
    np.testing.assert_allclose(g, [1.0 + np.cos(0.3), 1.0], rtol=1e-13)


# ---------------------------------------------------------------- loops sweeping an array in place


def sweep_reads_ahead(x):
    for t in range(2):
        x[t] = 0.9 * x[t] + 0.1 * np.cos(x[t + 1])      # x[t + 1] is overwritten by the next pass
    return np.sum(np.sin(x))


def sweep_run_time_bound(x):
    for t in range(x.shape[0] - 1):
        x[t] = 0.9 * x[t] + 0.1 * np.cos(x[t + 1])
    return np.sum(np.sin(x))


def sweep_descending(x):
    for i in range(x.shape[0] - 2, 0, -1):
        x[i] = np.sin(x[i - 1] + x[i + 1])
    return np.sum(np.sin(x))


def sweep_both_neighbours(x):
    for i in range(1, x.shape[0] - 1):
        x[i] = np.sin(x[i - 1] + x[i + 1])
    return np.sum(x * x)


def sweep_slices(x):
    for t in range(3):
        x[t:t + 2] = np.cos(x[t + 1:t + 3]) * x[t:t + 2]
    return np.sum(np.sin(x))


def sweep_through_a_view(x):
    v = x[1:]
    for t in range(3):
        v[t] = 0.5 * v[t] + np.cos(x[t + 2]) * x[t]
    return np.sum(np.sin(x))


def sweep_repeated(x):
    for sweep in range(2):
        for i in range(x.shape[0] - 1):
            x[i] = 0.5 * np.sin(x[i + 1]) + 0.5 * x[i]
    return np.sum(x ** 3)


def gauss_seidel_2d(x):
    A = x.reshape(3, 3) * 1.0
    for s in range(2):
        for i in range(1, 2):
            for j in range(1, 2):
                A[i, j] = 0.25 * np.tanh(A[i - 1, j] + A[i + 1, j] + A[i, j - 1] + A[i, j + 1])
        for i in range(3):
            A[i, :] = np.sin(A[(i + 1) % 3, :]) + A[i, :]
    return np.sum(A * A)


@pytest.mark.parametrize("fn", [sweep_reads_ahead, sweep_run_time_bound, sweep_descending, sweep_both_neighbours,
                                sweep_slices, sweep_through_a_view, sweep_repeated, gauss_seidel_2d],
                         ids=lambda f: f.__name__)
def test_sweep_restores_what_a_later_pass_overwrites(fn, backend):
    x = np.linspace(0.1, 0.9, 9) if fn is gauss_seidel_2d else np.linspace(0.2, 1.0, 5)
    check_forward(fn, (x,), backend)
    check_grad(fn, (x,), backend=backend)


def test_sweep_gradient_matches_jax():
    jax = pytest.importorskip("jax")
    import flowgrad
    jax.config.update("jax_enable_x64", True)
    jnp = jax.numpy

    def jax_sweep(x):
        for t in range(2):
            x = x.at[t].set(0.9 * x[t] + 0.1 * jnp.cos(x[t + 1]))
        return jnp.sum(jnp.sin(x))
    x = np.array([0.3, 0.5, 0.9])
    np.testing.assert_allclose(flowgrad.grad(sweep_reads_ahead, backend="numpy")(x), jax.grad(jax_sweep)(x),
                               rtol=1e-12)


# ---------------------------------------------------------------- constants written with active values


def eye_written_with_active_values(x):
    C = np.eye(4)
    C[0, :] = x
    C[:, 1] += x * 2
    return np.sum(np.sin(C @ C))


def test_constant_made_inside_and_written_needs_no_adjoint_rule(backend):
    check_grad(eye_written_with_active_values, (np.array([0.3, 0.7, 0.4, 0.9]),), backend=backend)


# ---------------------------------------------------------------- ufuncs writing into out=


def ufunc_into_its_operand(x):
    np.sin(x, out=x)
    return np.sum(x * x)


def ufuncs_into_other_arrays(x):
    y = np.zeros_like(x)
    np.multiply(x, x, out=y)
    np.add(y, x, out=x)
    return np.sum(x * y)


def ufunc_out_positional_where_and_views(x):
    y = np.empty_like(x)
    np.exp(x, y)
    np.multiply(x, 2.0, out=x, where=x > 0.5)
    np.tanh(x[1:], out=x[:-1])                   # reads ahead of what it writes: right side first
    return np.sum(x * y)


def ufunc_out_tuple_returns_the_array(x):
    r = np.add(x, 1.0, out=(x,))
    return np.sum(r * x)


@pytest.mark.parametrize("fn", [ufunc_into_its_operand, ufuncs_into_other_arrays, ufunc_out_positional_where_and_views,
                                ufunc_out_tuple_returns_the_array], ids=lambda f: f.__name__)
def test_ufunc_out_writes_in_place(fn, backend):
    x = np.array([0.3, 0.7, 0.4, 0.9])
    check_forward(fn, (x,), backend)
    check_grad(fn, (x,), backend=backend)


def test_ufunc_where_without_out_is_refused():
    import flowgrad

    def f(x):
        return np.sum(np.sin(x, where=x > 0))
    with pytest.raises(flowgrad.UnsupportedError, match=r"test_inplace_adjoints.py:\d+: unsupported np.sin\(..., where=...\) without out="):
        flowgrad.grad(f, backend="numpy")(np.ones(3))


# ---------------------------------------------------------------- found by random programs


def element_copied_into_a_run_time_slice(x, k):
    x[k:k + 1] = x[3:4]             # its adjoint is summed to one element, then the slice cleared
    return np.sum(x * x)


def augmented_element_read_before_the_right_side(A):
    def sweep(u):
        for i in range(1, u.shape[0] - 1):
            u[i, 1] = 0.5 * u[i, 1] + 0.25 * np.sin(u[i - 1, 1])
        return np.sum(u)
    A[2, 1] += 0.4 * np.tanh(sweep(A))    # Python reads A[2, 1] before the helper writes it
    return np.sum(A * A)


def test_adjoint_summed_to_an_element_is_its_own_array(backend):
    check_grad(element_copied_into_a_run_time_slice, (np.array([0.1, 0.2, 0.3, 0.4]), 1), wrt="x",
               backend=backend)


def test_augmented_element_keeps_the_value_before_the_right_side(backend):
    A = np.linspace(-0.5, 0.7, 12).reshape(4, 3)
    check_forward(augmented_element_read_before_the_right_side, (A,), backend)
    check_grad(augmented_element_read_before_the_right_side, (A,), backend=backend)


# ---------------------------------------------------------------- restores nothing reads


def symmetric_product_reading_row0(alpha, beta, C, A, B):
    """symm's loops (``benchmarks/kernels/symm.py``), where each overwrite also reads ``C[0, j]``,
    which the updates of earlier rows changed: the backward sweep must see it as each step did, so
    those restores stay."""
    m, n = C.shape
    for i in range(m):
        for j in range(n):
            C[:i, j] += alpha * B[i, j] * A[i, :i]
            C[i, j] = beta * C[i, j] + np.sin(C[0, j]) * A[i, i]
    return np.sum(C * C)


# PolyBench symm: the backward sweep reads C only where a restore has just put it back
# (``C[i, j]`` before its overwrite) or as the loops left it: the restores of ``C[:i, j] += ...``
# are never read, and need no tape
symmetric_product = symm.kernel


@pytest.mark.parametrize("fn", [symmetric_product, symmetric_product_reading_row0])
def test_restores_nothing_reads_are_dropped_and_others_kept(fn, backend):
    rng = np.random.default_rng(3)
    args = (1.5, 1.2, rng.standard_normal((5, 4)), rng.standard_normal((5, 5)) / 3, rng.standard_normal((5, 4)))
    check_forward(fn, args, backend)
    check_grad(fn, args, wrt=(0, 1, 2, 3, 4), backend=backend)
    # the decision is the autodiff's, the same for every backend: the column updates' values are
    # kept for the second program only
    src = flowgrad.grad(fn, wrt=(0, 1, 2, 3, 4), backend="numpy").source(*args)
    assert "tape_C.append(C[i, j]" in src
    assert ("tape_C.append(C[:max(0, i), j]" in src) == (fn is symmetric_product_reading_row0)


def first_order_recurrence(x, a):
    # pass j overwrites y[j] (zero) and reads y[j - 1]: reversed, pass j restores y[j] and the
    # passes after it read y[j - 1] and below, never y[j] again: the zeros are not kept
    n = x.shape[0]
    y = np.zeros(n)
    y[0] = x[0]
    for j in range(1, n):
        y[j] = a * y[j - 1] + x[j]
    return np.sum(y * y)


def columns_recurrence(x, a):
    # the same along columns, counting down, with a second-order term
    n, m = x.shape
    y = np.zeros((n, m))
    for j in range(m - 3, -1, -1):
        y[:, j] = a * y[:, j + 1] - 0.5 * a * a * y[:, j + 2] + x[:, j]
    return np.sum(np.sin(y))


def recurrence_reading_ahead(x, a):
    # pass j reads y[j + 1], which a later pass (j + 1) overwrites: reversed, pass j + 1 restores
    # y[j + 1] before pass j reads it, so the old values are kept
    n = x.shape[0]
    y = np.cos(x)
    for j in range(n - 1):
        y[j] = a * y[j + 1] * y[j] + x[j]
    return np.sum(y * y)


def repeated_recurrence(x, a):
    # the recurrence runs twice over the same rows: the second run's reversed passes restore what
    # the first run's then read, so the old values are kept
    n = x.shape[0]
    y = np.tile(x, (n, 1))
    for rep in range(2):
        for i in range(1, n):
            y[i, :] = 0.6 * y[i, :] + a * np.sin(y[i - 1, :])
    return np.sum(y * y)


@pytest.mark.parametrize("fn, taped", [(first_order_recurrence, False), (columns_recurrence, False),
                                       (recurrence_reading_ahead, True), (repeated_recurrence, True)])
def test_a_recurrences_overwritten_values_are_kept_only_where_read(fn, taped, backend):
    rng = np.random.default_rng(5)
    x = rng.uniform(-1.0, 1.0, (3, 9) if fn is columns_recurrence else (9,) if fn is not repeated_recurrence else (5,))
    check_grad(fn, (x, 0.7), wrt=(0, 1), backend=backend)
    ir = flowgrad.grad(fn, wrt=(0, 1), backend=backend).ir(x, 0.7)
    assert ("push tape_" in ir) == taped, ir
