"""Two savings in a reversed loop's pass: the full sums a step's scalar adjoints take are written
over the products they share (``passes.sums``), and a restore that only its own pass reads is
served from the tape without storing it (``autodiff.restores.read_in_pass``, native nests). The
change shows in the IR and the generated code; values and gradients stay the program's."""
import re

import numpy as np
import pytest

import flowgrad
from flowgrad.ir.core import F64, Assign, Call, Container, Read, Ref, Slice, op
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
