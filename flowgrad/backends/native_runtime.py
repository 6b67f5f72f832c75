"""Numba-compiled helpers called by the native backend's generated code (imported there as ``_rt``)."""
from __future__ import annotations

import ctypes
import math
import os
import sys
import warnings

import numba
import numpy as np

from . import native_fft as fft  # noqa: F401 (for generated code: _rt.fft.transform)
from . import native_linalg as linalg  # noqa: F401 (for generated code: _rt.linalg.<name>)
from .native_kernel import usable_cpus
from .native_math import (arctan2_64, arctan64, cos64, exp64, flush_subnormals, held, log64,  # noqa: F401 (for
                          restore_fp_mode, sin64, tanh64)                                    # generated code)

# Numba flags ``vector_math``'s object-mode block when a caller's compilation releases the GIL;
# the block needs the GIL by design and nothing here runs threads through it.
warnings.filterwarnings("ignore", message="Code running in object mode won't allow parallel execution",
                        category=numba.NumbaWarning)

_jit = numba.njit(cache=True, nogil=True)

# Generated functions with ``prange`` loops compile with these options: the loops written as
# ``prange`` run over threads, and nothing else is turned into parallel code (a parallel region
# for each small tape copy in a time loop would cost more than the copy).
# Numba's OpenMP threads wait for work asleep, not spinning, unless the user says otherwise. A
# spinning thread holds its CPU while the thread it waits for, kept off the CPUs by a BLAS worker
# spinning after its call or by another process, cannot run: on two busy CPUs, stencil gradients
# with parallel nests ran 5-14x slower than on one thread with OpenMP's default policy, and about
# as fast with passive waiting (``benchmarks/threads.md``). OpenMP reads this when it is loaded,
# at the first parallel loop, so it counts only if no library loaded it earlier.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")



def threads():
    """Threads a parallel loop nest may run on: Numba's pool (``NUMBA_NUM_THREADS``, by default one
    per CPU of the machine), but no more than the CPUs this process may run on now (a container's
    share, ``taskset``, ``os.sched_setaffinity``). The native backend splits no nest where it is one
    (see ``native_parallel.ParallelNests.splits``): on one CPU a parallel region only adds its
    launch, and a pool thread that spins waiting for work (an OpenMP runtime another library
    started without passive waiting) takes that CPU from the thread doing the work. Measured: a
    gradient with parallel nests, run on one CPU after PyTorch and JAX had run in the process,
    took 156 ms instead of 10."""
    return max(1, min(numba.config.NUMBA_NUM_THREADS, usable_cpus()))

PRANGE = {"prange": True, "comprehension": False, "numpy": False, "reduction": False, "setitem": False,
          "stencil": False, "fusion": False, "inplace_binop": False}


# madvise(2) from the C library, declared by symbol so that callers stay cacheable on disk
_MADVISE = (numba.types.ExternalFunction("madvise", numba.types.intc(numba.types.uintp, numba.types.uintp,
                                                                    numba.types.intc))
            if sys.platform.startswith("linux") else None)
_MADV_HUGEPAGE = 14
_HUGE_MIN_BYTES = 1 << 22

if _MADVISE is not None:
    @_jit
    def huge_pages(a):
        """``a``, its memory (not yet touched) marked for transparent huge pages when it is large,
        as NumPy does for its own allocations: paging in a fresh 32 MB array then costs a few
        faults instead of eight thousand (measured 4 ms instead of 11.5 ms to fill one). Only for
        buffers kept between calls (the workspace, tapes): where the kernel compacts memory at
        such a fault (``/sys/kernel/mm/transparent_hugepage/defrag`` ``madvise``, a common
        default) and memory is fragmented, a fault can wait milliseconds, which a buffer made
        once pays once, but an array made on every call pays on every call (measured: bicg's
        gradient, whose gradient arrays the caller still held, 55 ms instead of 11 after PyTorch
        and JAX had run in the process)."""
        if a.nbytes >= _HUGE_MIN_BYTES and a.flags.c_contiguous:     # its own block of memory
            p = a.ctypes.data
            start = (p + 4095) & ~4095
            _MADVISE(start, p + a.nbytes - start, _MADV_HUGEPAGE)
        return a
else:
    @_jit
    def huge_pages(a):
        return a


_LIBC = ctypes.CDLL(None) if sys.platform.startswith("linux") else None


def mark_huge_pages(a):
    """``huge_pages`` for an array made in Python (a kernel's workspace), the advice given through
    ctypes. Python then never takes an array back from the compiled ``huge_pages``: a generated
    function loaded from Numba's disk cache before such a call adds its own compiled copy of
    ``huge_pages`` to the dispatcher, and with some cache contents boxing that copy's result failed
    (``NRT_adapt_ndarray_to_python``: ``descr`` is NULL) on every native call of the process."""
    if _LIBC is not None and a.nbytes >= _HUGE_MIN_BYTES and a.flags.c_contiguous:
        p = a.ctypes.data
        start = (p + 4095) & ~4095
        _LIBC.madvise(ctypes.c_void_p(start), ctypes.c_size_t(p + a.nbytes - start), _MADV_HUGEPAGE)
    return a


# BLAS ``xgemm`` as Numba's own ``np.dot`` calls it (column-major; ``numba_xxgemm`` from its helper
# library, which binds SciPy's BLAS): ``kind, transa, transb, m, n, k, &alpha, a, lda, b, ldb,
# &beta, c, ldc``, pointers as addresses. Declared by symbol, like ``madvise``, so callers stay
# cacheable on disk.
_I8, _IP = numba.types.int8, numba.types.intp
_XXGEMM = numba.types.ExternalFunction("numba_xxgemm", numba.types.int32(
    _I8, _I8, _I8, _IP, _IP, _IP, numba.types.uintp, numba.types.uintp, _IP, numba.types.uintp, _IP,
    numba.types.uintp, numba.types.uintp, _IP))


@_jit
def _blas_layout(a):
    """``(transpose flag, leading dimension)`` of a float64 matrix for column-major BLAS, which
    reads a row-ordered ``a`` as its transpose (``'n'`` on ``a.T``) and a column-ordered one (a
    transposed view) as it is; ``(0, 0)`` when its strides fit neither order (a reversed or
    strided view: BLAS would walk past its memory), so it must not be passed by pointer."""
    n0, n1 = a.shape
    s0, s1 = a.strides
    if (n1 <= 1 or s1 == 8) and (n0 <= 1 or s0 >= 8 * max(n1, 1)):
        return ord("n"), max(s0 // 8 if n0 > 1 else n1, 1)
    if (n0 <= 1 or s0 == 8) and (n1 <= 1 or s1 >= 8 * max(n0, 1)):
        return ord("t"), max(s1 // 8 if n1 > 1 else n0, 1)
    return 0, 0


@_jit
def matmul_acc(a, b, out):
    """``out += a @ b`` for float64 matrices ``a`` (r, k), ``b`` (k, m) and ``out`` (r, m): one BLAS
    call that adds the product to ``out`` (``beta = 1``), with no product array and no pass adding
    it, where each operand has contiguous rows or contiguous columns (a transposed view) and
    ``out`` contiguous rows with a row stride of at least ``m`` (a whole matrix, or a block of
    columns of one). In column-major terms ``out.T += b.T @ a.T``. The strides are checked here,
    at run time, because BLAS writes through a raw pointer that no bounds check sees: any other
    layout (a reversed view, ``out[::-1]``) takes a product array and a NumPy sum instead."""
    _gemm(a, b, out, 1.0)


@_jit
def matmul_into(a, b, out):
    """``out[:, :] = a @ b``, as ``matmul_acc`` (``beta = 0``: BLAS never reads ``out``): operand
    views with contiguous rows or columns are read where they lie, with no contiguous copy."""
    _gemm(a, b, out, 0.0)


@_jit
def _gemm(a, b, out, beta):
    r, k = a.shape
    m = b.shape[1]
    if r == 0 or m == 0:
        return
    if k == 0:
        if beta == 0.0:
            out[:, :] = 0.0
        return
    ta, lda = _blas_layout(b)
    tb, ldb = _blas_layout(a)
    to, ldc = _blas_layout(out)
    if ta == 0 or tb == 0 or to != ord("n") or a.shape[1] != b.shape[0] or out.shape[0] != r or \
            out.shape[1] != m:
        if beta == 0.0:
            out[:, :] = np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))
        else:
            out += np.dot(np.ascontiguousarray(a), np.ascontiguousarray(b))
        return
    scales = np.ones(2)
    scales[1] = beta
    _XXGEMM(ord("d"), ta, tb, m, r, k, scales.ctypes.data, b.ctypes.data, lda, a.ctypes.data, ldb,
            scales.ctypes.data + 8, out.ctypes.data, max(ldc, m))
    linalg.alive(scales)


@_jit
def offered(buf, shape):
    """``buf`` when it has ``shape``, else a fresh array of that shape: for an array handed to the
    caller, in the buffer the caller offers (one it returned before and no longer holds), which
    may be new on every call, so not marked for huge pages (see ``huge_pages``)."""
    if buf.shape == shape:
        return buf
    return np.empty(shape, dtype=buf.dtype)


@_jit
def fitted(buf, shape, zeros):
    """``buf`` when it has ``shape``, else a fresh array of that shape (zeroed with ``zeros``), for
    a buffer kept between calls. Called unconditionally, ``a = fitted(a, shape, False)``: with the
    check in the compiled function instead, ``if a.shape != shape: a = np.empty(shape)``, the array
    is one of two values wherever the function uses it, and Numba compiled durbin's gradient 1.3x
    slower."""
    if buf.shape == shape:
        return buf
    if zeros:
        return huge_pages(np.zeros(shape, dtype=buf.dtype))
    return huge_pages(np.empty(shape, dtype=buf.dtype))


@_jit
def copied(buf, a):
    """A copy of array ``a`` (C order) in ``buf`` when it has ``a``'s shape, else in a fresh
    array (``fitted``): a parameter the program writes, copied into a buffer kept between calls
    rather than into new memory on every call, whose first touch of each page the system must
    map. gemver's forward copies its 32 MB matrix: 22 ms a call with the copy in new memory,
    8.4 in the kept buffer, when each call gets arrays of its own (7.3 when it gets the same)."""
    out = fitted(buf, a.shape, False)
    out[...] = a
    return out


@_jit
def gammaln(x):
    """log |Gamma(x)| (SciPy's gammaln)."""
    return math.lgamma(x) if not (x <= 0.0 and math.floor(x) == x) else math.inf


@_jit
def digamma(x):
    """The derivative of gammaln: the recurrence psi(x) = psi(x + 1) - 1 / x up to x >= 10, then
    the asymptotic series (error below 1e-15 there); reflection below 0 (SciPy's values: nan
    at the poles 0, -1, -2, ...)."""
    if x != x or (x <= 0.0 and math.floor(x) == x):
        return math.nan
    shift = 0.0
    if x < 0.0:                            # psi(x) = psi(1 - x) - pi / tan(pi x)
        shift = -math.pi / math.tan(math.pi * x)
        x = 1.0 - x
    while x < 10.0:
        shift -= 1.0 / x
        x += 1.0
    f = 1.0 / (x * x)
    series = f * (-1.0 / 12 + f * (1.0 / 120 + f * (-1.0 / 252 + f * (1.0 / 240 + f * (-1.0 / 132
                                                                                       + f * 691.0 / 32760)))))
    return shift + math.log(x) - 0.5 / x + series


@_jit
def trigamma(x):
    """The derivative of digamma: psi1(x) = psi1(x + 1) + 1 / x^2 up to x >= 10, then the
    asymptotic series; reflection below 0; inf at the poles 0, -1, -2, ... (SciPy's values)."""
    if x != x:
        return math.nan
    if x <= 0.0 and math.floor(x) == x:
        return math.inf
    if x < 0.0:                            # psi1(1 - x) + psi1(x) = pi^2 / sin(pi x)^2
        return (math.pi / math.sin(math.pi * x)) ** 2 - trigamma(1.0 - x)
    acc = 0.0
    while x < 10.0:
        acc += 1.0 / (x * x)
        x += 1.0
    f = 1.0 / (x * x)
    series = (1.0 + f * (1.0 / 6 + f * (-1.0 / 30 + f * (1.0 / 42 + f * (-1.0 / 30 + f * 5.0 / 66))))) / x
    return acc + series + 0.5 * f


# Bernoulli numbers B_2, B_4, ..., B_20 (the asymptotic series of polygamma)
_BERNOULLI = (1.0 / 6, -1.0 / 30, 1.0 / 42, -1.0 / 30, 5.0 / 66, -691.0 / 2730, 7.0 / 6, -3617.0 / 510,
              43867.0 / 798, -174611.0 / 330)


@_jit
def polygamma(n, x):
    """SciPy's polygamma(n, x) for an integer n >= 1: psi_n(x) = psi_n(x + 1) + (-1)^(n+1) n! / x^(n+1)
    up to x >= 20 + n, then the asymptotic series (-1)^(n+1) [(n-1)! / x^n + n! / (2 x^(n+1))
    + sum_k B_2k (2k+n-1)! / ((2k)! x^(2k+n))]; at the poles 0, -1, -2, ... inf for odd n, -inf
    for even n."""
    n = int(n)
    sign = 1.0 if n % 2 == 1 else -1.0
    if x != x:
        return math.nan
    if x <= 0.0 and math.floor(x) == x:
        return sign * math.inf
    fact = math.gamma(n + 1.0)
    acc = 0.0
    while x < 20.0 + n:
        acc += 1.0 / x ** (n + 1)
        x += 1.0
    s = math.gamma(float(n)) / x ** n + fact / (2.0 * x ** (n + 1))
    for k in range(1, len(_BERNOULLI) + 1):
        s += _BERNOULLI[k - 1] * math.exp(math.lgamma(2.0 * k + n) - math.lgamma(2.0 * k + 1.0)) / x ** (2 * k + n)
    return sign * (fact * acc + s)


@_jit
def argsort_last(x, out):
    """``np.argsort(x, axis=-1, kind="stable")`` into ``out`` (C order), row by row."""
    n = x.shape[-1]
    if x.size == 0:
        return
    rows = np.ascontiguousarray(x).reshape(-1, n)
    flat = out.reshape(-1, n)
    for r in range(rows.shape[0]):
        flat[r] = np.argsort(rows[r], kind="mergesort")


@_jit
def searchsorted_into(a, v, out, right):
    """``np.searchsorted(a, v, side)`` into ``out`` (C order, v's shape, at least 1-D)."""
    values = np.ascontiguousarray(v).reshape(-1)
    flat = out.reshape(-1)
    for k in range(values.size):
        flat[k] = np.searchsorted(a, values[k], side="right") if right else np.searchsorted(a, values[k])


@_jit
def room(buf, need):
    """``buf`` when it holds ``need`` elements, else a larger tape buffer holding its contents (the
    capacity at least doubles). Called unconditionally, ``t = room(t, n)``: with the check in the
    compiled function instead, ``if n > t.shape[0]: t = grow(t, n)``, Numba compiled durbin's
    forward loop, which stores into the tape, 4x slower than without it (measured on its inner
    loops, where the tape is not even touched)."""
    if need <= buf.shape[0]:
        return buf
    cap = max(need, 2 * buf.shape[0])
    out = huge_pages(np.empty(cap, dtype=buf.dtype))
    out[:buf.shape[0]] = buf
    return out


# Element functions NumPy may evaluate with SIMD code several times faster than the scalar libm
# calls Numba emits (measured 3-9x for these on an AVX-512 machine; float32 sin and cos 3x on an
# AVX2 one). The native backend runs them over large operands through ``vector_math``, except
# those it compiles into its loops (``native_math``: float64 exp, log, tanh, sin, cos, arctan and
# arctan2). New names go at the end: generated code refers to them by position.
VECTOR_MATH = ("exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "tanh", "sinh", "cosh", "tan",
               "arcsin", "arccos", "arctan", "arctan2", "sin", "cos")
_UFUNCS = tuple(getattr(np, name) for name in VECTOR_MATH)


def _ufunc_inplace(code, a):
    with np.errstate(all="ignore"):     # the scalar loops this stands in for warn about nothing
        if code == 0 and a.flags.c_contiguous and a.size >= 8192:
            _exp_inplace(a.reshape(-1))
        else:
            _UFUNCS[code](a, out=a)


# exp(x) is a normal number for x >= the first value, zero below the second
_EXP_RANGE = {np.dtype(np.float64): (-700.0, -746.0), np.dtype(np.float32): (-80.0, -104.0)}


def _exp_inplace(a):
    """``np.exp(a, out=a)``, bit for bit, for a large contiguous ``a`` that may hold arguments
    far below the range of normal results: a masked softmax's ``-1e9`` or ``-inf``. NumPy's SIMD
    exp takes a slow path for every vector with such an element (measured 3.4x the time with half
    the elements at ``-1e9``). The elements whose exp is zero are set to 0 and marked in one
    compiled pass, and zeroed after the exp of the rest; an element with a subnormal exp is left
    to NumPy."""
    low, zero = _EXP_RANGE.get(a.dtype, (None, None))
    if low is None or not a[::61].min() < low:      # a sample decides the path; both are exact
        np.exp(a, out=a)
        return
    below = np.empty(a.shape, dtype=np.bool_)
    _exp_mark(a, zero, below)
    np.exp(a, out=a)
    _exp_zero(a, below)


@_jit
def _exp_mark(a, zero, below):
    """Mark the elements of ``a`` below ``zero`` in ``below`` and set them to 0."""
    for i in range(a.size):
        b = a[i] < zero
        below[i] = b
        a[i] = 0.0 if b else a[i]


@_jit
def _exp_zero(a, below):
    for i in range(a.size):
        a[i] = 0.0 if below[i] else a[i]


def _ufunc2_inplace(code, a, b):
    with np.errstate(all="ignore"):
        _UFUNCS[code](a, b, out=a)


@numba.njit(cache=True)
def vector_math(code, a):
    """``a[...] = f(a)`` for the NumPy ufunc ``VECTOR_MATH[code]``, one object-mode call (about
    2 us). Kept out of the generated functions: Numba mis-lowers object-mode blocks inside their
    large loop nests."""
    with numba.objmode():
        _ufunc_inplace(code, a)


@numba.njit(cache=True)
def vector_math2(code, a, b):
    """``a[...] = f(a, b)`` for a two-operand ufunc of ``VECTOR_MATH`` (``b`` broadcast to ``a``)."""
    with numba.objmode():
        _ufunc2_inplace(code, a, b)


@_jit
def trip_count(start, stop, step):
    """len(range(start, stop, step))."""
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // (-step))


@_jit
def slice_end(start, size, step):
    """The stop of a slice with ``size`` elements from ``start`` by ``step`` (-1 past the front means none)."""
    stop = start + size * step
    if stop < 0:
        return -(1 << 62)
    return stop


@_jit
def slice_indices(start, stop, step, n):
    """(start, stop, step, length) of a Python slice over an axis of length ``n``."""
    st = 1 if step is None else step
    if st > 0:
        lo = 0 if start is None else (start + n if start < 0 else start)
        hi = n if stop is None else (stop + n if stop < 0 else stop)
        lo = min(max(lo, 0), n)
        hi = min(max(hi, 0), n)
        length = max(0, (hi - lo + st - 1) // st)
    else:
        lo = n - 1 if start is None else (start + n if start < 0 else start)
        hi = -1 if stop is None else (stop + n if stop < 0 else stop)
        lo = min(max(lo, -1), n - 1)
        hi = min(max(hi, -1), n - 1)
        length = max(0, (lo - hi - st - 1) // (-st))
    return lo, hi, st, length


OUT_OF_BOUNDS = "index out of bounds"     # first argument of the IndexError raised below


@numba.njit(cache=True, nogil=True, inline="always")
def wrap(i, n, site):
    """NumPy's integer index ``i`` into an axis of length ``n``: a negative one counts from the
    end, one outside ``-n .. n - 1`` raises IndexError (``Kernel`` words the message, naming the
    user's line numbered ``site`` in the generated module's ``SITES_*``).
    Inlined where it is called: as a call, the check made gnn_scatter's gradient 1.6x slower
    (29.4 ms; inlined 19.1, without any check 18.0)."""
    if i < 0:
        if i < -n:
            raise IndexError(OUT_OF_BOUNDS, i, n, site)
        return i + n
    if i >= n:
        raise IndexError(OUT_OF_BOUNDS, i, n, site)
    return i



@_jit
def ckpt_slots(kind, trips, param):
    """Snapshot slots of a loop checkpoint schedule (see flowgrad.checkpoint.schedules)."""
    if kind == 1:
        return max(1, (trips + max(1, param) - 1) // max(1, param))
    return 1 + max(0, param)


# ``lu`` buffers hold the transpose of LAPACK's (Fortran-order) factors: ``lu.T`` is then the
# Fortran-order array getrs reads in place, where a C-order copy of the factors would be copied
# back to Fortran order on every solve (measured 5.5x slower for one 400 x 400 solve).


def _lu_factor_into(a, lu, piv):
    from .runtime import lu_factor
    f, p = lu_factor(a)
    lu[...] = f.T
    piv[...] = p


def _lu_solve_into(lu, piv, b, out, trans):
    from .runtime import lu_solve
    out[...] = lu_solve(lu.T, piv, b, trans)


@numba.njit(cache=True)
def lu_factor_into(a, lu, piv):
    """``lu, piv = lu_factor(a)`` (SciPy's LAPACK getrf, one object-mode call)."""
    with numba.objmode():
        _lu_factor_into(a, lu, piv)


@numba.njit(cache=True)
def lu_solve_into(lu, piv, b, out, trans):
    """``out[...] = lu_solve(lu, piv, b, trans)`` (LAPACK getrs, one object-mode call)."""
    with numba.objmode():
        _lu_solve_into(lu, piv, b, out, trans)
