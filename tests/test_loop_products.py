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
import re

import numpy as np
import pytest

import flowgrad
from benchmarks.kernels import symm, trmm
from flowgrad.passes.strips import BLOCK, SHORT_BLOCK
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


def inputs(seed, n=10, m=9, p=4):
    rng = np.random.default_rng(seed)
    return (rng.uniform(-1, 1, (n, m)), rng.uniform(-1, 1, (n, p)), rng.uniform(0.5, 1.5, (m, m + p)))


def _check(seed, backend, sizes=()):
    fn = load(seed)
    args = inputs(seed, *sizes)
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


# Seeds whose product sums over a range that moves with the loop (``D[i + 1:, i] @ E[i + 1:, :]``,
# ``D[:i, i] @ D[:i, :]``): at these sizes the loop is cut into blocks sharing one product each
# (``passes/strips.py``), with or without a write that a block's product reads.
_TRIANGULAR = [s for s in range(200) if any(p in generate(s) for p in ("E[i + 1:, :]", "D[:i, :]"))][:8]


@pytest.mark.parametrize("seed", _TRIANGULAR)
def test_blocks_of_triangular_loops_numpy_backend(seed):
    _check(seed, "numpy", (40, 36, 5))


@pytest.mark.native
@pytest.mark.parametrize("seed", _TRIANGULAR[:3])
def test_blocks_of_triangular_loops_native_backend(seed):
    _check(seed, "native", (40, 36, 5))


# trmm's ranges ``[i + 1, m)`` (a strict lower triangle's columns times the rows below); symm's
# ``[0, i)``, read transposed (its rows times the rows above)
_trmm, _symm = trmm.kernel, symm.kernel


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
@pytest.mark.parametrize("kernel", [_trmm, _symm])
@pytest.mark.parametrize("n", [9, 30])
def test_blocks_add_no_term_the_loop_did_not(kernel, backend, n):
    """The blocks' products sum exactly the loop's terms: an infinity in the triangle the loop
    never reads stays out of every value and gradient (zero padding would make NaNs of it). Rows
    of 9 take blocks of ``BLOCK`` iterations, rows of 30 of ``SHORT_BLOCK``."""
    rng = np.random.default_rng(3)
    m = 45
    A = rng.standard_normal((m, m)) / np.sqrt(m)
    B = rng.standard_normal((m, n))
    args = (1.1, A, B) if kernel is _trmm else (1.1, 0.9, rng.standard_normal((m, n)), A, B)
    wrt = tuple(range(len(args)))
    a = len(args) - 2                             # A's position
    assert "for block in range" in flowgrad.grad(kernel, wrt=wrt, backend=backend).source(*args)
    check_grad(kernel, args, wrt, backend=backend)
    unread = np.triu(np.ones((m, m), dtype=bool), 0 if kernel is _trmm else 1)     # symm reads A[i, i]
    A_inf = np.where(unread, np.inf, A)
    args_inf = args[:a] + (A_inf,) + args[a + 1:]
    check_forward(kernel, args_inf, backend=backend, rtol=1e-10)
    _, grads = flowgrad.value_and_grad(kernel, wrt=wrt, backend=backend)(*args_inf)
    _, finite = flowgrad.value_and_grad(kernel, wrt=wrt, backend=backend)(*args)
    for g, h in zip(grads, finite):
        np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-12)
    assert np.all(grads[a][unread] == 0)


def _writes_ahead(A, B):
    m = B.shape[0]
    for i in range(m - 3):
        t = A[i + 1:, i] @ B[i + 1:, :]
        B[i + 3, :] += 0.1 * np.tanh(t)     # a row a later iteration of the block reads
    return np.sum(B * B)


def test_no_blocks_where_an_iteration_writes_what_the_block_product_reads():
    rng = np.random.default_rng(4)
    args = (rng.standard_normal((40, 40)) / 7, rng.standard_normal((40, 9)))
    assert "for block in range" not in flowgrad.grad(_writes_ahead, wrt=(0, 1)).source(*args)
    check_grad(_writes_ahead, args, (0, 1))


# Row updates over a range that moves with the loop (symm's ``C[r, :] += alpha * B[i, :] * A[i, r]``
# over ``r < i``, after its column loop is interchanged): the rows every iteration of a block adds to
# receive one product after the block (``passes/strips.py``, ``_Update``).
def _rows_above(A, B, C):
    m = C.shape[0]
    for i in range(m):
        for r in range(i):
            C[r, :] += 0.5 * B[i, :] * A[i, r]
    return np.sum(C * np.tanh(C))


def _columns_after(A, B, C):
    m = C.shape[1]
    for i in range(m):
        for r in range(i + 1, m):
            C[:, r] += B[i, :] * A[r, i]
    return np.sum(np.sin(C))


def _rows_read_back(A, B, C):
    m = C.shape[0]
    for i in range(m):
        for r in range(i):
            C[r, :] += B[i, :] * A[i, r]
        C[i, :] = C[i, :] + 0.1 * np.sin(C[0, :])      # row 0: every block adds to it
    return np.sum(C * C)


def _update_args(fn, seed):
    rng = np.random.default_rng(seed)
    m, n = 43, 7
    A = rng.standard_normal((m, m)) / np.sqrt(m)
    B = rng.standard_normal((m, n))
    C = rng.standard_normal((n, m) if fn is _columns_after else (m, n))
    return A, B, C


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
@pytest.mark.parametrize("fn", [_rows_above, _columns_after])
def test_row_updates_of_a_block_are_one_product(fn, backend):
    args = _update_args(fn, 5)
    source = flowgrad.grad(fn, wrt=(0, 1, 2), backend=backend).source(*args)
    assert "for block in range" in source and "rank" in source
    check_forward(fn, args, backend=backend, rtol=1e-10)
    check_grad(fn, args, (0, 1, 2), backend=backend)


def test_row_updates_stay_where_an_iteration_reads_the_rows_a_block_shares():
    args = _update_args(_rows_read_back, 6)
    assert "rank" not in flowgrad.grad(_rows_read_back, wrt=(0, 1, 2)).source(*args)
    check_grad(_rows_read_back, args, (0, 1, 2))


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_symm_row_updates_in_blocks(backend):
    args = symm.args("bench")
    source = flowgrad.grad(symm.kernel, wrt=symm.WRT, backend=backend).source(*args)
    assert "rank" in source
    check_grad(symm.kernel, args, (0, 1, 2, 3, 4), backend=backend)


def test_a_block_product_batched_on_its_vector_reads_a_row_per_iteration():
    """symm's ``B[:i, :].T @ A[i, :i]`` over a block's iterations is the product ``A_b @ B`` of
    shape ``(SHORT_BLOCK, n)`` (a loop of 100 iterations, each a vector of 120): each iteration
    adds its row, and the adjoint sums into a row, rather than a column of ``B.T @ A_b.T`` (a
    strided read per iteration, a strided write per pass)."""
    args = symm.args("bench")
    ir = flowgrad.grad(symm.kernel, wrt=symm.WRT).ir(*args)
    assert re.search(rf"(\w+) = matmul\(A\[block:\+{SHORT_BLOCK}, 0:\+block\], B\[0:\+block, 0:\+120\]\)", ir), ir
    assert re.search(r"\+= \w+\[\(i - block\), 0:\+120\]", ir), ir
    assert re.search(r"g_\w+\[\(i - block\), 0:\+120\] \+=", ir), ir
    m, n = 45, 9                # a matrix-vector product per iteration, blocked, against finite differences
    rng = np.random.default_rng(8)
    small = (0.7, 1.3, rng.standard_normal((m, n)), rng.standard_normal((m, m)) / np.sqrt(m),
             rng.standard_normal((m, n)))
    assert "for block in" in flowgrad.grad(symm.kernel, wrt=symm.WRT).ir(*small)
    check_grad(symm.kernel, small, (0, 1, 2, 3, 4))


def _block_sizes(ir):
    return set(re.findall(r"for block in (?:reversed\()?\d+:\d+:(\d+)", ir))


@pytest.mark.parametrize("m, n, size", [(100, 120, SHORT_BLOCK), (45, 9, BLOCK), (300, 40, BLOCK)])
def test_a_short_loop_of_vectors_takes_short_blocks(m, n, size):
    """Blocks of ``SHORT_BLOCK`` iterations where the loop is short and each iteration's product is
    a vector of at least ``WIDE`` elements (symm at 100 by 120); ``BLOCK`` for short vectors and
    for long loops, whose shared products weigh more than the triangles. The forward program and
    the gradient's forward sweep are cut alike."""
    rng = np.random.default_rng(3)
    args = (0.7, 1.3, rng.standard_normal((m, n)), rng.standard_normal((m, m)) / np.sqrt(m),
            rng.standard_normal((m, n)))
    assert _block_sizes(flowgrad.jit(symm.kernel).ir(*args)) == {str(size)}
    assert _block_sizes(flowgrad.grad(symm.kernel, wrt=symm.WRT).ir(*args)) == {str(size)}
