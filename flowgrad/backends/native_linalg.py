"""Numba-compiled linear algebra for the native backend's generated code (``_rt.linalg.<name>``):
``eigh`` for either triangle, the triangular solve, least squares with NumPy's default cut-off,
and the adjoints of ``linalg_runtime`` compiled from the same source.

Numba's own ``np.linalg.eigh`` reads the lower triangle only; NumPy's with ``UPLO='U'`` calls
LAPACK's syevd on the upper one, whose eigenvectors may differ in sign from those of the mirrored
lower triangle, so ``eigh`` calls syevd itself (Numba's ``numba_ez_xxxevd`` helper, declared by
symbol like ``native_runtime``'s gemm). The triangular solve is a substitution loop: SciPy's
LAPACK is not reachable from compiled code (its values agree to rounding).
"""
from __future__ import annotations

import numba
import numpy as np

from . import linalg_runtime as _numpy

_jit = numba.njit(cache=True, nogil=True)

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


@_jit
def solve_triangular(a, b, lower, trans, unit):
    """``scipy.linalg.solve_triangular(a, b, trans, lower, unit_diagonal)`` by substitution
    (``b`` a vector or a matrix of right-hand sides)."""
    n = a.shape[0]
    x = np.ascontiguousarray(b).reshape(n, -1).copy()
    forward = lower != trans        # the system's matrix is lower triangular
    for step in range(n):
        i = step if forward else n - 1 - step
        for t in range(step):
            j = t if forward else n - 1 - t
            f = a[j, i] if trans else a[i, j]
            x[i, :] -= f * x[j, :]
        if not unit:
            if a[i, i] == 0.0:
                raise np.linalg.LinAlgError("singular matrix: resolution failed at a zero on the diagonal")
            x[i, :] /= a[i, i]
    return x.reshape(b.shape)


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


eigh_vjp = _jit(_numpy.eigh_vjp)
svd_vjp = _jit(_numpy.svd_vjp)
qr_vjp = _jit(_numpy.qr_vjp)
lstsq_vjp = _jit(_numpy.lstsq_vjp)
