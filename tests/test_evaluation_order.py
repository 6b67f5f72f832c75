"""Python's evaluation order where a helper updates an argument in place: a value an expression
computed before the call keeps what it was when computed, an array itself shows the write
(NumPy's same object), and a helper's rebinding of its parameter never reaches the caller's
array."""
import numpy as np
import pytest

import flowgrad
from oracle import check_forward, check_grad


def _reset_first(u):
    u[0] = 0.5
    return 1.0


def _scaled_in_loop(u, n):
    for i in range(n):
        u = u * 0.5            # rebinds the helper's name: the caller's array is unchanged
    return np.sum(u)


def computed_before_the_call(z):
    w = 0.8 * z + _reset_first(z)
    return np.sum(w * w)


def element_before_the_call(z):
    return z[0] * z[1] + _reset_first(z) + z[0]


def argument_before_the_call(z):
    return np.sum(np.outer(z * 2.0, np.full(2, _reset_first(z))))


def _pair(a, b=None):
    return a * b


def keyword_before_the_call(z):
    return np.sum(_pair(a=z * 3.0, b=z + _reset_first(z)))


def comparison_before_the_call(z):
    s = 0.0
    if z[0] * 2.0 > _reset_first(z) + 0.2:
        s = z[1] * 2.0
    return s + np.sum(z)


def array_itself_shows_the_write(z):
    return np.sum(z + _reset_first(z) * z)


def helper_rebinding_in_a_loop(A, n):
    s = _scaled_in_loop(A, n)
    return s + np.sum(A * A)


@pytest.mark.parametrize("fn", [computed_before_the_call, element_before_the_call, argument_before_the_call,
                                keyword_before_the_call, comparison_before_the_call, array_itself_shows_the_write],
                         ids=lambda f: f.__name__)
def test_values_computed_before_a_call_keep_their_values(fn, backend):
    z = np.array([1.0, 2.0, 3.0])
    check_forward(fn, (z,), backend)
    check_grad(fn, (z,), backend=backend)


def test_a_helper_rebinding_its_parameter_leaves_the_callers_array(backend):
    A = np.array([1.0, 2.0, 3.0])
    check_forward(helper_rebinding_in_a_loop, (A, 2), backend)
    check_grad(helper_rebinding_in_a_loop, (A, 2), backend=backend)
    assert flowgrad.jit(helper_rebinding_in_a_loop, backend=backend)(A, 2) == pytest.approx(1.5 + 14.0)
