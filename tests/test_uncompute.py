"""Uncomputation (``allow_uncompute=True``): a value an invertible update overwrote is restored by
running the update backwards in the backward sweep, instead of being kept on a tape.

Oracles: the store-all gradient (the same program with tapes) and central differences; the
generated source shows which updates still keep a tape.
"""
import numpy as np
import pytest

import flowgrad

EPS = 1e-6


def leapfrog(q, p, dt, k, steps):
    """A chain of pendulums, Stormer-Verlet: each update adds a value not depending on what it
    updates, so every one can be undone."""
    for t in range(steps):
        p[1:-1] += dt * k * (q[2:] - 2.0 * q[1:-1] + q[:-2]) - dt * 0.1 * np.sin(q[1:-1])
        q += dt * p
    return np.sum(q ** 2) + 0.5 * np.sum(p ** 2)


def mixed(x, y, n):
    """Invertible updates (``y += ...``, ``y *= 0.5``, ``x = x + ...``) next to ones that are not
    (``x[1:] = ...`` reads what it writes; ``y = y * s`` by a value known only at run time)."""
    s = 0.9 + 0.1 * np.tanh(y[0])
    for i in range(n):
        x[1:] = np.sin(x[:-1]) + 0.3 * x[1:]
        y += 0.2 * np.tanh(x)
        y *= 0.5
        y[::2] = y[::2] - 0.1 * x[::2] ** 2
        x = x + 0.05 * np.cos(y)
        y = y * s
    return np.sum(x * y) + np.sum(np.cos(y))


def _tapes(g, *args):
    src = g.source(*args)
    return sum(line.count(".append(") + line.count("_rt.room(") for line in src.split("\n"))


@pytest.mark.parametrize("name", ["leapfrog", "mixed"])
def test_uncompute_matches_the_taped_gradient(name, backend):
    rng = np.random.default_rng(3)
    if name == "leapfrog":
        fn, wrt = leapfrog, (0, 1, 2, 3)
        args = (rng.normal(size=64), rng.normal(size=64), 0.01, 1.3, 200)
    else:
        fn, wrt = mixed, (0, 1)
        args = (rng.normal(size=9), rng.normal(size=9), 5)
    kept = flowgrad.grad(fn, wrt=wrt, backend=backend)(*[np.copy(a) for a in args])
    g = flowgrad.grad(fn, wrt=wrt, backend=backend, allow_uncompute=True)
    saved = [np.copy(a) for a in args]
    undone = g(*args)
    for a, b in zip(args, saved):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(kept, undone):
        np.testing.assert_allclose(b, a, rtol=1e-11, atol=1e-13)
    # and against central differences in a random direction of the first argument
    d = rng.normal(size=np.shape(args[0]))
    moved = [lambda h: [args[0] + h * d] + [np.copy(a) for a in args[1:]]][0]
    fd = (fn(*moved(EPS)) - fn(*moved(-EPS))) / (2 * EPS)
    np.testing.assert_allclose(undone[0] @ d, fd, rtol=1e-6, atol=1e-8)


def test_uncompute_drops_the_tapes_of_invertible_updates_only():
    rng = np.random.default_rng(4)
    args = (rng.normal(size=64), rng.normal(size=64), 0.01, 1.3, 200)
    assert _tapes(flowgrad.grad(leapfrog, wrt=(0, 1), backend="numpy"), *args) > 0
    assert _tapes(flowgrad.grad(leapfrog, wrt=(0, 1), backend="numpy", allow_uncompute=True), *args) == 0
    args = (rng.normal(size=9), rng.normal(size=9), 5)
    taped = _tapes(flowgrad.grad(mixed, wrt=(0, 1), backend="numpy"), *args)
    undone = _tapes(flowgrad.grad(mixed, wrt=(0, 1), backend="numpy", allow_uncompute=True), *args)
    assert 0 < undone < taped        # x[1:] = f(x), y = y * s: still taped


def test_uncompute_is_off_by_default_and_bit_identical_then():
    rng = np.random.default_rng(5)
    args = (rng.normal(size=32), rng.normal(size=32), 0.01, 1.3, 50)
    a = flowgrad.grad(leapfrog, wrt=(0, 1), backend="numpy")(*args)
    b = flowgrad.grad(leapfrog, wrt=(0, 1), backend="numpy", allow_uncompute=False)(*args)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_random_programs_with_uncompute():
    from test_random_programs import _check_seeds
    _check_seeds(range(210, 250), "numpy", mode="unc")
