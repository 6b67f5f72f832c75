"""Element functions of float64 compiled into the loops of the generated code: LLVM instructions
written here, where the C library's functions (and NumPy's, on CPUs without AVX-512) are scalar
calls. The runtime (``native_runtime``) exports them to the generated code as ``_rt.exp64`` ...

Two forms:

- **inline** (exp, log, tanh, arctan): the instructions are emitted into the caller, where the
  loop vectoriser treats them like any arithmetic;
- **with a fallback** (sin, cos, arctan2): a fast path for the common arguments and the C
  library's function for the rare ones (huge arguments of sin and cos, zeros and infinities of
  arctan2). A scalar function, defined once in each module that calls it, carries LLVM's
  ``vector-function-abi-variant`` attribute naming vector versions of itself (2, 4 and 8 lanes):
  the loop vectoriser calls those, which run the fast path on all lanes and call the C library
  only for the lanes that need it.
"""
from __future__ import annotations

import hashlib
import math
import platform

import numba
import numba.extending
import numpy as np
from llvmlite import ir
from numba.core import cgutils

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
    """Float64 LLVM instructions for the element functions below, over scalars or, with
    ``lanes``, vectors of that many. Each carries the ``contract`` flag: Numba gives the caller's
    fast-math flags only to instructions that have none, and with ``reassoc`` the compiler may
    fold ``(x * log2e + s) - s`` back to ``x * log2e`` and undo the rounding the reductions rest
    on (``contract`` only lets it fuse a product into a sum)."""

    FLAGS = ("contract",)

    def __init__(self, builder, lanes=0):
        self.b, self.lanes = builder, lanes
        self.f64, self.i64, self.i32 = (ir.VectorType(t, lanes) if lanes else t
                                        for t in (ir.DoubleType(), ir.IntType(64), ir.IntType(32)))

    def num(self, v):
        return ir.Constant(self.f64, [v] * self.lanes if self.lanes else v)

    def int(self, v):
        return ir.Constant(self.i64, [v] * self.lanes if self.lanes else v)

    def add(self, x, y):
        return self.b.fadd(x, y, flags=self.FLAGS)

    def sub(self, x, y):
        return self.b.fsub(x, y, flags=self.FLAGS)

    def mul(self, x, y):
        return self.b.fmul(x, y, flags=self.FLAGS)

    def div(self, x, y):
        return self.b.fdiv(x, y, flags=self.FLAGS)

    def less(self, x, y):
        return self.b.fcmp_ordered("<", x, y, flags=self.FLAGS)

    def clamp(self, v, low, high):
        low, high = self.num(low), self.num(high)
        v = self.b.select(self.less(v, low), low, v)
        return self.b.select(self.less(high, v), high, v)

    def pick(self, v, bounds, values):
        """``values[j]`` for the first ``v < bounds[j]``, ``values[-1]`` where there is none."""
        out = self.num(values[-1])
        for bound, value in zip(reversed(bounds), reversed(values[:-1])):
            out = self.b.select(self.less(v, self.num(bound)), self.num(value), out)
        return out

    def call(self, name, *args):
        suffix = f"v{self.lanes}f64" if self.lanes else "f64"
        fn = cgutils.get_or_insert_function(self.b.module, ir.FunctionType(self.f64, [self.f64] * len(args)),
                                            f"{name}.{suffix}")
        return self.b.call(fn, list(args))

    def bits(self, v):
        return self.b.bitcast(v, self.i64)

    def two_sum(self, a, b):
        """``(s, e)`` with s = fl(a + b) and s + e = a + b exactly (Knuth)."""
        s = self.add(a, b)
        v = self.sub(s, a)
        return s, self.add(self.sub(a, self.sub(s, v)), self.sub(b, v))

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
        n = self.b.sub(self.bits(t), self.int(_bits(_SHIFTER)))
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
    subnormal results and overflow to inf come out as NumPy's do. Below -746, where exp rounds to
    0, the lanes compute exp(0) and 0 is selected: a product that underflows costs a
    micro-code assist of about a hundred cycles on x86 (a causal mask's -1e9 sends half the
    scores of an attention there)."""
    zero = emit.less(v, emit.num(-746.0))
    q, n = emit.exp_parts(emit.b.select(zero, emit.num(0.0), emit.clamp(v, -746.0, 710.0)))
    half = emit.b.ashr(n, emit.int(1))
    out = emit.mul(emit.mul(emit.add(emit.num(1.0), q), emit.power_of_two(half)),
                   emit.power_of_two(emit.b.sub(n, half)))
    return emit.b.select(zero, emit.num(0.0), out)


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
    k = b.sitofp(b.trunc(exponent, emit.i32), emit.f64)
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


# --- element functions with a fallback to the C library for rare arguments

_TAG = hashlib.sha256(open(__file__, "rb").read()).hexdigest()[:10]     # names differ per version of this file
_LANES = (2, 4, 8)


def _declare(module, name, arity, lanes=0):
    t = ir.VectorType(ir.DoubleType(), lanes) if lanes else ir.DoubleType()
    return cgutils.get_or_insert_function(module, ir.FunctionType(t, [t] * arity), name)


def _fallback(builder, name, args):
    """The C library's function ``name`` of float64 ``args``, through its LLVM intrinsic (which
    does not set errno)."""
    return builder.call(_declare(builder.module, f"llvm.{name}.f64", len(args)), list(args))


def _vector_variant(module, name, build, fallback, arity, lanes):
    """``name``'s version over ``lanes`` lanes: the fast path on all of them, then the C library's
    function on each lane whose argument is rare, if any is. Its mangled name tells the loop
    vectoriser which scalar function it stands for (LLVM's vector function ABI)."""
    fn = _declare(module, f"{name}_v{lanes}", arity, lanes)
    if fn.is_declaration:
        fn.linkage = "weak_odr"         # a discardable (linkonce) copy would be gone before the vectoriser runs
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block())
        value, rare = build(_Emit(b, lanes), *fn.args)
        flag = ir.VectorType(ir.IntType(1), lanes)
        any_rare = b.call(cgutils.get_or_insert_function(module, ir.FunctionType(ir.IntType(1), [flag]),
                                                         f"llvm.vector.reduce.or.v{lanes}i1"), [rare])
        with b.if_then(any_rare, likely=False):
            out = value
            for i in range(lanes):
                lane = ir.Constant(ir.IntType(32), i)
                before = b.basic_block
                with b.if_then(b.extract_element(rare, lane)):
                    fixed = b.insert_element(out, _fallback(b, fallback, [b.extract_element(a, lane)
                                                                        for a in fn.args]), lane)
                    then = b.basic_block
                merged = b.phi(value.type)
                merged.add_incoming(fixed, then)
                merged.add_incoming(out, before)
                out = merged
            b.ret(out)
        b.ret(value)
    return f"_ZGV_LLVM_N{lanes}{'v' * arity}_{name}({name}_v{lanes})"


def _with_fallback(fallback, arity):
    """A float64 element function ``build(emit, *args) -> (value, rare)`` whose lanes where
    ``rare`` holds take the C library's ``fallback`` instead (see the module's docstring)."""
    def wrap(build):
        name = f"flowgrad_{build.__name__}_{_TAG}"

        def define(module):
            fn = _declare(module, name, arity)
            if fn.is_declaration:
                variants = [_vector_variant(module, name, build, fallback, arity, lanes) for lanes in _LANES]
                fn.linkage = "linkonce_odr"
                for attr in ("noinline", "nounwind", "readnone"):   # noinline: the vectoriser sees the call
                    fn.attributes.add(attr)
                set.add(fn.attributes, "willreturn")                # attributes llvmlite's list lacks
                set.add(fn.attributes, f'"vector-function-abi-variant"="{",".join(variants)}"')
                b = ir.IRBuilder(fn.append_basic_block())
                value, rare = build(_Emit(b), *fn.args)
                with b.if_then(rare, likely=False):
                    b.ret(_fallback(b, fallback, fn.args))
                b.ret(value)
            return fn

        def codegen(context, builder, signature, args):
            return builder.call(define(builder.module), list(args))

        f64 = numba.types.float64
        if arity == 1:
            def typer(typingctx, x):
                return (f64(f64), codegen) if x == f64 else None
        else:
            def typer(typingctx, y, x):
                return (f64(f64, f64), codegen) if (y, x) == (f64, f64) else None
        typer.__name__ = build.__name__
        typer.__doc__ = build.__doc__
        return numba.extending.intrinsic(typer)
    return wrap


def _poly(emit, z, coefficients):
    """c0 + z (c1 + z (c2 + ...)), by Horner's scheme."""
    out = emit.num(coefficients[-1])
    for c in reversed(coefficients[:-1]):
        out = emit.add(emit.num(c), emit.mul(z, out))
    return out


# sin and cos: x = k pi/2 + r, |r| <= pi/4, with pi/2 in fdlibm's four parts (33, 33, 33 and 53
# bits: k * part is exact for |k| < 2^20 but for the last), r as a double-double by exact
# two-sums, so that it keeps its precision where x is close to a multiple of pi/2; then fdlibm's
# kernels (minimax polynomials on [-pi/4, pi/4], the coefficients published in its k_sin.c and
# k_cos.c) and the quadrant k mod 4. Beyond 2^20 pi/2, and for inf and NaN, the C library's.
_INV_PIO2 = 6.36619772367581382433e-01
_PIO2 = (1.57079632673412561417e+00, 6.07710050630396597660e-11, 2.02226624871116645580e-21,
         8.47842766036889956997e-32)
_TRIG_RANGE = 1647099.0
_SIN = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
        2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)
_COS = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
        -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)


def _reduce_pio2(emit, x):
    """x = k pi/2 + hi + lo for |x| < _TRIG_RANGE: ``(hi, lo, k)``, ``k`` an i64."""
    b, add, sub, mul, num = emit.b, emit.add, emit.sub, emit.mul, emit.num
    t = add(mul(x, num(_INV_PIO2)), num(_SHIFTER))
    k = sub(t, num(_SHIFTER))
    a = sub(x, mul(k, num(_PIO2[0])))
    s, e1 = emit.two_sum(a, b.fneg(mul(k, num(_PIO2[1]))))
    s, e2 = emit.two_sum(s, b.fneg(mul(k, num(_PIO2[2]))))
    lo = sub(add(e1, e2), mul(k, num(_PIO2[3])))
    hi = add(s, lo)
    return hi, sub(lo, sub(hi, s)), b.sub(emit.bits(t), emit.int(_bits(_SHIFTER)))


def _sin_kernel(emit, x, y):
    """sin(x + y) for |x + y| <= pi/4, |y| below half an ulp of x (fdlibm's __kernel_sin)."""
    sub, mul = emit.sub, emit.mul
    z = mul(x, x)
    v = mul(z, x)
    r = _poly(emit, z, _SIN[1:])
    return sub(x, sub(sub(mul(z, sub(mul(emit.num(0.5), y), mul(v, r))), y), mul(v, emit.num(_SIN[0]))))


def _cos_kernel(emit, x, y):
    """cos(x + y) for |x + y| <= pi/4 (fdlibm's __kernel_cos, its branches as selects)."""
    b, sub, mul, num = emit.b, emit.sub, emit.mul, emit.num
    z = mul(x, x)
    r = mul(z, _poly(emit, z, _COS))
    ax = emit.call("llvm.fabs", x)
    quarter = b.bitcast(b.and_(b.sub(emit.bits(ax), emit.int(2 << 52)), emit.int(-1 << 32)), emit.f64)
    qx = b.select(emit.less(ax, num(0.3)), num(0.0),
                  b.select(emit.less(num(0.78125), ax), num(0.28125), quarter))
    hz = sub(mul(num(0.5), z), qx)
    return sub(sub(num(1.0), qx), sub(hz, sub(mul(z, r), mul(x, y))))


def _sin_cos(emit, x, shift):
    """sin(x + shift pi/2), and whether x is out of the reduction's range."""
    b = emit.b
    hi, lo, k = _reduce_pio2(emit, x)
    k = b.add(k, emit.int(shift))
    odd = b.icmp_signed("!=", b.and_(k, emit.int(1)), emit.int(0))
    negative = b.icmp_signed("!=", b.and_(k, emit.int(2)), emit.int(0))
    v = b.select(odd, _cos_kernel(emit, hi, lo), _sin_kernel(emit, hi, lo))
    rare = b.fcmp_unordered(">", emit.call("llvm.fabs", x), emit.num(_TRIG_RANGE), flags=emit.FLAGS)
    return b.select(negative, b.fneg(v), v), rare


@_with_fallback("sin", 1)
def sin64(emit, x):
    """``np.sin(x)`` for a float64 ``x`` (see above); x itself where |x| < 2^-27, as fdlibm's (and
    -0.0 for -0.0)."""
    v, rare = _sin_cos(emit, x, 0)
    return emit.b.select(emit.less(emit.call("llvm.fabs", x), emit.num(2.0 ** -27)), x, v), rare


@_with_fallback("cos", 1)
def cos64(emit, x):
    """``np.cos(x)`` for a float64 ``x`` (see above)."""
    return _sin_cos(emit, x, 1)


# atan: fdlibm's s_atan.c, its branches as selects: |x| reduced to |t| <= 7/16 by
# t = (x - c) / (1 + c x), c = 0, 1/2, 1, 3/2, or t = -1/x, atan x = atan c + atan t, and atan t
# by its minimax polynomial (the coefficients published there)
_ATAN_BOUNDS = (0.4375, 0.6875, 1.1875, 2.4375)
_ATAN_C = (0.0, 0.5, 1.0, 1.5, 0.0)
_ATAN_HI = (0.0, 4.63647609000806093515e-01, 7.85398163397448278999e-01, 9.82793723247329054082e-01,
            1.57079632679489655800e+00)
_ATAN_LO = (0.0, 2.26987774529616870924e-17, 3.06161699786838301793e-17, 1.39033110312309984516e-17,
            6.12323399573676603587e-17)
_ATAN = (3.33333333333329318027e-01, -1.99999999998764832476e-01, 1.42857142725034663711e-01,
         -1.11111104054623557880e-01, 9.09088713343650656196e-02, -7.69187620504482999495e-02,
         6.66107313738753120669e-02, -5.83357013379057348645e-02, 4.97687799461593236017e-02,
         -3.65315727442169155270e-02, 1.62858201153657823623e-02)
_PI, _PI_LO = 3.1415926535897931160e+00, 1.2246467991473531772e-16


def _atan_positive(emit, r):
    """atan(r) for r >= 0, inf included."""
    b, add, sub, mul, num = emit.b, emit.add, emit.sub, emit.mul, emit.num
    c = emit.pick(r, _ATAN_BOUNDS, _ATAN_C)
    far = b.not_(emit.less(r, num(_ATAN_BOUNDS[-1])))
    t = emit.div(b.select(far, num(-1.0), sub(r, c)), b.select(far, r, add(num(1.0), mul(c, r))))
    z = mul(t, t)
    w = mul(z, z)
    s = add(mul(z, _poly(emit, w, _ATAN[0::2])), mul(w, _poly(emit, w, _ATAN[1::2])))
    hi, lo = emit.pick(r, _ATAN_BOUNDS, _ATAN_HI), emit.pick(r, _ATAN_BOUNDS, _ATAN_LO)
    return sub(hi, sub(sub(mul(t, s), lo), t))


@_float64_function
def arctan64(emit, v):
    """``np.arctan(x)`` for a float64 ``x`` (see above)."""
    return emit.call("llvm.copysign", _atan_positive(emit, emit.call("llvm.fabs", v)), v)


@_with_fallback("atan2", 2)
def arctan2_64(emit, y, x):
    """``np.arctan2(y, x)`` for float64 ``y`` and ``x``: atan |y / x| (above), moved to the
    quadrant as fdlibm's e_atan2.c does. Zeros, infinities, NaN and quotients beyond 2^+-60 take
    the C library's."""
    b = emit.b
    r = emit.div(emit.call("llvm.fabs", y), emit.call("llvm.fabs", x))
    rare = b.or_(b.fcmp_unordered("<=", r, emit.num(2.0 ** -60), flags=emit.FLAGS),
                 b.fcmp_unordered(">=", r, emit.num(2.0 ** 60), flags=emit.FLAGS))
    z = _atan_positive(emit, r)
    z = b.select(emit.less(x, emit.num(0.0)), emit.sub(emit.num(_PI), emit.sub(z, emit.num(_PI_LO))), z)
    return emit.call("llvm.copysign", z, y), rare


# The adjoint sweep of a gradient runs with subnormal numbers flushed to zero, as XLA's CPU
# client runs all its code (and TensorFlow its threads). An adjoint that decays step by step (a
# backward induction, a recurrence with a factor below one) reaches the subnormal range and
# stays there: on x86 each operation on a subnormal number costs a micro-code assist of about a
# hundred cycles. Measured: binomial_option's gradient 59 -> 20 ms, durbin's 10.1 -> 7.9 ms.
# Only adjoint values below 2.2e-308 in magnitude change (to zero); the forward sweep, and so
# every value a gradient call returns besides the gradient, keeps IEEE arithmetic. The SSE
# control register is read and written by LLVM's x86 intrinsics; elsewhere both functions do
# nothing (the mode stays IEEE).
_FLUSH_BITS = 0x8040      # MXCSR: flush to zero (FTZ, bit 15) and denormals are zero (DAZ, bit 6)
_X86 = platform.machine().lower() in ("x86_64", "amd64", "i686", "x86")


def _fence(builder, value=None):
    """An empty instruction LLVM may not move memory accesses across (it clobbers memory) nor
    reorder with the control register's reads and writes (it has side effects); with ``value``,
    one that takes a float in a register and gives it back as a value LLVM cannot see through:
    what computes it stays before the fence."""
    if value is None:
        builder.asm(ir.FunctionType(ir.VoidType(), []), "", "~{memory}", [], True)
        return None
    return builder.asm(ir.FunctionType(value.type, [value.type]), "", "=x,0,~{memory}", [value], True)


def _csr(builder, intrinsic, slot):
    i8p = ir.IntType(8).as_pointer()
    fn = builder.module.declare_intrinsic(intrinsic, fnty=ir.FunctionType(ir.VoidType(), [i8p]))
    builder.call(fn, [builder.bitcast(slot, i8p)])


@numba.extending.intrinsic
def _fp_mode(typingctx, mode):
    """The floating-point control word before the call. ``mode`` says what it becomes: ``True``
    that word with the flush bits set, an int32 that word itself, ``None`` unchanged."""
    def codegen(context, builder, signature, args):
        i32 = ir.IntType(32)
        if not _X86:
            return ir.Constant(i32, 0)
        _fence(builder)
        slot = cgutils.alloca_once(builder, i32)
        _csr(builder, "llvm.x86.sse.stmxcsr", slot)
        old = builder.load(slot)
        kind = signature.args[0]
        if not isinstance(kind, numba.types.NoneType):
            builder.store(builder.or_(old, ir.Constant(i32, _FLUSH_BITS)) if isinstance(kind, numba.types.Boolean)
                          else args[0], slot)
            _csr(builder, "llvm.x86.sse.ldmxcsr", slot)
        return old
    if not (isinstance(mode, (numba.types.Boolean, numba.types.NoneType))
            or isinstance(mode, numba.types.Integer) and mode.bitwidth == 32):
        return None
    return numba.types.int32(mode), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def flush_subnormals():
    """Flush subnormal results and operands to zero from here on; returns the mode to restore."""
    return _fp_mode(True)


@numba.njit(cache=True, nogil=True, inline="always")
def restore_fp_mode(mode):
    """Put back the floating-point mode ``flush_subnormals`` or ``fp_mode`` returned."""
    _fp_mode(np.int32(mode))


@numba.njit(cache=True, nogil=True)
def fp_mode():
    """The floating-point mode now (0 where it is not read: not x86)."""
    return _fp_mode(None)


@numba.extending.intrinsic
def _held(typingctx, x):
    """``x`` through ``_fence`` (each part of a complex number)."""
    def codegen(context, builder, signature, args):
        if not _X86:
            return args[0]
        if isinstance(signature.args[0], numba.types.Complex):
            parts = [_fence(builder, builder.extract_value(args[0], k)) for k in range(2)]
            return builder.insert_value(builder.insert_value(args[0], parts[0], 0), parts[1], 1)
        return _fence(builder, args[0])
    if not isinstance(x, (numba.types.Float, numba.types.Complex)):
        return None
    return x(x), codegen


@numba.njit(cache=True, nogil=True, inline="always")
def held(x):
    """``x``, computed before whatever follows (LLVM does not tie floating-point arithmetic to
    the control register): a forward value the adjoint sweep or the caller reads after the mode
    changed is computed in the forward sweep's mode."""
    return _held(x)
