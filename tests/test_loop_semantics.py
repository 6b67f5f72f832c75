"""Python's semantics of names in loops, checked like the feature programs (``test_features``):
the loop variable rebound in the body, after a break or a loop that makes no pass; names
rebound on some passes only, or on every pass of a loop that may make none; a name sharing its
array with another on loop entry; views that keep the scalars they were made with; a while
loop whose trip count differs on each pass of the loop around it; a reshape made again
after each write into its source; names the branches bind to views of another array. Each case: the gradient
against finite differences and the forward program against plain NumPy, on every backend.

The programs live at module level: flowgrad captures them from this file's source.
"""
import numpy as np
import pytest

from oracle import check_forward, check_grad
from test_features import U

CASES = []


def case(fn, make, wrt=0, tag=None):
    name = fn.__name__ if tag is None else f"{fn.__name__}-{tag}"
    CASES.append(pytest.param(fn, make, wrt, id=name))


def loop_variable_rebound(x, n):
    s = 0.0
    for i in range(n):
        i = i * 2                    # Python: the next pass starts from the range again
        s += np.sum(x) * i + x[i // 2] * x[i // 2]
    return s + i


def loop_variable_after_the_loop(x, n, m):
    i = 7
    for i in range(n):               # n = 0: i keeps 7
        x = x * 1.1
    j = -1
    for j in range(m):
        if j == 2:
            break                    # j stays 2
    k = 0
    for k in range(5, 1, -2):
        pass
    return np.sum(x) * i + np.sum(x * x) * j + x[0] * k


def alias_before_loop(x, n):
    y = x                            # y and x name one array until the loop rebinds y
    z = x
    for i in range(n):
        y = y * 1.1
        x = x + 0.5
    return np.sum(y * x) + np.sum(z * z)


def rebound_in_some_passes(x, n):
    f = x + 1.0                      # n = 0: f keeps this value; else the last pass's value
    g = x * 0.5
    h = x - 1.0
    for t in range(n):
        if t == 3:
            f = x * 2.0              # only on one pass: the others keep it
        if t < 2:
            continue
        g = np.sin(x) * t            # after a continue: not on every pass
    for t in reversed(range(n)):
        h = h * 0.5 + x * t
    k = 0
    while k < n - 1:
        g = g + x
        k += 1
    return np.sum(f * g) + np.sum(h) * t


def rebound_after_break(x, n):
    f = x + 1.0
    for t in range(n):
        if t >= 1:
            break
        f = x * 2.0
    return np.sum(f * f)


def views_keep_their_bounds(x, h, n):
    y = x[h:h + 2]                   # made with h = 2: rebinding h later does not move it
    h = 5
    lo = h - 4
    z = x[lo:lo + 2] * 1.0           # an array whose size reads lo
    lo = 0
    s = 0.0
    k = 0
    for i in range(n):
        w = x[k:k + 3]
        k = k + 2
        s = s + np.sum(w * w) * (i + 1.0)
    return np.sum(y * y) + np.sum(z) * 3.0 + s + x[h] + x[lo]


case(loop_variable_rebound, lambda: (U((8,)), 3))
case(views_keep_their_bounds, lambda: (U((8,)), 2, 3))
case(rebound_in_some_passes, lambda: (U((4,)), 5), tag="five")
case(rebound_in_some_passes, lambda: (U((4,)), 1), tag="one")
case(rebound_after_break, lambda: (U((4,)), 3), tag="breaks")
case(rebound_after_break, lambda: (U((4,)), 0), tag="no_trips")
case(loop_variable_after_the_loop, lambda: (U((4,)), 0, 5), tag="no_trips")
case(loop_variable_after_the_loop, lambda: (U((4,)), 3, 1), tag="no_break")
case(alias_before_loop, lambda: (U((4,)), 2), tag="two_passes")
case(alias_before_loop, lambda: (U((4,)), 0), tag="no_trips")


def while_in_for(x, n):
    for i in range(n):
        k = 0
        while k < i:                 # a different number of trips on each pass
            x = np.sin(x) * 1.1
            k += 1
    return np.sum(x * x)


case(while_in_for, lambda: (U((3,)), 4))


def reshape_after_writes(x, n):
    s = 0.0
    for i in range(n):
        z = x.reshape(2, 3)          # made on each pass, after the last write: NumPy's view and
        s += np.sum(z[1] * z[0])     # flowgrad's copy agree
        x[i] = x[i] * 1.5
    z = x.reshape(3, 2)
    return s + np.sum(z[:, 0] ** 2)


case(reshape_after_writes, lambda: (U((6,)), 3))


def branch_bound_views(x, c):
    y = x
    if c > 0:
        y = x[1:4] * 2.0
    else:
        y = x[0:3]                   # a view of x on this path only; x is not written after
    z = x * 1.0
    if c > 1:
        z = z * 2.0
    z *= 3.0                         # z's own array on both paths
    return np.sum(y * y) + np.sum(z * x)


def views_not_written(x, A, n):
    a = x
    for i in range(n):
        a = x[::-1]                  # a view of x, or x itself when n == 0; only read
    r = A[0]
    for i in range(n):
        r = A[i]
    p, q = x * 1.0, x * 0.0
    for i in range(n):
        q[:] = p * 1.5               # buffers passed back and forth, neither another array's
        p, q = q, p
    return np.sum(a * np.arange(4.0)) + np.sum(r * r) + np.sum(p * x)


def aliases_rebound_together(x, n):
    y = x * 1.0
    z = y
    for i in range(n):
        y = y + 1.0
        z = y                        # z and y stay one array, whether the loop runs or not
    z[0] = 5.0
    A = x.reshape(2, 2)              # written in the loop; x is not read again
    for i in range(n):
        A[1:, :] += 0.5 * A[:-1, :]
    return np.sum(y * y) + np.sum(A * A)


case(aliases_rebound_together, lambda: (U((4,)), 2), tag="two")
case(aliases_rebound_together, lambda: (U((4,)), 0), tag="none")
case(views_not_written, lambda: (U((4,)), U((3, 4)), 3), tag="three")
case(views_not_written, lambda: (U((4,)), U((3, 4)), 0), tag="none")
case(branch_bound_views, lambda: (U((4,)), 1), tag="then")
case(branch_bound_views, lambda: (U((4,)), -1), tag="else")


def last_of_a_changing_size(x, A, n):
    for i in range(n):
        row = x[i:] * A[i, i:]       # one element fewer each pass
        x[i:] = np.sin(row)
    out = np.sum(row * row)          # the last pass's row: its adjoint comes before the loop's
    k = 5
    while k > 0:
        part = x[:k] * 2.0
        x[:k] += 0.1 * part
        k -= 2
    for j in range(n - 1, -1, -2):
        tail = A[j, j:] * x[j:]
        A[j, j:] = tail * 0.5
    return out + np.sum(part) + np.sum(tail * tail) + np.sum(A)


case(last_of_a_changing_size, lambda: (U((6,)), U((6, 6)), 6), wrt=(0, 1), tag="six")
case(last_of_a_changing_size, lambda: (U((6,)), U((6, 6)), 5), wrt=(0, 1), tag="five")


@pytest.mark.parametrize("fn, make, wrt", CASES)
def test_grad(fn, make, wrt, backend):
    check_grad(fn, make(), wrt, backend=backend)


@pytest.mark.parametrize("fn, make, wrt", CASES)
def test_forward(fn, make, wrt, backend):
    check_forward(fn, make(), backend=backend)
