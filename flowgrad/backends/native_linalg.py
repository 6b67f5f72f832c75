"""Numba-compiled linear algebra for the native backend's generated code (``_rt.linalg.<name>``):
``eigh`` for either triangle, the triangular solve, the Gram matrix, least squares with NumPy's default cut-off,
and the adjoints of ``linalg_runtime`` compiled from the same source (their triangular solves this
module's).

Numba's own ``np.linalg.eigh`` reads the lower triangle only; NumPy's with ``UPLO='U'`` calls
LAPACK's syevd on the upper one, whose eigenvectors may differ in sign from those of the mirrored
lower triangle, so ``eigh`` calls syevd itself (Numba's ``numba_ez_xxxevd`` helper, declared by
symbol like ``native_runtime``'s gemm). The triangular solve calls BLAS ``dtrsm`` from SciPy's
BLAS, bound to a symbol the same way, and the Gram matrix ``b.T @ b`` BLAS ``dsyrk``, half the
work of a general product.
"""
from __future__ import annotations

import llvmlite.binding as llvm
import numba
import numpy as np
from llvmlite import ir
from numba.extending import get_cython_function_address

from . import linalg_runtime as _numpy

_jit = numba.njit(cache=True, nogil=True)


@numba.extending.intrinsic
def alive(typingctx, a):
    """Array ``a`` still exists here. A BLAS or LAPACK function is called with addresses
    (``a.ctypes.data``), which do not hold their arrays: Numba frees an array after the last
    statement that names it, which for a temporary (``np.ones(1)``, a contiguous copy) is the one
    taking its address, before the call that reads it. Call this after such a call for each
    array whose address it took. Measured without it: syrk's Gram matrix, whose operand is such
    a copy, read freed memory, and its gradient came out wrong by 1e-3 relative in some processes."""
    if not isinstance(a, numba.types.Array):
        return None

    def codegen(context, builder, signature, args):
        data = context.make_array(signature.args[0])(context, builder, args[0]).data
        use = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [data.type]), "", "r,~{memory}", side_effect=True)
        builder.call(use, [data])
        return context.get_dummy_value()
    return numba.types.none(a), codegen

_I8, _IP, _P = numba.types.int8, numba.types.intp, numba.types.uintp
_XXXEVD = numba.types.ExternalFunction("numba_ez_xxxevd", numba.types.intc(_I8, _I8, _I8, _IP, _P, _IP, _P))


@_jit
def eigh(a, lower):
    """``np.linalg.eigh(a, UPLO='L' if lower else 'U')`` as ``(w, v)``, ``v`` in C order."""
    n = a.shape[0]
    work = np.empty((n, n))
    work[:, :] = a.T                # C order of a.T: the column-major a LAPACK reads
    w = np.empty(n)
    if n and _XXXEVD(ord("d"), ord("V"), ord("L") if lower else ord("U"), n, work.ctypes.data, n, w.ctypes.data):
        raise np.linalg.LinAlgError("Eigenvalues did not converge")
    return w, np.ascontiguousarray(work.T)


# BLAS ``dtrsm`` from SciPy's BLAS (the one NumPy and Numba use), bound to a symbol so that the
# functions calling it stay cacheable on disk: every argument by address, Fortran style.
llvm.add_symbol("flowgrad_dtrsm", get_cython_function_address("scipy.linalg.cython_blas", "dtrsm"))
_DTRSM = numba.types.ExternalFunction("flowgrad_dtrsm", numba.types.void(*([_P] * 11)))


@_jit
def solve_triangular(a, b, lower, trans, unit):
    """``scipy.linalg.solve_triangular(a, b, trans, lower, unit_diagonal)`` (``b`` a vector or a
    matrix of right-hand sides) by BLAS ``dtrsm``: for row-ordered arrays, which column-major BLAS
    reads transposed, ``op(a) x = b`` is ``x^T op(a)^T = b^T``, solved from the right. A zero on
    the diagonal raises, as SciPy does."""
    n = a.shape[0]
    if not unit:
        for i in range(n):
            if a[i, i] == 0.0:
                raise np.linalg.LinAlgError("singular matrix: resolution failed at a zero on the diagonal")
    x = np.ascontiguousarray(b).reshape(n, -1).copy()
    k = x.shape[1]
    if n == 0 or k == 0:
        return x.reshape(b.shape)
    m = np.ascontiguousarray(a)
    flags = np.array([ord("R"), ord("U") if lower else ord("L"), ord("T") if trans else ord("N"),
                      ord("U") if unit else ord("N")], dtype=np.int8)
    sizes = np.array([k, n, n, k], dtype=np.int32)          # m, n, lda, ldb of the column-major call
    one = np.ones(1)
    _DTRSM(flags[0:].ctypes.data, flags[1:].ctypes.data, flags[2:].ctypes.data, flags[3:].ctypes.data,
           sizes[0:].ctypes.data, sizes[1:].ctypes.data, one.ctypes.data, m.ctypes.data, sizes[2:].ctypes.data,
           x.ctypes.data, sizes[3:].ctypes.data)
    alive(flags), alive(sizes), alive(one), alive(m), alive(x)
    return x.reshape(b.shape)


llvm.add_symbol("flowgrad_dsyrk", get_cython_function_address("scipy.linalg.cython_blas", "dsyrk"))
_DSYRK = numba.types.ExternalFunction("flowgrad_dsyrk", numba.types.void(*([_P] * 10)))


@_jit
def gram(b):
    """``b.T @ b`` of a float64 matrix by BLAS ``dsyrk``: column-major BLAS reads the row-ordered
    ``b`` (n, m) as ``b.T``, whose product with its own transpose it fills one triangle of; the
    other is mirrored."""
    n, m = b.shape
    c = np.zeros((m, m))
    if m == 0 or n == 0:
        return c
    x = np.ascontiguousarray(b)
    flags = np.array([ord("U"), ord("N")], dtype=np.int8)
    sizes = np.array([m, n, m, m], dtype=np.int32)          # n, k, lda, ldc of the column-major call
    one = np.ones(1)
    zero = np.zeros(1)
    _DSYRK(flags[0:].ctypes.data, flags[1:].ctypes.data, sizes[0:].ctypes.data, sizes[1:].ctypes.data,
           one.ctypes.data, x.ctypes.data, sizes[2:].ctypes.data, zero.ctypes.data, c.ctypes.data,
           sizes[3:].ctypes.data)
    alive(flags), alive(sizes), alive(one), alive(zero), alive(x), alive(c)
    # the column-major upper triangle is the row-major lower one
    for i in range(m):
        for j in range(i + 1, m):
            c[i, j] = c[j, i]
    return c


@_jit
def lstsq(a, b, rcond):
    """``x, rank, s`` of ``np.linalg.lstsq(a, b, rcond)``, ``x`` in C order."""
    x, _, rank, s = np.linalg.lstsq(a, np.ascontiguousarray(b), rcond)
    return np.ascontiguousarray(x), rank, s


@_jit
def svd(a):
    """``np.linalg.svd(a, full_matrices=False)``, the factors in C order."""
    u, s, vh = np.linalg.svd(a, False)
    return np.ascontiguousarray(u), s, np.ascontiguousarray(vh)


@_jit
def qr(a):
    """``np.linalg.qr(a)`` (reduced), the factors in C order."""
    q, r = np.linalg.qr(a)
    return np.ascontiguousarray(q), np.ascontiguousarray(r)


@numba.extending.overload(_numpy.solve_triangular)
def _compiled_solve_triangular(a, b, lower, trans, unit):
    """The adjoints of ``linalg_runtime`` solve with SciPy's function there, with ``dtrsm`` here."""
    return lambda a, b, lower, trans, unit: solve_triangular(a, b, lower, trans, unit)


cholesky_vjp = _jit(_numpy.cholesky_vjp)
eigh_vjp = _jit(_numpy.eigh_vjp)
svd_vjp = _jit(_numpy.svd_vjp)
qr_vjp = _jit(_numpy.qr_vjp)
lstsq_vjp = _jit(_numpy.lstsq_vjp)
