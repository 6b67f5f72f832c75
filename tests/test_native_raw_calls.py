"""The native runtime's raw-pointer calls (BLAS through its address, madvise) check their
arguments themselves: Numba's bounds checks cannot see a write inside BLAS, so a view whose
strides BLAS cannot walk (reversed, strided, offset) must be handled another way, never passed
by pointer."""
import itertools

import numpy as np
import pytest

from oracle import check_forward, check_grad

pytestmark = pytest.mark.native
numba = pytest.importorskip("numba")


def _views(base):
    """Views of a 2-D ``base`` of one shape, laid out every way a program can make them."""
    r, c = base.shape[0] // 2, base.shape[1] // 2
    return {
        "whole": base[:r, :c].copy(),
        "offset": base[1:r + 1, 2:c + 2],
        "reversed rows": base[r - 1::-1, :c],
        "reversed columns": base[:r, c - 1::-1],
        "reversed both": base[r - 1::-1, c - 1::-1],
        "strided rows": base[::2, :c],
        "strided columns": base[:r, ::2],
        "transposed": np.ascontiguousarray(base[:c, :r]).T,
        "transposed reversed": base[:c, :r][::-1].T,
    }


@pytest.mark.parametrize("accumulate", [True, False], ids=["matmul_acc", "matmul_into"])
@pytest.mark.parametrize("out_kind", list(_views(np.zeros((8, 8)))))
def test_matmul_acc_into_every_layout(out_kind, accumulate):
    from flowgrad.backends import native_runtime as rt
    rng = np.random.default_rng(3)
    a_base, b_base = rng.standard_normal((8, 8)), rng.standard_normal((8, 8))
    guard = 12345.0
    for a_kind, b_kind in itertools.product(_views(a_base), _views(b_base)):
        a, b = _views(a_base)[a_kind], _views(b_base)[b_kind]
        a, b = a[:, :3], b[:3, :]                       # (4, 3) @ (3, 4)
        big = np.full((10, 10), guard)
        big[1:9, 1:9] = rng.standard_normal((8, 8))
        out = _views(big[1:9, 1:9])[out_kind]
        if out.base is None or not np.shares_memory(out, big):
            continue                                    # a copy: nothing to corrupt
        expect_big = big.copy()
        expect = _views(expect_big[1:9, 1:9])[out_kind]
        if accumulate:
            expect += a @ b
            rt.matmul_acc(a, b, out)
        else:
            expect[...] = a @ b
            out[...] = np.nan                           # BLAS must not read it
            rt.matmul_into(a, b, out)
        np.testing.assert_allclose(big, expect_big, rtol=1e-13, atol=1e-13,
                                   err_msg=f"out {out_kind}, a {a_kind}, b {b_kind}")


def product_into_reversed_rows(B):
    return np.sum(B @ B[::-1, :])


def sum_into_reversed_view(A, B):
    Z = np.zeros((A.shape[0], B.shape[1]))
    Z[::-1, :] += A @ B
    return np.sum(Z * np.arange(Z.size).reshape(Z.shape))


def sum_into_strided_view(A, B):
    Z = np.zeros((2 * A.shape[0], B.shape[1]))
    Z[::2, :] += A @ B
    Z[-1::-2, :] += A @ B
    return np.sum(np.sin(Z))


@pytest.mark.parametrize("n", [4, 64])
def test_gradient_of_a_product_with_reversed_rows(n):
    B = np.random.default_rng(n).uniform(-1, 1, (n, n))
    check_forward(product_into_reversed_rows, (B,), "native")
    check_grad(product_into_reversed_rows, (B,), backend="native", eps=1e-6, rtol=1e-5)


@pytest.mark.parametrize("fn", [sum_into_reversed_view, sum_into_strided_view], ids=lambda f: f.__name__)
def test_product_summed_into_reversed_and_strided_views(fn):
    rng = np.random.default_rng(5)
    args = (rng.uniform(-1, 1, (5, 3)), rng.uniform(-1, 1, (3, 4)))
    check_forward(fn, args, "native")
    check_grad(fn, args, wrt=(0, 1), backend="native")


def test_huge_pages_marks_only_a_contiguous_block():
    from flowgrad.backends import native_runtime as rt
    a = np.zeros((1 << 20) + 8)
    assert rt.huge_pages(a) is a
    view = a[::-1]
    assert rt.huge_pages(view)[0] == 0.0                 # a view: left alone, returned as it is


_TEMPORARIES = """
import numpy as np
from flowgrad.backends import native_linalg, native_runtime
rng = np.random.default_rng(0)
a = rng.standard_normal((300, 2000))
assert np.allclose(native_linalg.gram(a.T), a @ a.T, rtol=1e-12, atol=1e-9)
l = np.tril(rng.standard_normal((1500, 1500))) + 40 * np.eye(1500)
b = rng.standard_normal((1500, 3))
x = native_linalg.solve_triangular(l.T.T[:, :], b, True, False, False)
assert np.allclose(l @ x, b, rtol=1e-9, atol=1e-9)
p, q = rng.standard_normal((60, 40)), rng.standard_normal((40, 30))
out = np.ones((60, 30))
native_runtime.matmul_acc(p, q, out)
assert np.allclose(out, 1 + p @ q, rtol=1e-12, atol=1e-12)
print("ok")
"""


def test_blas_calls_keep_their_temporary_arrays(tmp_path):
    """A contiguous copy made only to be passed to BLAS by address (the Gram matrix of a
    transposed view) lives until BLAS returns: freed at the statement taking its address, a copy
    larger than the C allocator keeps in its heap was unmapped before BLAS read it (a crash), a
    smaller one read as whatever the allocator wrote there (syrk's gradient was off by 1e-3 in
    some processes). Run in a process of its own, where a crash is a failure, not a lost worker."""
    import os
    import subprocess
    import sys
    env = dict(os.environ, FLOWGRAD_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", _TEMPORARIES], capture_output=True, text=True, env=env,
                          timeout=600)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr[-2000:]
