"""Loop-nest members one element from the nest's own (``backends/native_shifts.py``): a read of
what a pop restores one element further along the innermost axis, and a sum into the view one
element further than the nest writes, run in the nest instead of splitting it in two. Values
against NumPy, gradients against finite differences, and the nests in the generated code."""
import re

import numpy as np
import pytest

import flowgrad
from oracle import check_forward, check_grad

pytestmark = pytest.mark.native

pytest.importorskip("numba")
native = "native"


def induction(v, w, a, b):
    # a binomial tree's backward induction: each step overwrites a shrinking view from itself
    # and its neighbour one further, weighted by an array the loop does not write
    V = v.copy()
    for i in range(V.shape[0] - 2, -1, -1):
        V[:i + 1] = a * w[:i + 1] * V[1:i + 2] + b * V[:i + 1]
    return V[0] + 0.1 * np.sum(V * V)


def induction_rows(v, a, b):
    # the same along the rows of a matrix: the neighbour is along the innermost axis
    V = v.copy()
    for i in range(V.shape[1] - 2, -1, -1):
        V[:, :i + 1] = a * V[:, 1:i + 2] + b * np.tanh(V[:, :i + 1])
    return np.sum(V[:, 0] * V[:, 1])


def shifted_sum(x, c):
    y = np.zeros(x.shape[0] + 1)
    y[:-1] = x * c                       # written, then summed into one element further
    y[1:] += np.sin(x)
    return np.sum(y * y)


def _nest_with(src, *texts):
    """The body of the innermost loop of ``src`` holding every one of ``texts``, else None."""
    lines = src.split("\n")
    for k, line in enumerate(lines):
        m = re.match(r"( *)for \w+ in range", line)
        if not m:
            continue
        body = []
        for nxt in lines[k + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= len(m.group(1)):
                break
            body.append(nxt)
        text = "\n".join(body)
        if "for " not in text and all(re.search(t, text) for t in texts):
            return text
    return None


@pytest.mark.parametrize("n", [1, 2, 9])
def test_a_step_restoring_its_values_and_adding_its_adjoint_one_further_runs_in_one_nest(n):
    rng = np.random.default_rng(n)
    args = (rng.uniform(0.5, 1.5, n + 1), rng.uniform(0.5, 1.0, n + 1), 0.55, 0.4)
    check_grad(induction, args, ("v", "w", "a", "b"), backend=native)
    src = flowgrad.grad(induction, wrt=("v", "w", "a", "b"), backend=native).source(*args)
    # the nest over the step reads the neighbour's old value from the tape, the element the pop
    # restores next, and adds the adjoint it carries from the element before in a register
    nest = _nest_with(src, r"_slot\d+\[1 \+ \w+\]", r"_carry\d+ = ", r"if \w+ > 0:")
    assert nest is not None, src
    assert "gold[" not in src, src           # the adjoint's copy is a variable of the nest


def test_the_same_along_the_rows_of_a_matrix():
    rng = np.random.default_rng(3)
    args = (rng.uniform(0.5, 1.5, (3, 8)), 0.6, 0.3)
    check_grad(induction_rows, args, ("v", "a", "b"), backend=native)
    src = flowgrad.grad(induction_rows, wrt=("v", "a", "b"), backend=native).source(*args)
    assert _nest_with(src, r"_slot\d+\[\w+, 1 \+ \w+\]", r"_carry\d+ = ") is not None, src


def test_a_sum_one_element_further_than_the_nest_writes_joins_it():
    rng = np.random.default_rng(4)
    args = (rng.standard_normal(11), 1.3)
    check_forward(shifted_sum, args, backend=native)
    check_grad(shifted_sum, args, ("x", "c"), backend=native)
    src = flowgrad.jit(shifted_sum, backend=native).source(*args)
    # y[k] = x[k] c, then y[k] += sin(x[k - 1]): one pass, the last element's sum after it
    assert _nest_with(src, r"\w+\[\w+\] = \(x\[\w+\] \* c\)", r"\+= [\w.]*sin\w*\(x\[\(\w+ - 1\)\]\)") is not None, src


def shifted_sum_then_written(x, z, c):
    w = np.cumsum(z)                     # (computed in a pass of its own)
    y = np.zeros(x.shape[0] + 1)
    y[:-1] = x * c
    y[1:] += np.sin(w)                   # reads w at the element before the nest's ...
    w[:] = x * 2.0                       # ... which this statement would write first in a shared pass
    return np.sum(y * y) + np.sum(w * y[1:])


def test_a_statement_writing_what_a_sum_one_further_reads_keeps_its_own_nest():
    rng = np.random.default_rng(5)
    args = (rng.standard_normal(9), rng.standard_normal(9), 0.7)
    check_forward(shifted_sum_then_written, args, backend=native)
    check_grad(shifted_sum_then_written, args, ("x", "z", "c"), backend=native)


def two_sums_one_further(v, w):
    # the adjoint adds the values' adjoint one element further into both g_V and g_w, each sum
    # carrying the same adjoint from one element to the next
    V = v.copy()
    s = 0.0
    for i in range(V.shape[0] - 3, -1, -1):
        V[:i + 2] = 0.26 * V[1:i + 3] + 0.58 * V[:i + 2] + 0.26 * w[1:i + 3]
        s = s + np.sum(V[:i + 2] * w[:i + 2])
    return s + 0.1 * np.sum(V * V)


@pytest.mark.parametrize("n", [4, 12])
def test_two_sums_one_further_carry_one_array_each_in_registers_of_their_own(n):
    rng = np.random.default_rng(n)
    args = (rng.uniform(0.3, 0.9, n), rng.uniform(0.3, 0.9, n))
    check_grad(two_sums_one_further, args, ("v", "w"), backend=native)
    src = flowgrad.grad(two_sums_one_further, wrt=("v", "w"), backend=native).source(*args)
    assert len(set(re.findall(r"_carry\d+", _nest_with(src, r"_carry\d+ = ") or ""))) == 2, src
