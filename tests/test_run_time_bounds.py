"""Slice bounds and integer indices known only at run time follow NumPy: a negative one counts
from the end of the axis, and slice bounds are clipped to it (``x[k - 1:]`` at k = 0 is
``x[-1:]``, ``x[:k]`` with k past the end is all of ``x``). Each program runs for every k from
well below zero to past the end, on both backends, against plain NumPy; gradients are checked
against finite differences. Where the loops and branches around an index prove it
non-negative, the generated code has no wrap-around (its views stay affine)."""
import inspect

import numpy as np
import pytest

import flowgrad
from oracle import check_grad


def summary(s):
    """Differs when the elements or their count differ."""
    return np.sum(s * s * s) + np.sum(s) * s.shape[0]


def from_k(x, k):
    return summary(x[k:])


def up_to_k(x, k):
    return summary(x[:k])


def window(x, k):
    return summary(x[k - 1:k + 2])


def last_k(x, k):
    return summary(x[-k:])


def down_from_k(x, k):
    return summary(x[k::-1])


def down_to_k(x, k):
    return summary(x[:k:-1])


def every_other_from_k(x, k):
    return summary(x[k::2])


def down_by_two(x, k):
    return summary(x[k:1:-2])


def block(A, k):
    return summary(A[k:, :k - 1]) + summary(A[-k, k:])


def index_into_view(x, k):
    return x[2:][k] * 3.0 + x[k] * x[k]


def assign_from_k(x, k):
    y = np.zeros(x.shape[0])
    y[k:] = 1.0
    y[:k - 2] += x[:k - 2]
    return np.sum(y * x) + np.sum(y)


PROGRAMS = [from_k, up_to_k, window, last_k, down_from_k, down_to_k, every_other_from_k,
            down_by_two, block, index_into_view, assign_from_k]
N = 7


def _arg(fn):
    rng = np.random.default_rng(0)
    return rng.uniform(0.5, 1.5, (N, N)) if fn is block else rng.uniform(0.5, 1.5, N)


def _valid(fn, x, k):
    try:
        fn(x, k)
        return True
    except IndexError:          # NumPy raises for an integer index outside the axis
        return False


@pytest.mark.parametrize("fn", PROGRAMS, ids=lambda f: f.__name__)
def test_forward_for_every_k(fn, backend):
    x = _arg(fn)
    run = flowgrad.jit(fn, backend=backend)
    for k in range(-N - 3, N + 4):
        if _valid(fn, x, k):
            np.testing.assert_allclose(run(x, k), fn(x, k), rtol=1e-12, err_msg=f"k = {k}")


@pytest.mark.parametrize("fn", [from_k, window, down_from_k, block, index_into_view, assign_from_k],
                         ids=lambda f: f.__name__)
def test_gradient_below_zero_and_past_the_end(fn, backend):
    x = _arg(fn)
    for k in (-2, 0, N + 1):
        if _valid(fn, x, k):
            check_grad(fn, (x, k), 0, backend=backend)


def loop_windows(x, n):
    s = 0.0
    for k in range(1, n):
        s += summary(x[k - 1:]) + summary(x[k - 1::-1])
    return s


def boundary_branches(x):
    n = x.shape[0]
    y = np.zeros(n)
    for k in range(n):
        if k == 0:
            y[k] = x[k + 1] - x[k]
        elif k == n - 1:
            y[k] = x[k] - x[k - 1]
        else:
            y[k:] += x[k - 1] * x[k + 1]
    return np.sum(y * y)


def blocks(x, nb):
    s = 0.0
    for h in range(nb):
        lo = h * 2                   # a definition: lo >= 0 because h >= 0
        hi = lo + 2
        s += summary(x[lo:hi])
    return s


def periodic(x):
    n = x.shape[0]
    out = np.zeros(n)
    for i in range(n):
        out[i] = x[i - 1] * 2.0 + x[i]
    return np.sum(out * out)


def rebinds_the_loop_variable(x, n):
    s = 0.0
    for i in range(n):
        i = i - 2
        s += summary(x[i:])
    return s


def test_loops_and_branches_prove_indices_non_negative(backend):
    x = _arg(from_k)
    for fn, args in ((loop_windows, (x, N)), (boundary_branches, (x,)), (blocks, (x, 3))):
        np.testing.assert_allclose(flowgrad.jit(fn, backend=backend)(*args), fn(*args), rtol=1e-12)
        check_grad(fn, args, "x", backend=backend)
        if backend == "native":
            for src in (flowgrad.jit(fn, backend=backend).source(*args),
                        flowgrad.grad(fn, wrt="x", backend=backend).source(*args)):
                assert " < 0)" not in src, fn.__name__        # no wrap-around left in


def test_indices_that_can_be_negative_wrap(backend):
    x = _arg(from_k)
    for fn, args in ((periodic, (x,)), (rebinds_the_loop_variable, (x, N))):
        np.testing.assert_allclose(flowgrad.jit(fn, backend=backend)(*args), fn(*args), rtol=1e-12)
        check_grad(fn, args, "x", backend=backend)


def element(x, k):
    return x[k] * 2.0


def first_k(x, k):
    s = 0.0
    for i in range(k):
        s += x[i]
    return s


def picked(x, idx):
    return np.sum(x[idx] * x[idx])


def last_of_runtime_length(x, n):
    y = np.ones(n) * x[0]
    return y[3] + y[-2]


@pytest.mark.parametrize("fn, arg", [(element, 10), (element, -9), (first_k, 9),
                                     (picked, np.array([1, 7])), (picked, np.array([-8, 0])),
                                     (last_of_runtime_length, 2)],
                         ids=["past_the_end", "below_minus_the_length", "in_a_loop", "gather",
                              "gather_negative", "runtime_length"])
def test_index_outside_the_axis_raises_as_numpy(fn, arg, backend):
    x = np.arange(1.0, 6.0)
    with pytest.raises(IndexError):
        fn(x, arg)                       # NumPy's behaviour
    for call in (flowgrad.jit(fn, backend=backend), flowgrad.grad(fn, wrt="x", backend=backend)):
        with pytest.raises(IndexError, match="out of bounds"):
            call(x, arg)
    np.testing.assert_array_equal(x, np.arange(1.0, 6.0))
    ok = {element: -5, first_k: 5, picked: np.array([-5, 4]), last_of_runtime_length: 4}[fn]
    np.testing.assert_allclose(flowgrad.jit(fn, backend=backend)(x, ok), fn(x, ok), rtol=1e-12)


def window_of_zero_d_bounds(x, a, b):
    return np.sum(x[a:b] ** 2) + x[b] * 2.0


def test_zero_d_integer_arrays_as_bounds(backend):
    x = np.arange(1.0, 8.0)
    args = (x, np.array(1), np.array(4))
    np.testing.assert_allclose(flowgrad.jit(window_of_zero_d_bounds, backend=backend)(*args),
                               window_of_zero_d_bounds(*args), rtol=1e-12)
    check_grad(window_of_zero_d_bounds, args, 0, backend=backend)


def window_into(x, k):
    w = np.zeros(4)
    w[:] = x[k:k + 4]                # k past len(x) - 4: fewer than 4 values
    return np.sum(w * w)


def product_of_windows(x, a, b, c, d):
    return np.sum((x[a:b] * x[c:d]) ** 2)


def scatter_values(x, idx, v):
    y = x * 1.0
    y[idx] = v
    return np.sum(y * y)


def mask_values(x, v):
    y = x * 1.0
    y[y > 0.5] = v
    return np.sum(y * y)


@pytest.mark.parametrize("fn, good, bad", [
    (window_into, (2,), (8,)),
    (product_of_windows, (2, 5, 4, 7), (2, 3, 4, 7)),       # a length-1 window does not broadcast
    (mask_values, (np.array([1.0, 2.0, 3.0, 0.5]),), (np.ones(5),)),
], ids=["assigned_window", "product_of_windows", "mask_assignment"])
def test_sizes_known_only_at_run_time_must_agree(fn, good, bad, backend):
    x = np.array([0.1, 0.9, 0.2, 0.8, 0.7, 0.3, 0.4, 0.6, 0.35, 0.45])
    run = flowgrad.jit(fn, backend=backend)
    np.testing.assert_allclose(run(x, *good), fn(x, *good), rtol=1e-12)
    with pytest.raises(ValueError, match="broadcast|cannot assign"):
        run(x, *bad)
    with pytest.raises(ValueError, match="broadcast|cannot assign"):
        flowgrad.grad(fn, wrt="x", backend=backend)(x, *bad)
    check_grad(fn, (x,) + good, 0, backend=backend)


def test_values_that_cannot_fill_an_index_are_refused(backend):
    x = np.arange(1.0, 6.0)
    with pytest.raises(flowgrad.FlowgradError, match="could not be broadcast"):
        flowgrad.jit(scatter_values, backend=backend)(x, np.array([0, 1, 2]), np.ones(4))


def stops_before_the_end(x, n):
    s = 0.0
    for i in range(n):
        if s > 2.0:
            break                        # NumPy never reads x[i] past this point
        s += x[i]
    return s


def guarded_reads(x, n):
    s = 0.0
    for i in range(n):
        if i < x.shape[0]:
            s += x[i] * x[i]
        k = 0
        while k < 1 and i < 4:           # a while body may not run on every pass
            s += x[i]
            k += 1
    return s


def test_index_checks_move_ahead_of_loops_only_where_every_pass_indexes(backend):
    x = np.arange(1.0, 6.0)
    for fn, n in ((stops_before_the_end, 9), (guarded_reads, 9)):
        np.testing.assert_allclose(flowgrad.jit(fn, backend=backend)(x, n), fn(x, n), rtol=1e-12)
        check_grad(fn, (x, n), 0, backend=backend)
    if backend == "native":
        src = flowgrad.jit(first_k, backend=backend).source(x, 3)
        loop = src[src.index("for i in"):]
        assert "_rt.wrap" in src and "_rt.wrap" not in loop      # checked once, before the loop


def every_third(x, b):
    s = 0.0
    for i in range(0, b, 3):          # b = 8: i = 0, 3, 6; never 7
        s = s + x[i]
    for i in reversed(range(b - 1, 0, -2)):
        s = s + x[i - 1] * 0.5
    return s


def test_checks_ahead_of_a_loop_use_its_last_value():
    x = np.arange(1.0, 8.0)
    for backend in ("numpy", "native"):
        run = flowgrad.jit(every_third, backend=backend)
        for b in (0, 1, 7, 8):
            np.testing.assert_allclose(run(x, b), every_third(x, b), rtol=1e-12)
        for b in (9, 10):                # x[7] in the second loop; x[9] in the first
            with pytest.raises(IndexError):
                run(x, b)


def _loop_read(x, n):
    s = 0.0
    for i in range(n):
        s += x[i] * 2.0
    return s


def _gather_read(x, idx):
    return np.sum(x[idx] * x[idx])


def _scalar_read(x, k):
    return x[k] * 2.0


def _line_of(fn, text):
    lines, first = inspect.getsourcelines(fn)
    return first + next(k for k, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("fn,args,text", [
    (_loop_read, (np.ones(6), 7), "for i in range(n)"),       # checked once, ahead of the loop
    (_gather_read, (np.ones(4), np.array([1, 5])), "x[idx]"),
    (_scalar_read, (np.ones(5), 7), "x[k]"),
], ids=["loop", "gather", "scalar"])
def test_run_time_index_errors_name_the_users_line(fn, args, text, backend):
    where = f"test_run_time_bounds.py:{_line_of(fn, text)}: index"
    for transform in (flowgrad.jit, flowgrad.grad):
        with pytest.raises(IndexError, match=where):
            transform(fn, backend=backend)(*args)
