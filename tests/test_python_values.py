"""Python containers hold values, not names (a silent wrong value before: ``r = [t]; t = b``
read ``r[0]`` as ``b``).

Each form is checked forward (``jit`` against plain NumPy) and, where it has floats to
differentiate, its gradient against finite differences, on both backends.
"""
import dataclasses
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytest

import flowgrad
from oracle import check_forward, check_grad
from tree_oracle import check_tree_forward


def rebind_after_list(a, b):
    t = a
    r = [t]
    t = b
    return r[0]


def rebind_after_tuple(a, b):
    t = a
    r = (t, 1.0)
    t = b
    return r[0] + 10.0 * r[1]


def element_then_rebind(x):
    a = x[0]
    r = [a]
    a = x[1]
    return r[0] + 0.0 * a


def element_then_write(x):
    r = [x[0] * 2.0]
    x[0] = 5.0
    return r[0] + x[0]


def element_read_then_write(x):
    r = [x[0]]
    x[0] = 5.0
    return r[0] * x[1]


def expression_then_rebind(a, b):
    t = a
    r = [t * 2.0, t + b]
    t = 3.0
    return r[0] + r[1] * t


def nested_containers(a, b):
    t = a
    r = [[t], {"k": (t, b)}]
    t = b * b
    return r[0][0] + 10.0 * r[1]["k"][0] + t


def dict_value_then_rebind(a, b):
    t = a
    d = {"t": t}
    d["s"] = t * t
    t = b
    return d["t"] + d["s"] + t


def append_then_rebind(x):
    out = []
    v = x[0]
    out.append(v)
    v = x[1]
    out.append(v)
    v = x[2]
    return out[0] + 2.0 * out[1] + 3.0 * v


def list_of_rows_in_a_loop(X, means):
    rows = []
    for k in range(means.shape[0]):
        d = X - means[k]
        rows.append(-0.5 * np.sum(d * d, axis=1))
    return np.sum(np.stack(rows) ** 2)


def scalars_in_a_loop_list(x):
    acc = []
    s = 0.0
    for k in range(3):
        s = s + x[k]
        acc.append(s)
    return acc[0] + 2.0 * acc[1] + 3.0 * acc[2]


def held_before_a_run_time_loop(a, b, n):
    t = a
    r = [t]
    for i in range(n):
        t = t + b
    return r[0] * 3.0 + t


def held_before_a_branch(a, b):
    t = a
    r = (t, 2.0)
    if b > 0.0:
        t = b
    return r[0] * r[1] + t


def view_bound_before_a_loop(X, k, n):
    y = X[k]
    for i in range(n):
        k = k + 1
    return np.sum(y * y)


def view_in_a_list_before_a_loop(X, k, n):
    views = [X[k]]
    for i in range(n):
        k = k + 1
    return np.sum(views[0] * views[0])


@dataclass
class Box:
    value: float


def object_attribute_then_rebind(a, b):
    t = a
    box = Box(t)
    t = b
    return box.value * 2.0 + t


def shape_tuple_keeps_symbol(x, n):
    shape = (n, 2)
    z = np.zeros(shape)
    w = np.ones((n, 2))
    return np.sum((z + w) * x[0])


def shape_then_rebind(x, n):
    shape = (n, 2)
    n = n + 1
    z = np.ones(shape)
    return np.sum(z) * x[0] + n


def floats():
    return 0.7, -1.3


U3 = np.array([0.5, -1.5, 2.0])
X = np.random.default_rng(0).standard_normal((5, 2))
MEANS = np.random.default_rng(1).standard_normal((3, 2))
XX = np.arange(20.0).reshape(5, 4) / 10.0

CASES = [
    pytest.param(rebind_after_list, floats, (0, 1), id="list-rebind"),
    pytest.param(rebind_after_tuple, floats, (0, 1), id="tuple-rebind"),
    pytest.param(element_then_rebind, lambda: (U3.copy(),), 0, id="element-rebind"),
    pytest.param(element_then_write, lambda: (U3.copy(),), 0, id="element-expression-then-write"),
    pytest.param(element_read_then_write, lambda: (U3.copy(),), 0, id="element-read-then-write"),
    pytest.param(expression_then_rebind, floats, (0, 1), id="expression-rebind"),
    pytest.param(nested_containers, floats, (0, 1), id="nested"),
    pytest.param(dict_value_then_rebind, floats, (0, 1), id="dict"),
    pytest.param(append_then_rebind, lambda: (U3.copy(),), 0, id="append"),
    pytest.param(list_of_rows_in_a_loop, lambda: (X, MEANS), (0, 1), id="rows-in-a-loop"),
    pytest.param(scalars_in_a_loop_list, lambda: (U3.copy(),), 0, id="scalars-in-a-loop"),
    pytest.param(held_before_a_run_time_loop, lambda: (0.7, -1.3, 3), (0, 1), id="before-run-time-loop"),
    pytest.param(held_before_a_branch, lambda: (0.7, 1.3), (0, 1), id="before-branch-taken"),
    pytest.param(held_before_a_branch, lambda: (0.7, -1.3), (0, 1), id="before-branch-not-taken"),
    pytest.param(object_attribute_then_rebind, floats, (0, 1), id="object"),
]


@pytest.mark.parametrize("fn, make, wrt", CASES)
def test_value_held_by_container(fn, make, wrt, backend):
    check_forward(fn, make(), backend=backend)
    check_grad(fn, make(), wrt=wrt, backend=backend)


def test_silent_wrong_value_of_the_report(backend):
    assert flowgrad.jit(rebind_after_list, backend=backend)(1.0, 2.0) == 1.0
    assert flowgrad.grad(rebind_after_list, wrt=(0, 1), backend=backend)(1.0, 2.0) == (1.0, 0.0)


@pytest.mark.parametrize("fn", [view_bound_before_a_loop, view_in_a_list_before_a_loop])
@pytest.mark.parametrize("n", [0, 1, 3])
def test_view_made_before_a_loop_keeps_its_bounds(fn, n, backend):
    check_forward(fn, (XX, 0, n), backend=backend)
    check_grad(fn, (XX.copy(), 0, n), wrt=0, backend=backend)


def test_shape_symbols_stay_symbols(backend):
    # (n, 2) held in a tuple is the same shape as np.ones((n, 2)): no copy of n, no size check
    g = flowgrad.jit(shape_tuple_keeps_symbol, backend="numpy")
    assert "_was" not in g.ir(U3, 4)
    check_forward(shape_tuple_keeps_symbol, (U3, 4), backend=backend)
    check_forward(shape_then_rebind, (U3, 4), backend=backend)


def test_integer_shape_in_a_list_rebound(backend):
    def f(x, n):
        sizes = [n]
        n = n * 2
        return np.sum(np.ones(sizes[0]) * x[0]) + n
    check_forward(f, (U3, 3), backend=backend)


def test_conditional_expression_of_containers(backend):
    def f(a, b):
        pair = (a, b) if a > b else (b, a)
        return pair[0] - 2.0 * pair[1]
    for args in [(0.7, -1.3), (-0.7, 1.3)]:
        check_forward(f, args, backend=backend)
        check_grad(f, args, wrt=(0, 1), backend=backend)


def test_branches_binding_containers(backend):
    def f(x, c):
        if c > 0.0:
            state = {"u": x * 2.0, "n": 1.0}
        else:
            state = {"u": x - 1.0, "n": 2.0}
        return np.sum(state["u"]) * state["n"]
    for c in (1.0, -1.0):
        check_tree_forward(f, (U3, c), backend=backend)
        check_grad(f, (U3, c), wrt=0, backend=backend)


def array_in_a_list_before_a_loop(u, n):
    hist = [u]
    for t in range(n):
        u = u * 2.0
    return np.sum(hist[0] * hist[0]) + 10.0 * np.sum(u)


def array_in_a_tuple_before_a_loop(u, n):
    v = u * 1.0
    hist = (v, 1.0)
    for t in range(n):
        v = v * 2.0
    return np.sum(hist[0] * hist[0]) + 10.0 * np.sum(v)


def snapshot_of_a_carried_dict(u, n):
    state = {"u": u * 1.0}
    snap = [state["u"]]
    for t in range(n):
        state = {"u": state["u"] * 2.0}
    return np.sum(snap[0] * snap[0]) + 10.0 * np.sum(state["u"])


def loop_variable_reused_for_an_unrolled_loop(x, n, ws):
    s = 0.0
    for k in range(n):
        s = s + x[k]
    for k in range(len(ws)):
        s = s + ws[k] * x[k]
    return s


@pytest.mark.parametrize("fn", [array_in_a_list_before_a_loop, array_in_a_tuple_before_a_loop,
                                snapshot_of_a_carried_dict])
@pytest.mark.parametrize("n", [0, 2])
def test_array_held_before_a_loop_that_rebinds_its_name(fn, n, backend):
    check_forward(fn, (U3.copy(), n), backend=backend)
    check_grad(fn, (U3.copy(), n), wrt=0, backend=backend)


def test_loop_variable_reused(backend):
    check_forward(loop_variable_reused_for_an_unrolled_loop, (U3, 2, [0.5, 1.5]), backend=backend)


# ----------------------------------------------------------------------------- containers carried by loops


@dataclass
class State:
    u: np.ndarray
    t: float


class Pair(NamedTuple):
    u: np.ndarray
    t: float


def tuple_state(u, v, n):
    state = (u, v)
    for t in range(n):
        a, b = state
        state = (a + 0.1 * b, b - 0.1 * a)
    return np.sum(state[0] ** 2) + np.sum(state[1])


def list_and_dict_state(u, n):
    acc = [u, 0.0]
    d = {"u": u * 1.0, "c": 0}
    for t in range(n):
        acc = [acc[0] * 1.5, acc[1] + 1.0]
        d = {"u": d["u"] * 0.5 + acc[0], "c": d["c"] + 1}
    return np.sum(acc[0]) + acc[1] + np.sum(d["u"] ** 2) * d["c"]


def dataclass_state(u, n):
    state = State(u * 1.0, 0.5)
    for i in range(n):
        state = dataclasses.replace(state, u=state.u * 0.9 + state.t, t=state.t + 0.1)
    return np.sum(state.u ** 2) + state.t


def namedtuple_state(u, n):
    s = Pair(u, 0.0)
    for i in range(n):
        s = Pair(np.sin(s.u) * 2.0, s.t + 1.0)
    return np.sum(s.u) + s.t


def while_tuple_state(u):
    st = (u, 0.0)
    while st[1] < 3.0:
        st = (st[0] * 2.0 + 0.1, st[1] + 1.0)
    return np.sum(st[0] ** 2)


def swapped_tuple_state(u, v, n):
    st = (u * 1.0, v * 1.0)
    for i in range(n):
        a, b = st
        st = (b, a + b)
    return np.sum(st[0]) + 10.0 * np.sum(st[1] ** 2)


def widened_leaf_state(u, n):
    st = (u, 0)
    for i in range(n):
        st = (st[0] * 2.0, st[1] + 0.5)
    return np.sum(st[0]) * st[1]


@pytest.mark.parametrize("fn, make, wrt", [
    pytest.param(tuple_state, lambda n: (U3.copy(), -U3, n), (0, 1), id="tuple"),
    pytest.param(list_and_dict_state, lambda n: (U3.copy(), n), 0, id="list-dict"),
    pytest.param(dataclass_state, lambda n: (U3.copy(), n), 0, id="dataclass"),
    pytest.param(namedtuple_state, lambda n: (U3.copy(), n), 0, id="namedtuple"),
    pytest.param(swapped_tuple_state, lambda n: (U3.copy(), -U3, n), (0, 1), id="swapped"),
    pytest.param(widened_leaf_state, lambda n: (U3.copy(), n), 0, id="widened-int-leaf"),
])
@pytest.mark.parametrize("n", [0, 1, 4])
def test_container_carried_by_a_run_time_loop(fn, make, wrt, n, backend):
    check_forward(fn, make(n), backend=backend)
    check_grad(fn, make(n), wrt=wrt, backend=backend)


def test_container_carried_by_a_while_loop(backend):
    check_forward(while_tuple_state, (U3.copy(),), backend=backend)
    check_grad(while_tuple_state, (U3.copy(),), backend=backend)


def test_argument_containers_are_the_callers(backend):
    def changes_it(p):
        p["k"] = 2.0
        return p["k"]

    def copies_it(p):
        q = dict(p)
        q["k"] = q["k"] * 2.0
        return q["k"] + p["k"]
    with pytest.raises(flowgrad.UnsupportedError, match=r"assignment to p\['k'\] on a dict from outside the captured "
                                                        r"function .*build a new one"):
        flowgrad.jit(changes_it, backend=backend)({"k": 1.0})
    assert flowgrad.jit(copies_it, backend=backend)({"k": 1.0}) == 3.0
    assert flowgrad.grad(copies_it, backend=backend)({"k": 1.0}) == {"k": 3.0}
