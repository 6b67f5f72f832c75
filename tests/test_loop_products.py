"""Seeded random loops of matrix products and softmaxes, the shapes the ``lift_products`` and
``shifts`` passes rewrite and the ones next to them they must leave alone: products of a row or
column with a sweeping slice (``D[:, i] @ D[:, i:]``, ``D[i + 1:, i] @ E[i + 1:, :]``), of a row
with a fixed matrix, written back into the matrix read (sometimes where later iterations read),
the last product read after the loop, and a softmax or log-sum-exp of the result, normalised
or not. Each program's value is checked against plain NumPy and its gradient against finite
differences, on the numpy backend (and a few on the native one).
"""
import linecache
import random

import numpy as np
import pytest

from oracle import check_forward, check_grad

_PRODUCTS = [
    # (the product, the size of its result in iteration i)
    ("D[:, i] @ D[:, i:]", "m - i"),
    ("D[:, i] @ D[:, i + 1:]", "m - i - 1"),
    ("D[:, i] @ E", "p"),
    ("E.T @ D[:, i]", "p"),
    ("D[i + 1:, i] @ E[i + 1:, :]", "p"),
    ("D[:i, i] @ D[:i, :]", "m"),
    ("D[:, i] @ D[:, :i + 1]", "i + 1"),
    ("D[0, :] @ D[i, :]", "1"),
    ("E[i, :] @ W[:4, :]", "m + p"),
]
_WRITES = [
    "",
    "D[:, i] *= 0.9",                    # the column the next products read
    "D[i, :] = np.tanh(D[i, :])",        # a row later iterations read
    "E[:, 0] += 0.1 * t[0]",             # the fixed matrix, where the product reads it
]
_TAILS = [
    # (lines before the return, the returned value)
    ([], "np.sum(C * C)"),
    (["m = np.max(C, axis=1, keepdims=True)", "e = np.exp(C - m)"],
     "np.sum(e / np.sum(e, axis=1, keepdims=True) * W)"),
    (["m = np.max(C, axis=1, keepdims=True)"],
     "np.sum(np.exp(C - m) / np.sum(np.exp(C - m), axis=1, keepdims=True) * W)"),
    (["m = np.max(C, axis=0)"], "np.sum(np.sin(m + np.log(np.sum(np.exp(C - m), axis=0))))"),
    (["m = np.max(C)", "e = np.exp(C - m)"], "np.sum(np.log(np.sum(e)) + m) + np.sum(e[0] / np.sum(e))"),
    (["m = np.max(C, axis=1, keepdims=True)"], "np.sum(np.exp(C - m))"),            # depends on m
    (["m = np.max(C, axis=1, keepdims=True)", "e = np.exp(C - m)"],
     "np.sum(e / np.sum(e, axis=0, keepdims=True))"),                                 # across m's rows
]


def generate(seed):
    rng = random.Random(seed)
    product, size = rng.choice(_PRODUCTS)
    write = rng.choice(_WRITES)
    lines = ["def f(D, E, W):", "    n, m = D.shape", "    p = E.shape[1]", "    C = np.zeros((m, m + p))"]
    lines.append(f"    for i in range({rng.choice(['m', 'm - 1', '1, m'])}):")
    lines.append(f"        t = {product}")
    lines.append(f"        C[i, :{size}] = {rng.choice(['t', 'np.sin(t)', 't * W[i, :' + size + ']'])}")
    if write:
        lines.append(f"        {write}")
    before, tail = rng.choice(_TAILS)
    lines += ["    " + line for line in before]
    after = " + np.sum(t)" if rng.random() < 0.3 else ""
    lines.append(f"    return {tail}{after}")
    return "\n".join(lines) + "\n"


def load(seed):
    source = generate(seed)
    filename = f"<loop-products-{seed}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["f"]


def inputs(seed):
    rng = np.random.default_rng(seed)
    n, m, p = 10, 9, 4
    return (rng.uniform(-1, 1, (n, m)), rng.uniform(-1, 1, (n, p)), rng.uniform(0.5, 1.5, (m, m + p)))


def _check(seed, backend):
    fn = load(seed)
    args = inputs(seed)
    try:
        fn(*[a.copy() for a in args])
    except (ValueError, IndexError):
        pytest.skip("NumPy rejects this program (shapes)")
    check_forward(fn, args, backend=backend, rtol=1e-10)
    check_grad(fn, args, ("D", "E", "W"), backend=backend)


@pytest.mark.parametrize("seed", range(48))
def test_random_loops_of_products_numpy_backend(seed):
    _check(seed, "numpy")


@pytest.mark.native
@pytest.mark.parametrize("seed", range(6))
def test_random_loops_of_products_native_backend(seed):
    _check(seed, "native")
