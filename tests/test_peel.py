"""A reversed loop whose pass restores a value carried from the pass before tests its variable
(``if i != first``): ``passes.peel`` runs the iterations where the test holds in a loop of their
own, without it, and the rest with the body as it was; the copies those restores made are then
read from their originals (``passes.copies``). Values and gradients stay the program's."""
import re

import numpy as np
import pytest

import flowgrad
from flowgrad.ir.core import F64, I64, Assign, Const, Container, For, If, Read, Ref, op, scalar
from flowgrad.passes.peel import PEEL, peel_boundary_tests
from oracle import check_grad


def rows_down(x, a):
    """A second-order recursive filter down the rows (deriche's vertical pass): each pass reads
    the input's row and the output's two rows before, and the gradient in ``a`` those rows."""
    n, m = x.shape
    y = np.zeros_like(x)
    xm1 = np.zeros(m)
    ym1 = np.zeros(m)
    ym2 = np.zeros(m)
    for i in range(n):
        y[i, :] = a * x[i, :] + 0.5 * a * xm1 + 0.3 * ym1 - 0.2 * a * ym2
        xm1 = x[i, :]
        ym2 = ym1
        ym1 = y[i, :]
    return np.sum(y * y) / n


def rows_up(x, a):
    """The same filter up the rows: the tests' one iteration is the range's last."""
    n, m = x.shape
    y = np.zeros_like(x)
    xp1 = np.zeros(m)
    yp1 = np.zeros(m)
    yp2 = np.zeros(m)
    for i in range(n - 1, -1, -1):
        y[i, :] = a * xp1 + 0.4 * a * yp1 - 0.1 * yp2 + 0.2 * x[i, :]
        xp1 = x[i, :]
        yp2 = yp1
        yp1 = y[i, :]
    return np.sum(np.sin(y))


def rows_over(x, a):
    """The filter writing its rows over the input's (deriche reuses its first pass's output for
    the third): each pass restores its row from the tape, and reads the two rows before."""
    n, m = x.shape
    y = np.sin(x)
    ym1 = np.zeros(m)
    ym2 = np.zeros(m)
    for i in range(n):
        y[i, :] = a * y[i, :] + 0.3 * a * ym1 - 0.2 * a * ym2
        ym2 = ym1
        ym1 = y[i, :]
    return np.sum(y * y)


def _backward(fn, args):
    return flowgrad.grad(fn, wrt=(0, 1)).ir(*args).split("# backward")[1]


@pytest.mark.parametrize("fn", [rows_down, rows_up])
def test_the_passes_without_a_test_run_in_a_loop_of_their_own(fn):
    args = (np.random.default_rng(0).standard_normal((9, 5)), 0.7)
    back = _backward(fn, args)
    loops = re.findall(r"^  for i in reversed\(([-\d]+):([-\d]+):([-\d]+)\):\n((?:    .*\n?)*)", back, re.M)
    assert len(loops) == 2, back
    main = max(loops, key=lambda m: abs(int(m[1]) - int(m[0])))
    edge = min(loops, key=lambda m: abs(int(m[1]) - int(m[0])))
    sizes = [abs(int(m[1]) - int(m[0])) for m in (main, edge)]
    assert sum(sizes) == 9 and 1 <= sizes[1] <= 2, back
    assert " if " not in main[3] and "if (" in edge[3], back
    # the rows restored from the passes before are read where they lie, not copied first: the
    # input's row before, and a row of the output before
    assert not re.search(r"\w+ = \w+\[\(i [+-] \d\), 0:\+5\]\n", main[3]), main[3]
    shifted = set(re.findall(r"(\w+)\[\(i [+-] \d\), 0:\+5\]", main[3]))
    assert "x" in shifted and len(shifted) == 2 and not any(c.startswith("g_") for c in shifted), main[3]


def test_rows_restored_past_a_pop_of_another_row_are_read_where_they_lie():
    """The pop restoring the pass's own row writes the array the rows before are read from, but
    not those rows: their copies go all the same."""
    args = (np.random.default_rng(0).standard_normal((9, 5)), 0.7)
    back = _backward(rows_over, args)
    main = re.search(r"^  for i in reversed\(2:9:1\):\n((?:    .*\n?)*)", back, re.M)
    assert main, back
    pop = re.search(r"pop \w+ -> (\w+)\[i, 0:\+5\]", main[1])
    assert pop and re.search(rf"{pop[1]}\[\(i - 2\), 0:\+5\]", main[1][pop.end():]), main[1]
    assert not re.search(r"\w+ = \w+\[\(i - \d\), 0:\+5\]\n", main[1]), main[1]


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
@pytest.mark.parametrize("fn", [rows_down, rows_up, rows_over])
def test_peeled_gradients_match_finite_differences(fn, backend):
    args = (np.random.default_rng(1).standard_normal((9, 5)), 0.7)
    check_grad(fn, args, (0, 1), backend=backend)


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_a_loop_too_short_to_peel_keeps_its_tests(backend):
    """Three passes, two of them apart: peeling would copy the body for one pass."""
    args = (np.random.default_rng(2).standard_normal((3, 4)), 0.7)
    back = _backward(rows_down, args)
    assert len(re.findall(r"\n  for i in reversed", back)) == 1 and "if (" in back, back
    check_grad(rows_down, args, (0, 1), backend=backend)


def _loop(tests, arrays=True, n=20):
    """``for v in range(n)`` whose body assigns ``t`` (an array, or a scalar) behind one ``if`` per
    value in ``tests`` (``v != value``)."""
    v = Container("v", I64, ())
    t = Container("t", F64, (Const(3),) if arrays else ())
    body = [If(op("not_equal", scalar(v), Const(c)), [Assign(Ref(t), Const(1.0))], [Assign(Ref(t), Const(2.0))])
            for c in tests]
    return For(v, Const(0), Const(n), Const(1), body)


def _ranges(stmts):
    return [(s.start.value, s.stop.value) for s in stmts]


def test_peeling_at_either_end_keeps_the_order_of_the_iterations():
    head = peel_boundary_tests([_loop([0, 1])])
    assert _ranges(head) == [(0, 2), (2, 20)]
    assert not any(isinstance(s, If) for s in head[1].body) and all(isinstance(s, If) for s in head[0].body)
    tail = peel_boundary_tests([_loop([19])])
    assert _ranges(tail) == [(0, 19), (19, 20)]
    back = _loop([19])
    back.reverse = True                       # run from 19 down: the peeled iteration runs first
    assert _ranges(peel_boundary_tests([back])) == [(19, 20), (0, 19)]


@pytest.mark.parametrize("tests, arrays", [
    ([0, 10], True),                          # an iteration in the middle
    (list(range(PEEL + 1)), True),            # more than PEEL at one end
    ([0], False),                             # scalars only: the branch keeps no loops apart
    ([25], True),                             # outside the range: nothing to peel
])
def test_loops_left_as_they_are(tests, arrays):
    out = peel_boundary_tests([_loop(tests, arrays)])
    assert _ranges(out) == [(0, 20)] and len(out[0].body) == len(tests)
    assert all(isinstance(s, If) for s in out[0].body)
