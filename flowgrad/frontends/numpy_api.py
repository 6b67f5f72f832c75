"""The frontend's op table: NumPy, ``math`` and builtin functions and array methods, each
lowered to IR expressions (elementwise) or Calls (everything else)."""
from __future__ import annotations

import builtins
import functools
import math
import sys
import types

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import (BOOL, CASTS, ELEMENTWISE, F64, I64, Assign, Call, Const, Expr, NewAxis, Read, Ref,
                       const_value, is_weak, op, same_expr, scalar)
from . import indexing

# ---------------------------------------------------------------- elementwise


_UFUNCS = {
    np.exp: "exp", np.expm1: "expm1", np.log: "log", np.log1p: "log1p", np.log2: "log2",
    np.log10: "log10", np.sqrt: "sqrt", np.sin: "sin", np.cos: "cos", np.tan: "tan",
    np.arcsin: "arcsin", np.arccos: "arccos", np.arctan: "arctan", np.sinh: "sinh",
    np.cosh: "cosh", np.tanh: "tanh", np.arcsinh: "arcsinh", np.arccosh: "arccosh",
    np.arctanh: "arctanh", np.exp2: "exp2", np.cbrt: "cbrt", np.logaddexp: "logaddexp", np.fabs: "abs", np.abs: "abs", np.sign: "sign", np.floor: "floor",
    np.ceil: "ceil", np.square: "square", np.negative: "negative", np.logical_not: "logical_not",
    np.isnan: "isnan", np.isfinite: "isfinite", np.round: "round", np.rint: "round",
    np.add: "add", np.subtract: "subtract", np.multiply: "multiply", np.divide: "divide",
    np.true_divide: "divide", np.power: "power", np.maximum: "maximum", np.minimum: "minimum",
    np.fmax: "maximum", np.fmin: "minimum", np.arctan2: "arctan2", np.hypot: "hypot",
    np.floor_divide: "floor_divide", np.mod: "mod", np.less: "less", np.less_equal: "less_equal",
    np.greater: "greater", np.greater_equal: "greater_equal", np.equal: "equal",
    np.not_equal: "not_equal", np.logical_and: "logical_and", np.logical_or: "logical_or",
    np.conjugate: "conj",
}
_MATH = {
    math.exp: "exp", math.expm1: "expm1", math.log1p: "log1p", math.sqrt: "sqrt", math.sin: "sin",
    math.cos: "cos", math.tan: "tan", math.asin: "arcsin", math.acos: "arccos", math.atan: "arctan",
    math.sinh: "sinh", math.cosh: "cosh", math.tanh: "tanh", math.fabs: "abs", math.atan2: "arctan2",
    math.hypot: "hypot", math.floor: "floor", math.ceil: "ceil", math.log2: "log2", math.log10: "log10",
    math.asinh: "arcsinh", math.acosh: "arccosh", math.atanh: "arctanh", math.cbrt: "cbrt", math.exp2: "exp2",
    math.lgamma: "gammaln",
}


def _elementwise(fe, name, args, loc):
    if all(not isinstance(a, (Expr, np.ndarray)) for a in args):
        return getattr(np, name if name != "abs" else "absolute")(*args).item()
    return op(name, *(fe.to_expr(a, loc) for a in args))


# ---------------------------------------------------------------- reductions


def axis_index(axis, ndim, loc):
    """``axis`` (negative counting from the end) as a position in ``ndim`` axes; NumPy's error
    outside them."""
    if isinstance(axis, Expr):
        raise unsupported(loc, "an axis known only at run time", "pass axis as a constant")
    a = int(axis)
    if not -ndim <= a < ndim:
        raise FlowgradError(f"{loc}: axis {a} is out of bounds for array of dimension {ndim}")
    return a % ndim


def _axes(axis, ndim, loc):
    if axis is None:
        return None
    axes = axis if isinstance(axis, (tuple, list)) else (axis,)
    out = tuple(sorted(axis_index(a, ndim, loc) for a in axes))
    if len(set(out)) != len(out):
        raise FlowgradError(f"{loc}: duplicate value in 'axis'")
    return out


def reduce(fe, name, x, axis=None, keepdims=False, loc=None, dtype=None):
    x = fe.to_expr(x, loc)
    ndim = len(x.shape)
    axes = _axes(axis, ndim, loc)
    red = tuple(range(ndim)) if axes is None else axes
    shape = tuple((Const(1) if k in red else d) for k, d in enumerate(x.shape) if keepdims or k not in red)
    if name == "mean":
        total = reduce(fe, "sum", x, axis, keepdims, loc)
        count = Const(1)
        for k in red:
            count = count * x.shape[k]
        return op("divide", total, op("float64", count) if not isinstance(count, Const) else float(count.value))
    if not isinstance(x, Read):
        x = fe.materialize(x, "t", loc)
    out_dtype = x.dtype
    if name in ("sum", "prod") and x.dtype.kind in "bi":
        out_dtype = I64
    if name in ("argmax", "argmin"):
        out_dtype = I64
    out = fe.container(name, out_dtype, shape)
    attrs = {"axis": axes, "keepdims": bool(keepdims)}
    if name in ("argmax", "argmin"):
        if axes is not None and len(axes) != 1:
            raise unsupported(loc, f"{name} over several axes", "pass one axis")
        attrs = {"axis": None if axes is None else axes[0]}
        if keepdims:
            raise unsupported(loc, f"{name} with keepdims", "insert the axis with np.newaxis")
    fe.emit(Call(name, [x], [out], attrs, loc=loc))
    return Read(Ref(out) if out.ndim else Ref(out, ()))


def _reduction(name):
    def handler(fe, loc, a, axis=None, keepdims=False, out=None, dtype=None, **_):
        if out is not None:
            raise unsupported(loc, f"np.{name}(out=...)", "assign the result instead")
        return reduce(fe, name, a, axis, keepdims, loc)
    return handler


# ---------------------------------------------------------------- linear algebra


def matmul(fe, a, b, loc):
    a, b = fe.to_expr(a, loc), fe.to_expr(b, loc)
    if a.shape == () or b.shape == ():
        raise FlowgradError(f"{loc}: matmul operands must be arrays, not scalars")
    # one float dtype for both operands (BLAS, and Numba's np.dot, take no mixed or integer ones);
    # an integer or boolean product is computed in float64 (exact below 2**53) and cast back
    result = np.result_type(a.dtype, b.dtype)
    dt = result if result.kind in "fc" else np.dtype(np.float64)
    a, b = (e if e.dtype == dt else op(dt.name, e) for e in (a, b))
    a = a if isinstance(a, Read) else fe.materialize(a, "t", loc)
    b = b if isinstance(b, Read) else fe.materialize(b, "t", loc)
    sa, sb = a.shape, b.shape
    ka = sa[-1]
    kb = sb[0] if len(sb) == 1 else sb[-2]
    if const_value(ka) is not None and const_value(kb) is not None and const_value(ka) != const_value(kb):
        raise FlowgradError(f"{loc}: matmul: inner dimensions differ ({const_value(ka)} vs {const_value(kb)})")
    if len(sa) == 1 and len(sb) == 1:
        shape = ()
    elif len(sa) == 1:
        shape = sb[:-2] + sb[-1:]
    elif len(sb) == 1:
        shape = sa[:-1]
    else:
        from ..ir.core import broadcast_shapes
        shape = broadcast_shapes(sa[:-2], sb[:-2]) + (sa[-2], sb[-1])
    out = fe.container("matmul", dt, shape)
    fe.emit(Call("matmul", [a, b], [out], loc=loc))
    product = Read(Ref(out) if out.ndim else Ref(out, ()))
    return product if result == dt else op(result.name if result.name in CASTS else "int64", product)


def _dot(fe, loc, a, b, out=None):
    ea, eb = fe.to_expr(a, loc), fe.to_expr(b, loc)
    if ea.shape == () or eb.shape == ():
        return op("multiply", ea, eb)
    if len(ea.shape) > 2 or len(eb.shape) > 2:
        raise unsupported(loc, "np.dot of arrays with more than two dimensions", "use np.einsum or np.matmul")
    return matmul(fe, ea, eb, loc)


def _outer(fe, loc, a, b, out=None):
    ea, eb = _ravel(fe, loc, a), _ravel(fe, loc, b)
    ea = ea if isinstance(ea, Read) else fe.materialize(ea, "t", loc)
    eb = eb if isinstance(eb, Read) else fe.materialize(eb, "t", loc)
    left = Read(Ref(ea.ref.container, list(ea.ref.items) + [NewAxis()], ea.ref.perm)) \
        if ea.ref.perm is None else indexing.getitem(fe, ea, (slice(None), None), loc)
    right = indexing.getitem(fe, eb, (None, slice(None)), loc)
    return op("multiply", left, right)


def _einsum(fe, loc, subscripts, *operands, optimize=None, **_):
    if not isinstance(subscripts, str):
        raise unsupported(loc, "np.einsum without a subscripts string", "pass 'ij,jk->ik'-style subscripts")
    ops = [fe.to_expr(o, loc) for o in operands]
    ops = [o if isinstance(o, Read) else fe.materialize(o, "t", loc) for o in ops]
    spec = subscripts.replace(" ", "")
    if "..." in spec:
        raise unsupported(loc, "np.einsum with ellipsis", "spell out every index")
    if "->" not in spec:
        ins = spec.split(",")
        letters = "".join(ins)
        spec = spec + "->" + "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    ins, outs = spec.split("->")
    terms = ins.split(",")
    if len(terms) != len(ops):
        raise FlowgradError(f"{loc}: einsum subscripts name {len(terms)} operands, got {len(ops)}")
    dims = {}
    for t, o in zip(terms, ops):
        if len(t) != len(o.shape):
            raise FlowgradError(f"{loc}: einsum operand '{t}' has rank {len(o.shape)}")
        for c, d in zip(t, o.shape):
            if c not in dims or const_value(dims[c]) == 1:
                dims[c] = d
    gemm = _einsum_as_matmul(fe, terms, outs, ops, loc)
    if gemm is not None:
        return gemm
    out = fe.container("einsum", np.result_type(*[o.dtype for o in ops]), tuple(dims[c] for c in outs))
    fe.emit(Call("einsum", ops, [out], {"subscripts": spec}, loc=loc))
    return Read(Ref(out) if out.ndim else Ref(out, ()))


def _einsum_as_matmul(fe, terms, outs, ops, loc):
    """A two-operand einsum contracting one index against a matrix ('nhwc,cf->nhwf') is a matrix
    product of transposed views, which stays a BLAS call (one GEMM) on every backend."""
    if len(terms) != 2:
        return None
    (ta, tb), (a, b) = terms, ops
    if len(tb) != 2 or any(len(set(t)) != len(t) for t in terms) or len(set(outs)) != len(outs):
        return None
    shared = [c for c in ta if c in tb]
    if len(shared) != 1 or shared[0] in outs:
        return None
    c = shared[0]
    free_a = [x for x in ta if x != c]
    free_b = [x for x in tb if x != c]
    if sorted(free_a + free_b) != sorted(outs) or not free_a:
        return None
    a2 = _transpose(fe, loc, a, [ta.index(x) for x in free_a] + [ta.index(c)])
    b2 = _transpose(fe, loc, b, [tb.index(c), tb.index(free_b[0])])
    prod = matmul(fe, a2, b2, loc)
    have = free_a + free_b
    perm = [have.index(x) for x in outs]
    return prod if perm == list(range(len(perm))) else _transpose(fe, loc, prod, perm)


def _solve(fe, loc, a, b):
    a, b = fe.to_expr(a, loc), fe.to_expr(b, loc)
    a = a if isinstance(a, Read) else fe.materialize(a, "t", loc)
    b = b if isinstance(b, Read) else fe.materialize(b, "t", loc)
    if len(a.shape) != 2 or len(b.shape) not in (1, 2):
        raise unsupported(loc, "np.linalg.solve with batched operands", "solve one system per call")
    dt = np.result_type(a.dtype, b.dtype)
    dt = dt if dt.kind in "fc" else np.dtype(np.float64)
    a, b = (e if e.dtype == dt else fe.materialize(op(dt.name, e), "t", loc) for e in (a, b))
    out = fe.container("solve", dt, b.shape)
    fe.emit(Call("solve", [a, b], [out], loc=loc))
    return Read(Ref(out))


def _norm(fe, loc, x, ord=None, axis=None, keepdims=False):
    """np.linalg.norm: vector norms of any order; matrix norms 'fro', 1, -1, inf and -inf."""
    e = fe.to_expr(x, loc)
    e = op("abs", e) if e.dtype.kind == "c" else e        # a complex array's norms are its moduli's
    e = e if e.dtype.kind == "f" else op("float64", e)
    matrix = (axis is None and len(e.shape) == 2) or (isinstance(axis, tuple) and len(axis) == 2)
    if axis is None and len(e.shape) > 2 and ord is not None:
        raise FlowgradError(f"{loc}: Improper number of dimensions to norm.")
    if ord is None or (matrix and ord == "fro") or (not matrix and ord == 2):
        return op("sqrt", reduce(fe, "sum", op("multiply", e, e), axis, keepdims, loc))
    mag = op("abs", e)
    if matrix and ord in (1, -1, np.inf, -np.inf):
        rows, cols = axis if axis is not None else (0, 1)
        along = rows if ord in (1, -1) else cols            # 1: the largest column sum
        sums = reduce(fe, "sum", mag, along, True, loc)
        return reduce(fe, "max" if ord > 0 else "min", sums, axis, keepdims, loc)
    if matrix or isinstance(ord, str):
        raise unsupported(loc, f"np.linalg.norm with ord={ord!r}",
                          "use ord None, 'fro', 1, -1, inf or -inf for matrices, or write the formula")
    if ord in (np.inf, -np.inf):
        return reduce(fe, "max" if ord > 0 else "min", mag, axis, keepdims, loc)
    if ord == 0:
        return op("float64", reduce(fe, "sum", op("int64", op("not_equal", e, 0)), axis, keepdims, loc))
    if ord == 1:
        return reduce(fe, "sum", mag, axis, keepdims, loc)
    p = float(ord)
    return op("power", reduce(fe, "sum", op("power", mag, p), axis, keepdims, loc), 1.0 / p)


# ---------------------------------------------------------------- shapes and construction


def _shape_arg(fe, shape, loc):
    if isinstance(shape, (tuple, list)):
        dims = tuple(shape)
    else:
        dims = (shape,)
    out = []
    for d in dims:
        if isinstance(d, Expr):
            if d.shape != () or d.dtype.kind not in "iu":
                raise FlowgradError(f"{loc}: array dimensions must be integers")
            out.append(d)
        else:
            out.append(Const(int(d)))
    return tuple(out)


def _dtype_arg(dtype, default=F64):
    if dtype is None:
        return np.dtype(default)
    if dtype is float:
        return F64
    if dtype is int:
        return I64
    if dtype is bool:
        return BOOL
    return np.dtype(dtype)


def _filled(fe, loc, shape, fill, dtype):
    shape = _shape_arg(fe, shape, loc)
    c = fe.container("array", dtype, shape)
    if fill is not None:
        fe.emit(Assign(Ref(c) if c.ndim else Ref(c, ()), fe.to_expr(fill, loc), loc=loc))
    else:
        fe.emit(Assign(Ref(c) if c.ndim else Ref(c, ()), Const(0, dtype), loc=loc))
    return Read(Ref(c) if c.ndim else Ref(c, ()))


def _maker(fill):
    def handler(fe, loc, shape, dtype=None, order="C"):
        return _filled(fe, loc, shape, fill, _dtype_arg(dtype))
    return handler


def _ndarray(fe, loc, shape, dtype=float, buffer=None, offset=0, strides=None, order=None):
    """``np.ndarray(shape, dtype)``: an allocation, as ``np.empty``."""
    if buffer is not None or strides is not None:
        raise unsupported(loc, "np.ndarray(buffer=..., strides=...)", "allocate with np.empty and copy into it")
    return _filled(fe, loc, shape, None, _dtype_arg(dtype))


def _like_maker(fill):
    def handler(fe, loc, a, dtype=None, order="K", subok=True, shape=None):
        e = fe.to_expr(a, loc)
        return _filled(fe, loc, e.shape if shape is None else shape, fill, _dtype_arg(dtype, e.dtype))
    return handler


def _full(fe, loc, shape, fill_value, dtype=None, order="C"):
    v = fe.to_expr(fill_value, loc)
    return _filled(fe, loc, shape, v, _dtype_arg(dtype, v.dtype if not isinstance(v, Const) or not v.weak
                                                  else (F64 if v.dtype.kind == "f" else v.dtype)))


def _full_like(fe, loc, a, fill_value, dtype=None):
    e = fe.to_expr(a, loc)
    return _filled(fe, loc, e.shape, fill_value, _dtype_arg(dtype, e.dtype))


def _eye(fe, loc, N, M=None, k=0, dtype=None):
    n = fe.to_expr(N, loc)
    m = n if M is None else fe.to_expr(M, loc)
    c = fe.container("eye", _dtype_arg(dtype), (n, m))
    fe.emit(Call("eye", [], [c], {"n": n, "m": m, "k": int(k)}, loc=loc))
    return Read(Ref(c))


def _copy(fe, loc, a, order="K"):
    return fe.materialize(fe.to_expr(a, loc), "copy", loc)


def _array(fe, loc, obj, dtype=None, copy=True, order="K", ndmin=0):
    if isinstance(obj, (tuple, list)):
        e = stack_values(fe, list(obj), 0, loc)
    else:
        e = fe.to_expr(obj, loc)
    if dtype is not None:
        e = _astype(fe, loc, e, dtype)
    return fe.materialize(e, "array", loc)


def _asarray(fe, loc, obj, dtype=None, order=None):
    if isinstance(obj, Expr) and (dtype is None or _dtype_arg(dtype) == obj.dtype):
        return obj                  # NumPy returns the array itself
    return _array(fe, loc, obj, dtype)


def _astype(fe, loc, x, dtype, copy=True):
    dt = _dtype_arg(dtype)
    name = {np.dtype(np.float64): "float64", np.dtype(np.float32): "float32", I64: "int64",
            np.dtype(np.int32): "int32", BOOL: "bool", np.dtype(np.complex128): "complex128",
            np.dtype(np.complex64): "complex64"}.get(dt)
    if name is None:
        raise unsupported(loc, f"conversion to {dt}", "use float64, float32, complex128, complex64, int64, int32 "
                          "or bool")
    e = fe.to_expr(x, loc)
    if not copy and e.dtype == dt:
        return e                    # astype(..., copy=False) of the same dtype is the array itself
    return op(name, e)


def _transpose(fe, loc, a, axes=None):
    e = fe.to_expr(a, loc)
    if not isinstance(e, Read):
        e = fe.materialize(e, "t", loc)
    n = len(e.shape)
    axes = tuple(reversed(range(n))) if axes is None else tuple(axis_index(x, n, loc) for x in axes)
    if sorted(axes) != list(range(n)):
        raise FlowgradError(f"{loc}: axes {tuple(axes)} don't match the array's {n} dimensions")
    base = e.ref.perm or tuple(range(n))
    perm = tuple(base[p] for p in axes)
    return Read(Ref(e.ref.container, e.ref.items, None if perm == tuple(range(n)) else perm))


def _swapaxes(fe, loc, a, axis1, axis2):
    n = len(fe.to_expr(a, loc).shape)
    axes = list(range(n))
    axes[axis1], axes[axis2] = axes[axis2], axes[axis1]
    return _transpose(fe, loc, a, axes)


def _reshape(fe, loc, a, *shape, order="C", newshape=None):
    if newshape is not None:
        shape = (newshape,)
    if len(shape) == 1 and isinstance(shape[0], (tuple, list)):
        shape = tuple(shape[0])
    e = fe.to_expr(a, loc)
    dims = list(_shape_arg(fe, shape, loc))
    size = Const(1)
    for d in e.shape:
        size = size * d
    neg = [k for k, d in enumerate(dims) if const_value(d) == -1]
    if neg:
        rest = Const(1)
        for k, d in enumerate(dims):
            if k != neg[0]:
                rest = rest * d
        dims[neg[0]] = op("floor_divide", size, rest)
    total = Const(1)
    for d in dims:
        total = total * d
    if const_value(total) is not None and const_value(size) is not None and const_value(total) != const_value(size):
        raise FlowgradError(f"{loc}: cannot reshape an array of size {const_value(size)} into shape "
                            f"{tuple(const_value(d) for d in dims)}")
    if not isinstance(e, Read):
        e = fe.materialize(e, "t", loc)
    out = fe.container("reshape", e.dtype, tuple(dims))
    fe.emit(Call("reshape", [e], [out], {"shape": tuple(dims)}, loc=loc))
    indexing.stand_in(fe, out, e.ref.container, "the result of reshape/ravel", loc,
                      "reshape after the writes, or reshape a copy (np.copy(x).reshape(...)) to keep it apart")
    return Read(Ref(out))


def _ravel(fe, loc, a, order="C"):
    e = fe.to_expr(a, loc)
    if len(e.shape) == 1:
        return e
    size = Const(1)
    for d in e.shape:
        size = size * d
    return _reshape(fe, loc, e, (size,))


def _flip(fe, loc, m, axis=None):
    e = fe.to_expr(m, loc)
    n = len(e.shape)
    axes = range(n) if axis is None else _axes(axis, n, loc)
    idx = tuple(slice(None, None, -1) if k in axes else slice(None) for k in range(n))
    return indexing.getitem(fe, e, idx, loc)


def _roll(fe, loc, a, shift, axis=None):
    e = fe.to_expr(a, loc)
    if isinstance(shift, Expr) or isinstance(axis, tuple) or isinstance(shift, tuple):
        raise unsupported(loc, "np.roll with a run-time or multiple shift", "use a constant shift and one axis")
    if axis is None:
        flat = _roll(fe, loc, _ravel(fe, loc, e), shift, 0)
        return _reshape(fe, loc, flat, e.shape) if len(e.shape) != 1 else flat
    n = len(e.shape)
    axis = axis_index(axis, n, loc)
    size = const_value(e.shape[axis])
    if size is None:
        raise unsupported(loc, "np.roll along an axis of run-time length", "slice explicitly")
    s = int(shift) % size if size else 0
    c = fe.alloc("roll", e.dtype, e.shape, loc, covered=True)
    if not isinstance(e, Read):
        e = fe.materialize(e, "t", loc)

    def sl(start, stop):
        return tuple(slice(start, stop) if k == axis else slice(None) for k in range(n))
    if s == 0:
        fe.emit(Assign(Ref(c), e, loc=loc))
    else:
        fe.emit(Assign(indexing.view(Ref(c), sl(s, None), loc), indexing.getitem(fe, e, sl(None, size - s), loc),
                       loc=loc))
        fe.emit(Assign(indexing.view(Ref(c), sl(None, s), loc), indexing.getitem(fe, e, sl(size - s, None), loc),
                       loc=loc))
    return Read(Ref(c))


def _tri(name):
    def handler(fe, loc, m, k=0):
        e = fe.to_expr(m, loc)
        if not isinstance(e, Read):
            e = fe.materialize(e, "t", loc)
        c = fe.container(name, e.dtype, e.shape)
        fe.emit(Call(name, [e], [c], {"k": int(k)}, loc=loc))
        return Read(Ref(c))
    return handler


def _cumsum(fe, loc, a, axis=None, dtype=None, out=None):
    e = fe.to_expr(a, loc)
    if axis is None:
        e = _ravel(fe, loc, e)
        axis = 0
    if not isinstance(e, Read):
        e = fe.materialize(e, "t", loc)
    c = fe.container("cumsum", e.dtype, e.shape)
    fe.emit(Call("cumsum", [e], [c], {"axis": axis_index(axis, len(e.shape), loc)}, loc=loc))
    return Read(Ref(c))


def _where(fe, loc, cond, x=None, y=None):
    if x is None or y is None:
        raise unsupported(loc, "np.where with one argument", "use boolean masks or np.nonzero outside")
    return _elementwise(fe, "where", [cond, x, y], loc)


def _clip(fe, loc, a, a_min=None, a_max=None, **kw):
    a_min = kw.get("min", a_min)
    a_max = kw.get("max", a_max)
    e = fe.to_expr(a, loc)
    if a_min is not None:
        e = op("maximum", e, fe.to_expr(a_min, loc))
    if a_max is not None:
        e = op("minimum", e, fe.to_expr(a_max, loc))
    return e


def _add_at(fe, loc, a, indices, b):
    base = fe.to_expr(a, loc)
    if not isinstance(base, Read) or not base.ref.container.ndim:
        raise unsupported(loc, "np.add.at on a computed value", "apply it to a named array")
    idx = indices if isinstance(indices, tuple) else (indices,)
    indexing.check_writable(fe, base.ref.container, loc)
    spec, inputs, shape = indexing._gather_spec(fe, base, idx, loc)
    v = fe.to_expr(b, loc)
    indexing.check_value_dtype(v, base.ref.container, loc)
    indexing._check_value_shape(v.shape, shape, loc)
    if not isinstance(v, Const) and not (isinstance(v, Read) and len(v.shape) == len(shape) and all(
            same_expr(a, b) for a, b in zip(v.shape, shape))):
        # NumPy broadcasts the values to what the index picks; the call adds one per position
        c = fe.container("v", v.dtype, shape)
        fe.emit(Assign(Ref(c) if c.ndim else Ref(c, ()), v, loc=loc))
        v = Read(Ref(c) if c.ndim else Ref(c, ()))
    indexing.through_view(fe, base, loc, lambda whole: Call("add_at", [v] + inputs, [whole],
                                                           {"spec": spec, "value_shape": shape}, loc=loc))
    return None


def _arange(fe, loc, *args, dtype=None):
    vals = [fe.to_expr(a, loc) for a in args]
    if any(v.dtype.kind not in "iu" for v in vals):
        if all(isinstance(v, Const) for v in vals):      # np.arange(4.0): known when captured
            return fe.const_array(np.arange(*[v.value for v in vals], dtype=dtype))
        raise unsupported(loc, "np.arange with float bounds known only at run time",
                          "use integer bounds (and scale)")
    start, stop, step = (Const(0), vals[0], Const(1)) if len(vals) == 1 else \
        (vals[0], vals[1], vals[2] if len(vals) > 2 else Const(1))
    size = op("maximum", 0, op("floor_divide", stop - start + step - 1, step))
    c = fe.container("arange", I64, (size,))
    fe.emit(Call("arange", [start, stop, step], [c], loc=loc))
    out = Read(Ref(c))
    return op("float64", out) if dtype in (float, np.float64) else out


def _len(fe, loc, x):
    if isinstance(x, Expr):
        if x.shape == ():
            raise FlowgradError(f"{loc}: len() of a scalar")
        d = x.shape[0]
        return const_value(d) if const_value(d) is not None else d
    return len(x)


def _minmax(name, npname):
    def handler(fe, loc, *args, **kw):
        if len(args) == 1:
            x = args[0]
            if isinstance(x, Expr):
                return reduce(fe, npname, x, None, False, loc)
            return getattr(builtins, name)(x)
        if any(isinstance(a, Expr) for a in args):
            out = fe.to_expr(args[0], loc)
            for a in args[1:]:
                out = op("maximum" if name == "max" else "minimum", out, fe.to_expr(a, loc))
            return out
        return getattr(builtins, name)(*args)
    return handler


def _scalar_cast(kind, python):
    """``float(x)``/``int(x)``/``bool(x)`` (``python``: a Python scalar, weak in promotion), or
    ``np.float64(x)``/``np.int64(x)`` (a NumPy scalar, strong)."""
    def handler(fe, loc, x=0):
        if isinstance(x, Expr):
            if not python:             # np.float32(a) of an array is the array converted
                return op(kind, x)
            if x.shape != ():
                raise FlowgradError(f"{loc}: only size-1 arrays can be converted to a Python scalar")
            return _python_scalar(fe, op(kind, x), loc)
        return {"float64": float, "int64": int, "bool": bool}[kind](x) if python else CASTS[kind](x)
    return handler


def _python_scalar(fe, e, loc):
    """Scalar ``e`` held as a Python scalar holds it: weak in promotion (NEP 50)."""
    if not isinstance(e, Expr) or e.shape or is_weak(e) or not hasattr(fe, "frames"):
        return e
    c = fe.container("py", e.dtype, (), weak=True)
    fe.emit(Assign(Ref(c, ()), e, loc=loc))
    return Read(Ref(c, ()))


def _abs(fe, loc, x):
    return op("abs", x) if isinstance(x, Expr) else abs(x)


def _pow(fe, loc, a, b):
    return fe.binop("power", a, b, loc)


def _round(fe, loc, a, decimals=0):
    """np.round(x, decimals): NumPy scales by 10**decimals, rounds half to even, scales back."""
    if isinstance(decimals, Expr):
        raise unsupported(loc, "np.round with a run-time number of decimals", "pass decimals as a constant")
    decimals = int(decimals)
    if decimals == 0:
        return _elementwise(fe, "round", [a], loc)
    x = fe.to_expr(a, loc)
    if x.dtype.kind != "f":
        if decimals > 0:
            return x                       # integers have no decimals to round
        raise unsupported(loc, "np.round of integers to negative decimals", "round a float copy")
    scale = 10.0 ** decimals
    return op("divide", op("round", op("multiply", x, scale)), scale)


_FUNCTIONS = {
    np.round: _round, np.around: _round,
    np.sum: _reduction("sum"), np.prod: _reduction("prod"), np.mean: _reduction("mean"),
    np.max: _reduction("max"), np.min: _reduction("min"), np.amax: _reduction("max"),
    np.amin: _reduction("min"), np.argmax: _reduction("argmax"), np.argmin: _reduction("argmin"),
    np.matmul: lambda fe, loc, a, b: matmul(fe, a, b, loc), np.dot: _dot, np.outer: _outer,
    np.einsum: _einsum, np.transpose: _transpose, np.swapaxes: _swapaxes, np.reshape: _reshape,
    np.ravel: _ravel, np.flip: _flip, np.roll: _roll, np.triu: _tri("triu"), np.tril: _tri("tril"),
    np.cumsum: _cumsum, np.copy: _copy, np.array: _array, np.asarray: _asarray,
    np.empty: _maker(None), np.zeros: _maker(None), np.ones: _maker(1), np.ndarray: _ndarray,
    np.empty_like: _like_maker(None), np.zeros_like: _like_maker(None), np.ones_like: _like_maker(1),
    np.full: _full, np.full_like: _full_like, np.eye: _eye, np.identity: _eye,
    np.linalg.norm: _norm, np.linalg.solve: _solve, np.where: _where, np.clip: _clip,
    np.arange: _arange, np.float64: _scalar_cast("float64", False), np.int64: _scalar_cast("int64", False),
    np.float32: _scalar_cast("float32", False), np.int32: _scalar_cast("int32", False),
    np.bool_: _scalar_cast("bool", False),
    len: _len, max: _minmax("max", "max"), min: _minmax("min", "min"), abs: _abs,
    float: _scalar_cast("float64", True), int: _scalar_cast("int64", True), bool: _scalar_cast("bool", True),
    math.pow: _pow, pow: _pow, slice: lambda fe, loc, *bounds: slice(*bounds),
}
_ADD_AT = np.add.at


def call_function(fe, fn, args, kwargs, loc, name=None):
    """Lower a call to a library function."""
    label = name or getattr(fn, "__name__", repr(fn))
    if isinstance(fn, _BoundMethod):
        return call_method(fe, fn.obj, fn.name, args, kwargs, loc)
    if fn is _ADD_AT or (getattr(fn, "__self__", None) is np.add and getattr(fn, "__name__", "") == "at"):
        return _add_at(fe, loc, *args, **kwargs)
    try:
        handler = _FUNCTIONS.get(fn)
        if handler is None and "scipy" in sys.modules:
            handler = _scipy_functions().get(fn)
    except TypeError:
        handler = None
    if handler is not None:
        try:
            return handler(fe, loc, *args, **kwargs)
        except TypeError as exc:
            if "argument" in str(exc):
                raise unsupported(loc, f"call {label}(...) with these arguments", str(exc)) from None
            raise
    ufunc = _ufunc_name(fn)
    if ufunc is not None:
        return _ufunc_call(fe, ufunc, label, args, kwargs, loc)
    if fn is math.log:
        if len(args) == 2:
            return fe.binop("divide", _elementwise(fe, "log", [args[0]], loc), math.log(args[1]), loc)
        return _elementwise(fe, "log", args, loc)
    if fn in (math.floor, math.ceil):           # Python's are integers
        v = _elementwise(fe, _MATH[fn], args, loc)
        return _python_scalar(fe, op("int64", v), loc) if isinstance(v, Expr) else int(v)
    if fn in _MATH:                             # Python floats
        return _python_scalar(fe, _elementwise(fe, _MATH[fn], args, loc), loc)
    if fn is range:
        raise unsupported(loc, "range() outside a for statement", "use np.arange for an array of integers")
    if fn is print:
        raise unsupported(loc, "print()", "print results after the differentiated call")
    raise unsupported(loc, f"call to {label}",
                      "flowgrad supports NumPy array functions, math.* and plain Python helpers; "
                      "compute this outside the differentiated function")


def _ufunc_call(fe, name, label, args, kwargs, loc):
    """A NumPy ufunc: its value, or with ``out=`` (a keyword or the argument after the operands)
    that value written into ``out`` (where ``where=`` holds), which is what it returns: the
    right side first, as NumPy computes it (``np.sin(x, out=x)``)."""
    arity = ELEMENTWISE[name][0]
    out = kwargs.pop("out", None)
    where = kwargs.pop("where", True)
    dtype = kwargs.pop("dtype", None)
    if kwargs:
        raise unsupported(loc, f"keyword argument{'s' if len(kwargs) > 1 else ''} {', '.join(kwargs)} to {label}",
                          "pass the operands, and out=, where= or dtype= only")
    if len(args) > arity:
        if out is not None or len(args) > arity + 1:
            raise FlowgradError(f"{loc}: {label} takes {arity} operand{'s' if arity > 1 else ''} and out")
        args, out = args[:arity], args[arity]
    value = _elementwise(fe, name, args, loc)
    if dtype is not None:
        if np.dtype(dtype).name not in CASTS:
            raise unsupported(loc, f"{label}(..., dtype={np.dtype(dtype).name})", "use float64, float32, int64, int32 or bool")
        value = op(np.dtype(dtype).name, fe.to_expr(value, loc))
    if isinstance(out, tuple):
        if len(out) != 1:
            raise FlowgradError(f"{loc}: {label} has one output, out= gives {len(out)}")
        out = out[0]
    if out is None:
        if where is not True:
            raise unsupported(loc, f"{label}(..., where=...) without out=",
                              "give out= (NumPy leaves the other elements uninitialised), or use np.where")
        return value
    target = indexing._target(fe, out, loc)
    if not target.shape:
        raise FlowgradError(f"{loc}: out= must be an array")
    e = fe.to_expr(value, loc)
    if where is not True:
        e = op("where", fe.to_expr(where, loc), e, target)
    fe.write_ref(target.ref, e, loc)
    return target


def _ufunc_name(fn):
    try:
        return _UFUNCS.get(fn)
    except TypeError:
        return None


# ---------------------------------------------------------------- attributes and methods


_CONSTANT_MODULES = ("numpy", "math")


def get_attribute(fe, obj, attr, loc):
    if isinstance(obj, Expr):
        if attr == "shape":
            return tuple(const_value(d) if const_value(d) is not None else d for d in obj.shape)
        if attr == "ndim":
            return len(obj.shape)
        if attr == "size":
            size = Const(1)
            for d in obj.shape:
                size = size * d
            return const_value(size) if const_value(size) is not None else size
        if attr == "T":
            return _transpose(fe, loc, obj)
        if attr == "dtype":
            return obj.dtype
        if attr in ("real", "imag"):
            return numpy_complex.part(fe, obj, attr, loc)
        if attr in _METHODS:
            return _BoundMethod(obj, attr)
        raise unsupported(loc, f"array attribute .{attr}", "use NumPy functions on the array")
    if isinstance(obj, np.ndarray) and attr in _METHODS:      # a method of a module-level array
        return _BoundMethod(fe.to_expr(obj, loc), attr)
    try:
        value = getattr(obj, attr)
    except AttributeError:
        raise FlowgradError(f"{loc}: {type(obj).__name__} has no attribute {attr!r}") from None
    if isinstance(obj, types.ModuleType) and hasattr(fe, "global_reads") and \
            obj.__name__.split(".")[0] not in ("numpy", "math", "scipy", "builtins"):
        fe.global_reads.append((obj.__dict__, attr, value))       # a user module's setting
    return value


class _BoundMethod:
    def __init__(self, obj, name):
        self.obj, self.name = obj, name


def _method_reduction(name):
    def handler(fe, loc, x, axis=None, dtype=None, out=None, keepdims=False):
        return reduce(fe, name, x, axis, keepdims, loc)
    return handler


_METHODS = {
    "sum": _method_reduction("sum"), "prod": _method_reduction("prod"), "mean": _method_reduction("mean"),
    "max": _method_reduction("max"), "min": _method_reduction("min"),
    "argmax": _method_reduction("argmax"), "argmin": _method_reduction("argmin"),
    "copy": lambda fe, loc, x, order="C": _copy(fe, loc, x),
    "reshape": _reshape, "ravel": _ravel, "flatten": lambda fe, loc, x, order="C": _copy(fe, loc, _ravel(fe, loc, x)),
    "transpose": lambda fe, loc, x, *axes: _transpose(fe, loc, x, (axes[0] if len(axes) == 1 and isinstance(
        axes[0], (tuple, list)) else axes) or None),
    "astype": _astype, "dot": _dot, "cumsum": _cumsum, "clip": _clip,
    "swapaxes": _swapaxes, "round": _round,
    "item": lambda fe, loc, x: x if x.shape == () else indexing.getitem(fe, x, (0,) * len(x.shape), loc),
}


def call_method(fe, obj, name, args, kwargs, loc):
    handler = _METHODS.get(name)
    if handler is None:
        if name == "fill":
            fe.write_ref(obj.ref, args[0], loc)
            return None
        raise unsupported(loc, f"array method .{name}()", "use the NumPy function form")
    return handler(fe, loc, obj, *args, **kwargs)


from . import numpy_joins  # noqa: E402
from .numpy_joins import stack_values  # noqa: E402 (np.array of a list; and for the Python frontend)
from . import numpy_complex, numpy_composites, numpy_fft, numpy_linalg, numpy_order, numpy_statistics  # noqa: E402


@functools.lru_cache(maxsize=1)
def _scipy_functions():
    return {**numpy_order.scipy_functions(), **numpy_linalg.scipy_functions()}


for _more in (numpy_joins, numpy_composites, numpy_order, numpy_linalg, numpy_statistics, numpy_complex, numpy_fft):
    _FUNCTIONS.update(_more.FUNCTIONS)
    _METHODS.update(_more.METHODS)


__all__ = ["call_function", "call_method", "get_attribute", "stack_values", "scalar"]
