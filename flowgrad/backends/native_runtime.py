"""Numba-compiled helpers called by the native backend's generated code (imported there as ``_rt``)."""
from __future__ import annotations

import math
import sys
import warnings

import numba
import numba.extending
import numpy as np

# Numba flags ``vector_math``'s object-mode block when a caller's compilation releases the GIL;
# the block needs the GIL by design and nothing here runs threads through it.
warnings.filterwarnings("ignore", message="Code running in object mode won't allow parallel execution",
                        category=numba.NumbaWarning)

_jit = numba.njit(cache=True, nogil=True)

# Generated functions with ``prange`` loops compile with these options: the loops written as
# ``prange`` run over threads, and nothing else is turned into parallel code (a parallel region
# for each small tape copy in a time loop would cost more than the copy).
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
        faults instead of eight thousand (measured 4 ms instead of 11.5 ms to fill one)."""
        if a.nbytes >= _HUGE_MIN_BYTES:
            p = a.ctypes.data
            start = (p + 4095) & ~4095
            _MADVISE(start, p + a.nbytes - start, _MADV_HUGEPAGE)
        return a
else:
    @_jit
    def huge_pages(a):
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
def _blas_order(a):
    """``(transpose flag, leading dimension)`` of a float64 matrix for column-major BLAS, which
    reads a row-ordered ``a`` as its transpose (``'n'`` on ``a.T``) and a column-ordered one (a
    transposed view) as it is."""
    if a.strides[1] == 8 and a.strides[0] >= 8 * max(a.shape[1], 1):
        return ord("n"), max(a.strides[0] // 8, 1)
    return ord("t"), max(a.strides[1] // 8, 1)


@_jit
def matmul_acc(a, b, out):
    """``out += a @ b`` for float64 matrices ``a`` (r, k) and ``b`` (k, m), each with contiguous rows
    or contiguous columns (a transposed view), and ``out`` (r, m), a view with contiguous rows
    (a whole matrix, or a block of columns of one): one BLAS call that adds the product to
    ``out`` (``beta = 1``), with no product array and no pass adding it. In column-major terms
    ``out.T += b.T @ a.T``."""
    r, k = a.shape
    m = b.shape[1]
    if r == 0 or m == 0 or k == 0:
        return
    ta, lda = _blas_order(b)
    tb, ldb = _blas_order(a)
    scales = np.ones(2)
    _XXGEMM(ord("d"), ta, tb, m, r, k, scales.ctypes.data, b.ctypes.data, lda, a.ctypes.data, ldb,
            scales.ctypes.data + 8, out.ctypes.data, max(out.strides[0] // 8, m))


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


# ``exp`` of a float64, written so that the loop calling it vectorises: NumPy's float64 exp is
# SIMD code only on CPUs with AVX-512 and calls the C library's scalar exp elsewhere, as Numba's
# own ``np.exp`` does (both 5-9 ns per element on an AVX2 machine; this one 2 ns, in the loop
# that uses it, with no temporary array). Cody-Waite reduction x = k ln2 + r, |r| <= ln2 / 2, and
# exp(r) = 1 + r + r^2 T(r) with T the Taylor series to degree 13 (its truncation error is below
# 2e-17) evaluated by Estrin's scheme; the result is within 1 ulp of NumPy's (measured over 2^20
# arguments in each of [-1, 1], [-10, 10], [-700, 700], [-745, 745]). 2^k is built from its bits
# in two factors, so that subnormal results and overflow to inf come out as NumPy's do.
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01      # ln 2 to 32 bits: k * _LN2_HI is exact for |k| < 2^20
_LN2_LO = 1.90821492927058770002e-10
_SHIFTER = 6755399441055744.0             # 1.5 * 2^52: x + _SHIFTER rounds x to an integer held in its low bits


def _bits(x):
    return int(np.float64(x).view(np.int64))


class _Emit:
    """Float64 LLVM instructions for the intrinsics below. Each carries the ``contract`` flag:
    Numba gives the caller's fast-math flags only to instructions that have none, and with
    ``reassoc`` the compiler may fold ``(x * log2e + s) - s`` back to ``x * log2e`` and undo the
    rounding the reduction rests on (``contract`` only lets it fuse a product into a sum)."""

    FLAGS = ("contract",)

    def __init__(self, builder):
        from llvmlite import ir
        self.b, self.ir = builder, ir
        self.f64, self.i64 = ir.DoubleType(), ir.IntType(64)

    def num(self, v):
        return self.ir.Constant(self.f64, v)

    def int(self, v):
        return self.ir.Constant(self.i64, v)

    def add(self, x, y):
        return self.b.fadd(x, y, flags=self.FLAGS)

    def sub(self, x, y):
        return self.b.fsub(x, y, flags=self.FLAGS)

    def mul(self, x, y):
        return self.b.fmul(x, y, flags=self.FLAGS)

    def div(self, x, y):
        return self.b.fdiv(x, y, flags=self.FLAGS)

    def clamp(self, v, low, high):
        low, high = self.num(low), self.num(high)
        v = self.b.select(self.b.fcmp_ordered("<", v, low, flags=self.FLAGS), low, v)
        return self.b.select(self.b.fcmp_ordered(">", v, high, flags=self.FLAGS), high, v)

    def call(self, name, *args):
        ir = self.ir
        fn = self.b.module.declare_intrinsic(name, [self.f64], ir.FunctionType(self.f64, [self.f64] * len(args)))
        return self.b.call(fn, list(args))

    def power_of_two(self, n):
        """The float64 2^n for an i64 ``n`` in [-1022, 1023], from its bits."""
        return self.b.bitcast(self.b.shl(self.b.add(n, self.int(1023)), self.int(52)), self.f64)

    def exp_parts(self, y):
        """exp(y) = 2^n (1 + q), q = r + r^2 T(r) (see above), for y in [-746, 710]: ``(q, n)``,
        ``n`` an i64."""
        add, mul = self.add, self.mul
        t = add(mul(y, self.num(_LOG2E)), self.num(_SHIFTER))
        k = self.sub(t, self.num(_SHIFTER))
        r = self.sub(self.sub(y, mul(k, self.num(_LN2_HI))), mul(k, self.num(_LN2_LO)))
        r2 = mul(r, r)
        r4 = mul(r2, r2)
        inv = [self.num(1.0 / math.factorial(j)) for j in range(14)]
        pair = [add(inv[j], mul(r, inv[j + 1])) for j in range(2, 14, 2)]      # c_j + c_j+1 r
        quad = [add(pair[j], mul(r2, pair[j + 1])) for j in range(0, 6, 2)]
        tail = add(add(quad[0], mul(r4, quad[1])), mul(mul(r4, r4), quad[2]))
        n = self.b.sub(self.b.bitcast(t, self.i64), self.int(_bits(_SHIFTER)))
        return add(r, mul(r2, tail)), n


def _float64_function(build):
    """A float64 -> float64 intrinsic whose instructions ``build(emit, x)`` emits into the
    caller; NaN in, NaN out."""
    def typer(typingctx, x):
        if x != numba.types.float64:
            return None

        def codegen(context, builder, signature, args):
            [v] = args
            emit = _Emit(builder)
            return builder.select(builder.fcmp_ordered("==", v, v, flags=_Emit.FLAGS), build(emit, v), v)
        return numba.types.float64(numba.types.float64), codegen
    typer.__name__ = build.__name__
    typer.__doc__ = build.__doc__
    return numba.extending.intrinsic(typer)


@_float64_function
def exp64(emit, v):
    """``np.exp(x)`` for a float64 ``x`` (see above). An intrinsic: its instructions are emitted
    into the caller's loop, where they vectorise. 2^n is applied in two factors, so that
    subnormal results and overflow to inf come out as NumPy's do."""
    q, n = emit.exp_parts(emit.clamp(v, -746.0, 710.0))
    half = emit.b.ashr(n, emit.int(1))
    return emit.mul(emit.mul(emit.add(emit.num(1.0), q), emit.power_of_two(half)),
                    emit.power_of_two(emit.b.sub(n, half)))


@_float64_function
def tanh64(emit, v):
    """``np.tanh(x)`` for a float64 ``x``: m / (m + 2) with m = expm1(2|x|) = 2^n q + (2^n - 1),
    as exact where tanh is small as where it is large (|x| is clamped at 20, where tanh rounds to
    1), with the sign of ``x`` copied onto it."""
    y = emit.mul(emit.num(2.0), emit.clamp(emit.call("llvm.fabs", v), 0.0, 20.0))
    q, n = emit.exp_parts(y)
    s = emit.power_of_two(n)
    m = emit.add(emit.mul(s, q), emit.sub(s, emit.num(1.0)))
    return emit.call("llvm.copysign", emit.div(m, emit.add(m, emit.num(2.0))), v)


# log(1 + f) = f - f^2/2 + s (f^2/2 + R(s^2)), s = f / (2 + f): the minimax coefficients of R
# from fdlibm's e_log.c (error below 2^-58.45 on |s| <= 0.1716), whose reduction this follows
_LOG_R = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
          2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
          1.479819860511658591e-01)
_SQRT2_MANTISSA = 0x6A09E667F3BCD         # the mantissa bits of sqrt(2)


@_float64_function
def log64(emit, v):
    """``np.log(x)`` for a float64 ``x``: x = 2^k m with m in [sqrt(2)/2, sqrt(2)) read from its
    bits (a subnormal scaled by 2^54 first), log x = k ln2 + log(1 + f), f = m - 1, as fdlibm
    computes it; 0 gives -inf, a negative number NaN, inf inf."""
    b, i64 = emit.b, emit.i64
    tiny = b.fcmp_ordered("<", v, emit.num(2.2250738585072014e-308), flags=emit.FLAGS)
    x = b.select(tiny, emit.mul(v, emit.num(18014398509481984.0)), v)      # 2^54
    bits = b.bitcast(x, i64)
    mantissa = b.and_(bits, emit.int((1 << 52) - 1))
    high = b.icmp_signed(">", mantissa, emit.int(_SQRT2_MANTISSA))
    exponent = b.sub(b.lshr(bits, emit.int(52)), b.select(high, emit.int(1022), emit.int(1023)))
    exponent = b.sub(exponent, b.select(tiny, emit.int(54), emit.int(0)))
    m = b.bitcast(b.or_(mantissa, b.select(high, emit.int(0x3FE << 52), emit.int(0x3FF << 52))), emit.f64)
    k = b.sitofp(b.trunc(exponent, emit.ir.IntType(32)), emit.f64)
    add, mul = emit.add, emit.mul
    f = emit.sub(m, emit.num(1.0))
    s = emit.div(f, add(emit.num(2.0), f))
    z = mul(s, s)
    w = mul(z, z)
    c = [emit.num(a) for a in _LOG_R]
    odd = mul(z, add(c[0], mul(w, add(c[2], mul(w, add(c[4], mul(w, c[6])))))))
    even = mul(w, add(c[1], mul(w, add(c[3], mul(w, c[5])))))
    half_f2 = mul(emit.num(0.5), mul(f, f))
    low = add(mul(s, add(half_f2, add(odd, even))), mul(k, emit.num(_LN2_LO)))
    out = add(mul(k, emit.num(_LN2_HI)), emit.sub(f, emit.sub(half_f2, low)))
    zero = b.fcmp_ordered("==", v, emit.num(0.0), flags=emit.FLAGS)
    out = b.select(b.fcmp_ordered("<", v, emit.num(0.0), flags=emit.FLAGS), emit.num(math.nan), out)
    out = b.select(b.fcmp_ordered("==", v, emit.num(math.inf), flags=emit.FLAGS), v, out)
    return b.select(zero, emit.num(-math.inf), out)


# Element functions NumPy may evaluate with SIMD code several times faster than the scalar libm
# calls Numba emits (measured 3-9x for these on an AVX-512 machine; sin, cos and sqrt are on
# par). The native backend runs them over large operands through ``vector_math``, except those it
# compiles itself (float64 exp, log and tanh above).
VECTOR_MATH = ("exp", "expm1", "exp2", "log", "log1p", "log2", "log10", "tanh", "sinh", "cosh", "tan",
               "arcsin", "arccos", "arctan", "arctan2")
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


@_jit
def wrap(i, n):
    """A NumPy index: negative counts from the end."""
    return i + n if i < 0 else i



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
