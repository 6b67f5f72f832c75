"""Two savings in a reversed loop's pass: the full sums a step's scalar adjoints take are written
over the products they share (``passes.sums``), and a restore that only its own pass reads is
served from the tape without storing it (``autodiff.restores.read_in_pass``, native nests). The
change shows in the IR and the generated code; values and gradients stay the program's."""
import re

import numpy as np
import pytest

import flowgrad
from flowgrad.autodiff.restores import read_in_pass
from flowgrad.ir.core import F64, Assign, Call, Container, For, Index, Pop, Read, Ref, Slice, op
from flowgrad.passes.sums import share_sum_products
from oracle import check_forward, check_grad


def induction(v, c, d):
    """binomial_option's step: each pass overwrites a shrinking view from its neighbours."""
    V = v.copy()
    n = V.shape[0] - 1
    for i in range(n - 1, -1, -1):
        V[:i + 1] = c * (d * V[1:i + 2] + (1.0 - d) * V[:i + 1])
    return V[0] + 0.1 * np.sum(V * V)


def induction_read_before(v, c, d):
    """The sum before the loop has an adjoint reading ``V`` as the loop found it: the backward
    sweep reads what the restores put back after the loop."""
    V = np.sqrt(v)
    s = np.sum(np.sin(V))
    n = V.shape[0] - 1
    for i in range(n - 1, -1, -1):
        V[:i + 1] = c * (d * V[1:i + 2] + (1.0 - d) * V[:i + 1])
    return s + V[0]


def growing(v, c, d):
    """The view grows from pass to pass: reversed, each pass restores less than the one before,
    and the element it leaves is the one the next pass reads one further."""
    V = v.copy()
    n = V.shape[0] - 1
    for i in range(n):
        V[:i + 1] = c * (d * V[1:i + 2] + (1.0 - d) * V[:i + 1])
    return V[0] + 0.1 * np.sum(V * V)


def induction_reading_first(v, c, d):
    """Each pass also reads ``V[0]`` in a statement of its own, before the overwrite."""
    V = v.copy()
    s = 0.0
    n = V.shape[0] - 1
    for i in range(n - 1, -1, -1):
        s = s + c * V[0]
        V[:i + 1] = c * (d * V[1:i + 2] + (1.0 - d) * V[:i + 1])
    return s + V[0]


def two_scalars(x, z, c, d):
    y = c * (x * z) + d * (z * x)
    return np.sum(np.sin(y))


def _args(n=9, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(0.3, 0.9, n), 0.9, 0.4


def _loop_body(ir):
    backward = ir.split("# backward")[1]
    lines = backward.splitlines()
    at = next(k for k, line in enumerate(lines) if "for i in reversed" in line)
    depth = len(lines[at + 1]) - len(lines[at + 1].lstrip())
    body = []
    for line in lines[at + 1:]:
        if len(line) - len(line.lstrip()) < depth:
            break
        body.append(line)
    return body


@pytest.mark.parametrize("fn", [induction, induction_read_before, growing, induction_reading_first])
def test_a_pass_of_an_overwriting_loop_keeps_its_gradient(fn, backend):
    args = _args()
    check_forward(fn, args, backend)
    check_grad(fn, args, ("v", "c", "d"), backend=backend)


@pytest.mark.parametrize("strategy", ["recompute_all", "fastest"])
@pytest.mark.parametrize("fn", [induction, induction_read_before, growing])
def test_checkpointed_passes_give_the_gradient_of_storing_all(fn, strategy):
    pytest.importorskip("numba")
    args = _args(n=40)
    want = flowgrad.grad(fn, wrt=("v", "c", "d"), backend="numpy", strategy="store_all")(*args)
    got = flowgrad.grad(fn, wrt=("v", "c", "d"), backend="native", strategy=strategy)(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-13)


def test_the_step_takes_one_sum_per_shared_product(backend):
    body = _loop_body(flowgrad.grad(induction, wrt=("v", "c", "d"), backend=backend).ir(*_args()))
    sums = [line for line in body if "sum_to(" in line]
    # the adjoints for c and d: sum(g V) and sum(g V[1:]) times scalars, not three sums of three
    assert len(sums) == 2, body
    assert all(re.search(r"sum_to\(\(g_(\w+)\[[^]]*\] \* \1\[[^]]*\]\)", line) for line in sums), sums


def test_products_in_another_order_are_one_sum(backend):
    rng = np.random.default_rng(1)
    args = (rng.standard_normal(7), rng.standard_normal(7), 0.7, -0.3)
    check_grad(two_scalars, args, ("x", "z", "c", "d"), backend=backend)
    backward = flowgrad.grad(two_scalars, wrt=("c", "d"), backend=backend).ir(*args).split("# backward")[1]
    assert backward.count("sum_to(") == 1, backward


def test_the_restore_only_its_pass_reads_is_marked_and_not_stored():
    pytest.importorskip("numba")
    fn = flowgrad.grad(induction, wrt=("v", "c", "d"), backend="native")
    args = _args()
    assert "(read in its pass only)" in "\n".join(_loop_body(fn.ir(*args)))
    src = fn.source(*args)
    assert re.search(r"_slot\d+ = tape_\w+\[", src)
    assert not re.search(r"\w\[[^]]*\] = _slot", src), src     # nothing stored back from the tape


@pytest.mark.parametrize("fn", [induction_read_before, growing])
def test_a_restore_read_after_its_pass_is_stored(fn):
    pytest.importorskip("numba")
    g = flowgrad.grad(fn, wrt=("v", "c", "d"), backend="native")
    args = _args()
    assert "(read in its pass only)" not in g.ir(*args)
    assert re.search(r"\w\[[^]]*\] = _slot", g.source(*args))


def test_a_restore_read_outside_its_nest_is_stored():
    pytest.importorskip("numba")
    g = flowgrad.grad(induction_reading_first, wrt=("v", "c", "d"), backend="native")
    args = _args()
    assert re.search(r"\w\[[^]]*\] = _slot", g.source(*args))


def _namer():
    count = iter(range(1000))
    return lambda hint: f"{hint}_{next(count)}"


def _space(n):
    return (Read(Ref(n, ())),)


def test_a_sum_reading_what_is_written_after_the_first_keeps_its_form():
    n = Container("n", np.dtype("int64"), ())
    x, y = (Container(name, F64, _space(n), "transient") for name in ("x", "y"))
    a, b = (Container(name, F64, ()) for name in ("a", "b"))
    t1, t2, t3 = (Container(name, F64, (), "transient") for name in ("t1", "t2", "t3"))
    full = _space(n)
    X, Y = Read(Ref(x)), Read(Ref(y))

    def total(e, t):
        return Call("sum_to", [e], [t], {"shape": (), "full": full})
    containers = {c.name: c for c in (n, x, y, a, b, t1, t2, t3)}
    stmts = [total(op("multiply", op("multiply", X, Read(Ref(a))), Y), t1),
             Assign(Ref(y, [Slice(0, Read(Ref(n, ())))]), op("multiply", X, 2.0)),
             total(op("multiply", Read(Ref(b)), op("multiply", Y, X)), t2),
             total(op("multiply", Y, X), t3)]
    out = share_sum_products(stmts, containers, _namer())
    # t1 reads y before the write; t2 and t3 after it share y * x: one sum between them
    calls = [s for s in out if isinstance(s, Call)]
    assert len(calls) == 2 and list(calls[0].outputs) == [t1]
    assert out[1] is stmts[1]
    assert [type(s).__name__ for s in out[2:]] == ["Call", "Assign", "Assign"]


def test_a_sum_with_a_broadcast_term_keeps_its_form():
    n, m = (Container(name, np.dtype("int64"), ()) for name in ("n", "m"))
    full = (Read(Ref(n, ())), Read(Ref(m, ())))
    x = Container("x", F64, full, "transient")
    w = Container("w", F64, (Read(Ref(m, ())),), "transient")
    a = Container("a", F64, ())
    t1, t2 = (Container(name, F64, (), "transient") for name in ("t1", "t2"))
    X = Read(Ref(x))
    stmts = [Call("sum_to", [op("add", op("multiply", Read(Ref(a)), X), Read(Ref(w)))], [t1],
                  {"shape": (), "full": full}),
             Call("sum_to", [X], [t2], {"shape": (), "full": full})]
    containers = {c.name: c for c in (n, m, x, w, a, t1, t2)}
    out = share_sum_products(stmts, containers, _namer())
    assert out == stmts


# A restore read only inside its own view, in a loop at any depth (``read_in_pass``'s second
# way): symm's row ``C[i, :]``, restored and read in a loop nested in its blocks' loop. Each pass
# adds to the rows above before overwriting its own, so the restores are row by row.
def nested_rows(C, B, beta):
    C = C.copy()
    m = C.shape[0]
    for t in range(3):
        for i in range(m):
            C[:i, :] += 0.1 * B[i, :] * B[:i, :]
            C[i, :] = beta * C[i, :] + np.sin(B[i, :]) * (t + 1.0)
    return np.sum(C * C)


def nested_rows_reading_the_row_before(C, B, beta):
    """Each pass also reads the row before, which no restore of its own pass covers."""
    C = C.copy()
    m = C.shape[0]
    for t in range(3):
        for i in range(1, m):
            C[:i, :] += 0.1 * B[i, :] * B[:i, :]
            C[i, :] = beta * C[i, :] * C[i - 1, :] + np.sin(B[i, :]) * (t + 1.0)
    return np.sum(C * C)


def nested_rows_read_between(C, B, beta):
    """The outer loop's body reads a row after the inner loop: its adjoint, in the next outer
    pass of the backward sweep, reads what the inner loop's restores put back."""
    C = C.copy()
    m = C.shape[0]
    s = 0.0
    for t in range(3):
        for i in range(m):
            C[:i, :] += 0.1 * B[i, :] * B[:i, :]
            C[i, :] = beta * C[i, :] + np.sin(B[i, :]) * (t + 1.0)
        s = s + np.sum(C[0, :] ** 2)
    return s + np.sum(C * C)


def _rows_args(seed=2):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((6, 5)), rng.standard_normal((6, 5)), 0.8


@pytest.mark.parametrize("fn", [nested_rows, nested_rows_reading_the_row_before, nested_rows_read_between])
def test_restores_in_nested_loops_keep_the_gradient(fn, backend):
    args = _rows_args()
    check_forward(fn, args, backend)
    check_grad(fn, args, ("C", "B", "beta"), backend=backend)


@pytest.mark.parametrize("strategy", ["recompute_all", "fastest"])
@pytest.mark.parametrize("fn", [nested_rows, nested_rows_read_between])
def test_checkpointed_nested_restores_give_the_gradient_of_storing_all(fn, strategy):
    pytest.importorskip("numba")
    args = _rows_args(3)
    want = flowgrad.grad(fn, wrt=("C", "B", "beta"), backend="numpy", strategy="store_all")(*args)
    got = flowgrad.grad(fn, wrt=("C", "B", "beta"), backend="native", strategy=strategy)(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-13)


def test_a_nested_restore_read_in_its_view_only_is_not_stored():
    pytest.importorskip("numba")
    g = flowgrad.grad(nested_rows, wrt=("C", "B", "beta"), backend="native")
    args = _rows_args()
    assert "pop tape_copy -> copy[i, 0:+5] (read in its pass only)" in g.ir(*args)
    src = g.source(*args)
    assert re.search(r"_slot\d+ = tape_copy\[", src)
    assert not re.search(r"copy\[[^]]*\] = _slot", src), src


@pytest.mark.parametrize("fn", [nested_rows_reading_the_row_before, nested_rows_read_between])
def test_a_nested_restore_read_elsewhere_is_stored(fn):
    pytest.importorskip("numba")
    g = flowgrad.grad(fn, wrt=("C", "B", "beta"), backend="native")
    args = _rows_args()
    assert "(read in its pass only)" not in g.ir(*args)
    assert re.search(r"copy\[[^]]*\] = _slot", g.source(*args))


def _rows_loops(*outside, after=()):
    """``for t: for i: pop x[i, :]; s += x[i, :]`` (backward sweep IR) with ``outside`` in the
    outer body after the inner loop and ``after`` after the outer loop; the pop and the sweep."""
    i64 = np.dtype("int64")
    t, i = Container("t", i64, ()), Container("i", i64, ())
    x, tape = Container("x", F64, (6, 5), "transient"), Container("tape_x", F64, (90,), "tape")
    s = Container("s", F64, (5,), "transient")
    row = Ref(x, [Index(Read(Ref(i, ()))), Slice(0, 5)])
    pop = Pop(tape, row)
    inner = For(i, 0, 6, 1, [pop, Assign(Ref(s), Read(row), True)], True)
    outer = For(t, 0, 3, 1, [inner, *[stmt(x, s) for stmt in outside]], True)
    return pop, [outer, *[stmt(x, s) for stmt in after]]


def _read_row(k):
    return lambda x, s: Assign(Ref(s), Read(Ref(x, [Index(k), Slice(0, 5)])), True)


def _trailing_rows(x, s):
    """symm's loop over the rows before its blocks: each pass restores its row and reads it."""
    j = Container("j", np.dtype("int64"), ())
    row = Ref(x, [Index(Read(Ref(j, ()))), Slice(0, 5)])
    return For(j, 0, 2, 1, [Pop(Container("tape_y", F64, (10,), "tape"), row), Assign(Ref(s), Read(row), True)], True)


@pytest.mark.parametrize("outside, after, local", [
    ((), (), True),                         # only the inner loop reads x, each pass its own row
    ((_read_row(0),), (), False),           # the outer body reads a row the restores put back
    ((), (_read_row(2),), False),           # so does a statement after the loops
    ((), (_trailing_rows,), True),          # a later loop reading each row after its own restore
])
def test_a_nested_restore_is_local_where_only_its_own_pass_reads_it(outside, after, local):
    pop, backward = _rows_loops(*outside, after=after)
    read_in_pass(backward)
    assert (pop.local is not None) == local


def test_a_nested_restore_whose_pass_reads_the_row_before_is_not_local():
    pop, backward = _rows_loops()
    inner = backward[0].body[0]
    i, x, s = inner.var, pop.ref.container, inner.body[1].dst.container
    before = Ref(x, [Index(op("subtract", Read(Ref(i, ())), 1)), Slice(0, 5)])
    inner.body.append(Assign(Ref(s), Read(before), True))
    read_in_pass(backward)
    assert pop.local is None
