"""Regression tests for silent wrong gradients of in-place updates found by random programs.

Each case was once a wrong gradient that looked right: the adjoint of an in-place write read
the array as the write left it, or a loop sweeping an array in place read elements a later
iteration overwrote. Every case runs on every backend against finite differences.
"""
import numpy as np
import pytest

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
