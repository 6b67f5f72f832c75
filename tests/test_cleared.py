"""The ``cleared`` pass: a loop that clears part of an adjoint at the end of each iteration and
sums into all of it at the start of the next writes it instead, and clears it once after the
loop; where the part is not zero before the loop, or the sums do not cover it, nothing changes.
Each gradient is checked against finite differences."""
import numpy as np
import pytest

import flowgrad
from oracle import check_grad


def ping_pong(A, B, steps):
    for t in range(steps):
        B[1:-1] = 0.3 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.3 * (B[:-2] + B[1:-1] + B[2:])
    return np.sum(A * A)


def ping_pong_read_after(A, B, steps):
    for t in range(steps):
        B[1:-1] = 0.3 * (A[:-2] + A[1:-1] + A[2:])
        A[1:-1] = 0.3 * (B[:-2] + B[1:-1] + B[2:])
    return np.sum(A * A) + np.sum(np.sin(B))      # g_B is not zero before the reversed loop


def ping_pong_partial(A, B, steps):
    for t in range(steps):
        B[1:-1] = 0.3 * A[1:-1]                   # the sum into g_A reaches only A[1:-1]...
        A[:] = 0.3 * np.tanh(B)                   # ...which it clears all of
    return np.sum(A * A)


def _backward(fn, args):
    text = flowgrad.grad(fn, wrt=(0, 1)).ir(*args)
    return text[text.index("# backward"):]


def _args(n=40):
    rng = np.random.default_rng(0)
    return rng.standard_normal(n), rng.standard_normal(n), 5


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_a_cleared_interior_is_written_and_cleared_after_the_loop(backend):
    lines = _backward(ping_pong, _args()).splitlines()
    assert "  g_B[1:+38] = 0.0" in lines                 # after the loop
    assert "    g_B[1:+38] = 0.0" not in lines           # not at the end of every iteration
    assert any(line.startswith("    g_B[2:+36] = ") for line in lines)      # the interior's sum, written
    # g_A's interior, cleared by the adjoint of ``A[1:-1] = ...`` and summed into from g_B's three
    # shifted views: one written sum of the three, no clearing pass
    assert any(line.startswith("    g_A[2:+36] = ") and line.count("g_B[") == 3 for line in lines)
    assert not any(line.startswith("    g_A[") and line.endswith("= 0.0") for line in lines)
    check_grad(ping_pong, _args(), (0, 1), backend=backend)


@pytest.mark.parametrize("fn", [ping_pong_read_after, ping_pong_partial])
def test_nothing_changes_where_the_region_is_not_zero_before_or_not_covered(fn):
    lines = _backward(fn, _args()).splitlines()
    cleared = [line for line in lines if line.startswith("    g_") and line.endswith("= 0.0")]
    assert cleared, "the loop still clears its region each iteration"
    check_grad(fn, _args(), (0, 1))


def transposed_then_plain(x, y, A):
    v = A @ x                                     # its adjoint sums into g_A as it is, after...
    u = A.T * y                                   # ...this one's, transposed: the first
    return np.sum(u * u) + np.sum(np.sin(v))


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_a_zero_fill_covered_by_a_transposed_sum_goes(backend):
    rng = np.random.default_rng(1)
    args = (rng.standard_normal(6), rng.standard_normal(7), rng.standard_normal((7, 6)))
    text = flowgrad.grad(transposed_then_plain, wrt=(0, 1, 2)).ir(*args)
    lines = text[text.index("# backward"):].splitlines()
    assert "  g_A = 0.0" not in lines, lines                # one of the two sums writes it first
    assert any(line.startswith("  g_A") and " = " in line and " += " not in line for line in lines), lines
    check_grad(transposed_then_plain, args, (0, 1, 2), backend=backend)


def induction(v, p, steps):
    for i in range(steps - 1, -1, -1):
        v[:i + 1] = p * v[1:i + 2] + (1.0 - p) * v[:i + 1]     # reads its own view and the one after
    return v[0] + 0.5 * v[1]


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_the_sum_into_the_overwritten_view_writes_it_ahead_of_the_shifted_sum(backend):
    # the adjoint of the overwrite clears g_v[:i+1], sums into g_v[1:i+2], then into g_v[:i+1]:
    # the second sum commutes with the first, so it writes g_v[:i+1] instead of the clearing
    args = (np.random.default_rng(2).standard_normal(12), 0.3, 10)
    text = flowgrad.grad(induction, wrt=(0, 1)).ir(*args)
    lines = [line.strip() for line in text[text.index("# backward"):].splitlines()]
    own = next(k for k, line in enumerate(lines) if line.startswith("g_v[0:+maximum(0, minimum((i + 1), 12))] = "))
    shifted = next(k for k, line in enumerate(lines) if line.startswith("g_v[1:+") and " += " in line)
    assert own < shifted, lines
    assert not any(line.startswith("g_v[") and line.endswith("= 0.0") for line in lines[own - 3:shifted]), lines
    check_grad(induction, args, (0, 1), backend=backend)
