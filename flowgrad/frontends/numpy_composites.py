"""NumPy functions the frontend builds from operations the IR already has: statistics, shape
helpers, padding, diagonals, tensor products, determinants, polynomials and closeness tests
(sorting, interpolation, convolution and ``scipy.special`` are in ``numpy_order``).

Each one lowers to elementwise expressions, views, reductions, gathers and matrix products, so
both backends and the derivative rules cover it with nothing added. Each follows the formula
NumPy's own implementation uses (``var`` subtracts the mean and sums the squares, ``linspace``
scales an ``arange`` and writes ``stop`` last), so values agree to rounding.
"""
from __future__ import annotations

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import (BOOL, CASTS, Assign, Call, Const, Expr, Read, Ref, const_value, is_weak, op,
                       result_dtype)
from . import indexing
from .numpy_api import (_arange, _axes, axis_index, _copy, _dtype_arg, _einsum, _eye, _reshape, _shape_arg,
                        _solve, _transpose, reduce)
from .numpy_joins import _concatenate, stack_values


def _const_int(v, what, loc):
    if isinstance(v, Expr):
        if const_value(v) is None:
            raise unsupported(loc, f"{what} known only at run time", f"pass {what} as a constant")
        v = const_value(v)
    return int(v)


def _read(fe, e, loc):
    return e if isinstance(e, Read) else fe.materialize(e, "t", loc)


def _along(axis, ndim, item, rest=slice(None)):
    """An index tuple with ``item`` at ``axis`` and ``rest`` elsewhere."""
    return tuple(item if k == axis else rest for k in range(ndim))


def _count(x, axes):
    """The number of elements a reduction over ``axes`` (None: all) combines, as a float."""
    n = Const(1)
    for k, d in enumerate(x.shape):
        if axes is None or k in axes:
            n = n * d
    return float(const_value(n)) if const_value(n) is not None else op("float64", n)


def _size(x):
    n = Const(1)
    for d in x.shape:
        n = n * d
    return n


def _float(x):
    return x if x.dtype.kind == "f" else op("float64", x)


# ---------------------------------------------------------------- statistics


def _var(fe, loc, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, correction=None, **kw):
    if out is not None or kw:
        raise unsupported(loc, "np.var/np.std with out=, where= or mean=", "compute it from np.mean and np.sum")
    x = fe.to_expr(a, loc)
    x = _float(x) if dtype is None else op(_dtype_arg(dtype).name, x)
    axes = _axes(axis, len(x.shape), loc)
    d = op("subtract", x, reduce(fe, "mean", x, axis, True, loc))
    ddof = ddof if correction is None else correction
    dof = op("maximum", op("subtract", _count(x, axes), ddof), 0.0)
    return op("divide", reduce(fe, "sum", op("multiply", d, d), axis, keepdims, loc),
              const_value(dof) if const_value(dof) is not None else dof)


def _std(fe, loc, a, *args, **kwargs):
    """The square root of ``np.var``. Where the variance is 0 (all values equal) its derivative
    is taken as 0, as central differences find (the standard deviation has a kink there, and
    the chain rule would multiply sqrt's infinite slope by zero)."""
    v = _var(fe, loc, a, *args, **kwargs)
    v = v if isinstance(v, Read) else fe.materialize(v, "var", loc)
    zero = op("equal", v, 0.0)
    return op("where", zero, 0.0, op("sqrt", op("where", zero, 1.0, v)))     # no 1 / sqrt(0), not even masked


def _average(fe, loc, a, axis=None, weights=None, returned=False, *, keepdims=False):
    if returned:
        raise unsupported(loc, "np.average(returned=True)", "compute the sum of the weights with np.sum")
    x = fe.to_expr(a, loc)
    if weights is None:
        return reduce(fe, "mean", x, axis, keepdims, loc)
    w = fe.to_expr(weights, loc)
    if len(w.shape) != len(x.shape):
        if len(w.shape) != 1 or axis is None or isinstance(axis, tuple):
            raise FlowgradError(f"{loc}: np.average: weights of another shape than a need one axis and "
                                "must be 1-D")
        w = indexing.getitem(fe, w, _along(axis_index(axis, len(x.shape), loc), len(x.shape), slice(None), None), loc)
    total = reduce(fe, "sum", op("multiply", x, w), axis, keepdims, loc)
    return op("divide", total, reduce(fe, "sum", w, axis, keepdims, loc))


def _ptp(fe, loc, a, axis=None, out=None, keepdims=False):
    x = fe.to_expr(a, loc)
    return op("subtract", reduce(fe, "max", x, axis, keepdims, loc), reduce(fe, "min", x, axis, keepdims, loc))


def _nan_zero(x):
    return op("where", op("isnan", x), 0.0, x) if x.dtype.kind == "f" else x


def _nansum(fe, loc, a, axis=None, dtype=None, out=None, keepdims=False):
    return reduce(fe, "sum", _nan_zero(fe.to_expr(a, loc)), axis, keepdims, loc)


def _nanmean(fe, loc, a, axis=None, dtype=None, out=None, keepdims=False):
    x = fe.to_expr(a, loc)
    count = reduce(fe, "sum", op("int64", op("logical_not", op("isnan", x))), axis, keepdims, loc)
    dt = x.dtype.name if x.dtype.kind == "f" else "float64"
    return op("divide", reduce(fe, "sum", _nan_zero(x), axis, keepdims, loc), op(dt, count))


def _counts(test):
    """np.count_nonzero, np.any, np.all: counts of the elements that are not zero (that are zero)."""
    def handler(fe, loc, a, axis=None, out=None, keepdims=False, **_):
        if out is not None:
            raise unsupported(loc, f"np.{test}(out=...)", "assign the result instead")
        x = fe.to_expr(a, loc)
        hits = reduce(fe, "sum", op("int64", op("equal" if test == "all" else "not_equal", x, 0)),
                      axis, keepdims, loc)
        return {"count_nonzero": hits, "any": op("greater", hits, 0), "all": op("equal", hits, 0)}[test]
    return handler


# ---------------------------------------------------------------- elementwise


def _sinc(fe, loc, x):
    if not isinstance(x, (Expr, np.ndarray, list, tuple)):
        return float(np.sinc(x))
    e = fe.to_expr(x, loc)
    zero = op("equal", e, 0)
    safe = op("multiply", op("where", zero, 1.0, e), np.pi)      # no 0/0, not even in the adjoint
    return op("where", zero, 1.0, op("divide", op("sin", safe), safe))


def _heaviside(fe, loc, x1, x2):
    x, h0 = fe.to_expr(x1, loc), fe.to_expr(x2, loc)
    dt = np.result_type(*[{"f": 0.0, "i": 0, "b": False}.get(e.dtype.kind, 0) if is_weak(e) else e.dtype
                          for e in (x, h0)])
    dt = dt if dt.kind == "f" else np.dtype(np.float64)
    step = op("where", op("less", x, 0), 0.0, op("where", op("greater", x, 0), 1.0, h0))
    step = op("where", op("isnan", x), x, step) if x.dtype.kind == "f" else step
    return op(dt.name, step)


def _trunc(fe, loc, x):
    e = fe.to_expr(x, loc)
    return e if e.dtype.kind in "biu" else op("where", op("less", e, 0), op("ceil", e), op("floor", e))


def _scaled(factor):
    def handler(fe, loc, x):
        e = fe.to_expr(x, loc)
        return op("multiply", _float(e), factor)
    return handler


def _reciprocal(fe, loc, x):
    e = fe.to_expr(x, loc)
    if e.dtype.kind != "f":
        raise unsupported(loc, "np.reciprocal of integers (which truncates to 0)", "use 1.0 / x")
    return op("divide", 1.0, e)


def _float_power(fe, loc, a, b):
    return op("power", op("float64", fe.to_expr(a, loc)), op("float64", fe.to_expr(b, loc)))


def _nan_to_num(fe, loc, x, copy=True, nan=0.0, posinf=None, neginf=None):
    x = fe.to_expr(x, loc)
    e = x
    if e.dtype.kind == "f":
        big = float(np.finfo(e.dtype).max)
        e = op("where", op("isnan", e), nan, e)
        e = op("where", op("equal", e, np.inf), big if posinf is None else posinf, e)
        e = op("where", op("equal", e, -np.inf), -big if neginf is None else neginf, e)
    if not copy and isinstance(x, Read) and x.shape:
        fe.write_ref(x.ref, e, loc)
        return x
    return fe.materialize(e, "nan_to_num", loc)


def _isclose(fe, loc, a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    x, y = fe.to_expr(a, loc), fe.to_expr(b, loc)
    close = op("logical_and", op("less_equal", op("abs", op("subtract", x, y)),
                                 op("add", atol, op("multiply", rtol, op("abs", y)))), op("isfinite", y))
    close = op("logical_or", close, op("equal", x, y))
    if equal_nan:
        close = op("logical_or", close, op("logical_and", op("isnan", x), op("isnan", y)))
    return close


def _allclose(fe, loc, a, b, rtol=1e-05, atol=1e-08, equal_nan=False):
    return _counts("all")(fe, loc, _isclose(fe, loc, a, b, rtol, atol, equal_nan))


def _select(fe, loc, condlist, choicelist, default=0):
    if len(condlist) != len(choicelist):
        raise FlowgradError(f"{loc}: np.select: condlist and choicelist differ in length")
    out = fe.to_expr(default, loc)
    for c, v in reversed(list(zip(condlist, choicelist))):
        out = op("where", fe.to_expr(c, loc), fe.to_expr(v, loc), out)
    return out


def _polyval(fe, loc, p, x):
    coeffs = list(p) if isinstance(p, (list, tuple)) else None
    if coeffs is None:
        e = fe.to_expr(p, loc)
        if len(e.shape) != 1:
            raise FlowgradError(f"{loc}: np.polyval: the coefficients must be 1-D")
        coeffs = [indexing.getitem(fe, e, (k,), loc) for k in range(_const_int(e.shape[0], "len(p)", loc))]
    ex = fe.to_expr(x if isinstance(x, Expr) else np.float64(x) if isinstance(x, float) else x, loc)
    dt = np.result_type(ex.dtype, *[fe.to_expr(c, loc).dtype if isinstance(c, Expr) else np.asarray(c).dtype
                                    for c in coeffs])
    y = op(dt.name, op("multiply", ex, 0))
    for c in coeffs:
        y = op("add", op("multiply", y, ex), fe.to_expr(c, loc) if isinstance(c, Expr) else np.asarray(c)[()])
    return op(dt.name, y)


# ---------------------------------------------------------------- shapes


def _expand_dims(fe, loc, a, axis):
    e = fe.to_expr(a, loc)
    n = len(e.shape) + (len(axis) if isinstance(axis, (tuple, list)) else 1)
    axes = set(_axes(axis, n, loc))
    if not e.shape:                            # a 0-d value: a new (1, ..., 1) array
        return _broadcast_copy(fe, loc, e, (Const(1),) * n)
    return indexing.getitem(fe, e, tuple(None if k in axes else slice(None) for k in range(n)), loc)


def _squeeze(fe, loc, a, axis=None):
    e = fe.to_expr(a, loc)
    n = len(e.shape)
    if axis is None:
        if any(const_value(d) is None for d in e.shape):
            raise unsupported(loc, "np.squeeze of an array whose shape is known only at run time",
                              "name the axes to remove: np.squeeze(a, axis=...)")
        axes = {k for k, d in enumerate(e.shape) if const_value(d) == 1}
    else:
        axes = set(_axes(axis, n, loc))
        for k in axes:
            if const_value(e.shape[k]) not in (1, None):
                raise FlowgradError(f"{loc}: cannot select an axis to squeeze out which has size not equal "
                                    f"to one (axis {k} has length {const_value(e.shape[k])})")
            if const_value(e.shape[k]) is None:
                raise unsupported(loc, "np.squeeze of an axis whose length is known only at run time",
                                  "index it with 0 instead")
    return indexing.getitem(fe, e, tuple(0 if k in axes else slice(None) for k in range(n)), loc)


def _atleast(ndim):
    def handler(fe, loc, *arys):
        out = []
        for a in arys:
            e = fe.to_expr(a, loc)
            k = len(e.shape)
            if k == 0:         # NumPy: a scalar becomes a new (1, 1) array, a vector a (1, n) view
                e = _broadcast_copy(fe, loc, e, (Const(1),) * ndim)
            elif k < ndim:
                e = indexing.getitem(fe, e, (None,) * (ndim - k) + (slice(None),) * k, loc)
            out.append(e)
        return out[0] if len(out) == 1 else out
    return handler


def _broadcast_copy(fe, loc, array, shape):
    """A new array of ``shape`` holding ``array`` broadcast to it."""
    e = fe.to_expr(array, loc)
    dims = _shape_arg(fe, shape, loc)
    indexing._check_value_shape(e.shape, dims, loc)
    c = fe.alloc("broadcast", e.dtype, dims, loc, covered=True)
    fe.emit(Assign(Ref(c) if c.ndim else Ref(c, ()), e, loc=loc))
    return Read(Ref(c) if c.ndim else Ref(c, ()))


def _broadcast_to(fe, loc, array, shape, subok=False):
    """np.broadcast_to: NumPy's result is a read-only view; flowgrad's copy stands in for it, so a
    later write into the source followed by a read of the result is refused, not missed."""
    e = fe.to_expr(array, loc)
    out = _broadcast_copy(fe, loc, e, shape)
    if isinstance(e, Read):
        indexing.stand_in(fe, out.ref.container, e.ref.container, "the result of np.broadcast_to", loc,
                          "broadcast after the writes, or copy first (np.broadcast_to(x.copy(), shape))")
    return out


def _moveaxis(fe, loc, a, source, destination):
    e = fe.to_expr(a, loc)
    n = len(e.shape)
    src = [axis_index(s, n, loc) for s in (source if isinstance(source, (tuple, list)) else (source,))]
    dst = [axis_index(d, n, loc) for d in (destination if isinstance(destination, (tuple, list)) else (destination,))]
    if len(src) != len(dst) or len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise FlowgradError(f"{loc}: np.moveaxis: source and destination must be distinct axes, as many of each")
    order = [k for k in range(n) if k not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return _transpose(fe, loc, e, order)


def _column_stack(fe, loc, tup):
    exprs = [fe.to_expr(a, loc) for a in tup]
    exprs = [indexing.getitem(fe, e, (slice(None), None), loc) if len(e.shape) < 2 else e for e in exprs]
    return _concatenate(fe, loc, exprs, 1)


def _split_points(fe, e, sections, axis, loc, even):
    n = e.shape[axis]
    if isinstance(sections, (list, tuple, np.ndarray)):
        return [0] + [int(s) for s in sections] + [None]
    k = _const_int(sections, "the number of sections", loc)
    if k <= 0:
        raise FlowgradError(f"{loc}: number sections must be larger than 0.")
    size = _const_int(n, "the length of the split axis", loc)
    if even and size % k:
        raise FlowgradError(f"{loc}: array split does not result in an equal division ({size} into {k})")
    each, extra = divmod(size, k)
    points, at = [0], 0
    for j in range(k):
        at += each + (1 if j < extra else 0)
        points.append(at)
    return points


def _splitter(even):
    def handler(fe, loc, ary, indices_or_sections, axis=0):
        e = fe.to_expr(ary, loc)
        axis = axis_index(axis, len(e.shape), loc)
        pts = _split_points(fe, e, indices_or_sections, axis, loc, even)
        return [indexing.getitem(fe, e, _along(axis, len(e.shape), slice(lo, hi)), loc)
                for lo, hi in zip(pts[:-1], pts[1:])]
    return handler


def _tile(fe, loc, A, reps):
    e = fe.to_expr(A, loc)
    reps = [_const_int(r, "reps", loc) for r in (reps if isinstance(reps, (tuple, list)) else (reps,))]
    if any(r < 0 for r in reps):
        raise FlowgradError(f"{loc}: np.tile: negative dimensions are not allowed (reps {tuple(reps)})")
    nd = max(len(reps), len(e.shape))
    reps = [1] * (nd - len(reps)) + reps
    e = indexing.getitem(fe, e, (None,) * (nd - len(e.shape)) + (slice(None),) * len(e.shape), loc)
    if all(r == 1 for r in reps):
        return _copy(fe, loc, e)
    # (r0, n0, r1, n1, ...) filled by broadcasting, then merged pairwise
    spread = indexing.getitem(fe, e, tuple(x for _ in range(nd) for x in (None, slice(None))), loc)
    big = _broadcast_copy(fe, loc, spread, tuple(x for r, d in zip(reps, e.shape) for x in (Const(r), d)))
    return _reshape(fe, loc, big, tuple(Const(r) * d for r, d in zip(reps, e.shape)))


def _repeat(fe, loc, a, repeats, axis=None):
    e = fe.to_expr(a, loc)
    if not isinstance(repeats, (int, np.integer)) and const_value(repeats) is None:
        raise unsupported(loc, "np.repeat with an array of repeats", "repeat by one constant count")
    r = _const_int(repeats, "repeats", loc)
    if r < 0:
        raise FlowgradError(f"{loc}: np.repeat: negative dimensions are not allowed ({r} repeats)")
    if not e.shape:
        return _broadcast_copy(fe, loc, e, (Const(r),))
    if axis is None:
        e, axis = _reshape(fe, loc, e, (_size(e),)) if len(e.shape) != 1 else e, 0
    nd = len(e.shape)
    axis = axis_index(axis, nd, loc)
    spread = indexing.getitem(fe, e, tuple(slice(None) for _ in range(axis + 1)) + (None,) +
                              tuple(slice(None) for _ in range(axis + 1, nd)), loc)
    shape = e.shape[:axis + 1] + (Const(r),) + e.shape[axis + 1:]
    big = _broadcast_copy(fe, loc, spread, shape)
    return _reshape(fe, loc, big, e.shape[:axis] + (e.shape[axis] * r,) + e.shape[axis + 1:])


def _pad_widths(pad_width, ndim, loc):
    try:
        w = np.broadcast_to(np.asarray(pad_width), (ndim, 2))
    except ValueError:
        raise FlowgradError(f"{loc}: np.pad: pad_width {pad_width!r} does not fit {ndim} axes") from None
    if w.dtype.kind not in "iu" or (w < 0).any():
        raise unsupported(loc, "np.pad with widths that are not non-negative constants",
                          "pass pad_width as constant integers")
    return [(int(b), int(a)) for b, a in w]


def _pad(fe, loc, array, pad_width, mode="constant", constant_values=0, **kw):
    e = fe.to_expr(array, loc)
    nd = len(e.shape)
    if isinstance(pad_width, Expr):
        raise unsupported(loc, "np.pad with widths known only at run time", "pass pad_width as constants")
    widths = _pad_widths(pad_width, nd, loc)
    if mode not in ("constant", "edge", "wrap", "reflect", "symmetric") or kw or \
            (mode == "constant" and np.ndim(constant_values) != 0):
        raise unsupported(loc, f"np.pad(mode={mode!r}) with these options",
                          "use mode 'constant' (one value), 'edge', 'wrap', 'reflect' or 'symmetric'")
    shape = tuple(d + (b + a) for d, (b, a) in zip(e.shape, widths))
    c = fe.alloc("pad", e.dtype, shape, loc, covered=mode != "constant")
    if mode == "constant" and (isinstance(constant_values, Expr) or constant_values != 0):
        fe.emit(Assign(Ref(c), fe.to_expr(constant_values, loc), loc=loc))
    inner = tuple(slice(b, b + d) if const_value(d) is None else slice(b, b + const_value(d))
                  for d, (b, a) in zip(e.shape, widths))
    fe.emit(Assign(indexing.view(Ref(c), inner, loc), e, loc=loc))
    if mode != "constant":
        for k, (b, a) in enumerate(widths):       # axis by axis, as NumPy fills the corners
            n = _const_int(e.shape[k], "the length of a padded axis", loc)
            for lo, hi, src in _pad_sources(mode if n > 1 else "edge", n, b, a, loc):
                view = indexing.view(Ref(c), _along(k, nd, slice(lo, hi)), loc)
                fe.emit(Assign(view, Read(indexing.view(Ref(c), _along(k, nd, src), loc)), loc=loc))
    return Read(Ref(c))


def _pad_sources(mode, n, b, a, loc):
    """(start, stop, source slice) of the before and after pads along one axis of length ``n``
    sitting at ``b .. b + n`` of the padded axis."""
    end = b + n
    limit = {"edge": None, "wrap": n, "reflect": n - 1, "symmetric": n}[mode]
    if limit is not None and max(b, a) > limit:
        raise unsupported(loc, f"np.pad(mode={mode!r}) wider than the array", "pad in several steps")
    out = []
    def back(start, stop):          # start down to stop (exclusive), which may be -1
        return slice(start, stop if stop >= 0 else None, -1)
    if b:
        out.append((0, b, {"edge": slice(b, b + 1), "wrap": slice(end - b, end),
                           "reflect": back(2 * b, b), "symmetric": back(2 * b - 1, b - 1)}[mode]))
    if a:
        out.append((end, end + a, {"edge": slice(end - 1, end), "wrap": slice(b, b + a),
                                   "reflect": back(end - 2, end - 2 - a),
                                   "symmetric": back(end - 1, end - 1 - a)}[mode]))
    return out


# ---------------------------------------------------------------- diagonals and products


def _diagonal(fe, loc, a, offset=0, axis1=0, axis2=1):
    e = fe.to_expr(a, loc)
    if len(e.shape) != 2 or (axis1, axis2) not in ((0, 1), (-2, -1)):
        raise unsupported(loc, "np.diagonal of an array that is not 2-D", "index the diagonal explicitly")
    k = _const_int(offset, "the diagonal offset", loc)
    n0, n1 = e.shape
    length = op("maximum", 0, op("minimum", n0 - max(-k, 0), n1 - max(k, 0)))
    i = _arange(fe, loc, const_value(length) if const_value(length) is not None else length)
    rows, cols = (i, op("add", i, k)) if k >= 0 else (op("subtract", i, k), i)
    return indexing.getitem(fe, e, (_read(fe, rows, loc), _read(fe, cols, loc)), loc)


def _diag(fe, loc, v, k=0):
    e = fe.to_expr(v, loc)
    if len(e.shape) == 2:
        return _diagonal(fe, loc, e, k)
    if len(e.shape) != 1:
        raise FlowgradError(f"{loc}: np.diag: input must be 1-D or 2-D")
    k = _const_int(k, "the diagonal offset", loc)
    m = e.shape[0] + abs(k)
    c = fe.alloc("diag", e.dtype, (m, m), loc)
    i = _arange(fe, loc, e.shape[0])
    rows, cols = (i, op("add", i, k)) if k >= 0 else (op("subtract", i, k), i)
    indexing.setitem(fe, Read(Ref(c)), (_read(fe, rows, loc), _read(fe, cols, loc)), e, loc)
    return Read(Ref(c))


def _trace(fe, loc, a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    return reduce(fe, "sum", _diagonal(fe, loc, a, offset, axis1, axis2), None, False, loc)


_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def _tensordot(fe, loc, a, b, axes=2):
    ea, eb = fe.to_expr(a, loc), fe.to_expr(b, loc)
    na, nb = len(ea.shape), len(eb.shape)
    if (not na or not nb) and axes in (0, ((), ()), ([], [])):
        return fe.materialize(op("multiply", ea, eb), "tensordot", loc)     # a product with a scalar
    if isinstance(axes, (int, np.integer)):
        left, right = list(range(na - axes, na)), list(range(axes))
    else:
        left, right = ([int(x) for x in (ax if isinstance(ax, (tuple, list)) else (ax,))] for ax in axes)
        left, right = [x % na for x in left], [x % nb for x in right]
    if len(left) != len(right):
        raise FlowgradError(f"{loc}: np.tensordot: shape-mismatch for sum")
    sa = list(_LETTERS[:na])
    sb = list(_LETTERS[na:na + nb])
    for x, y in zip(left, right):
        sb[y] = sa[x]
    out = [c for k, c in enumerate(sa) if k not in left] + [c for k, c in enumerate(sb) if k not in right]
    return _einsum(fe, loc, f"{''.join(sa)},{''.join(sb)}->{''.join(out)}", ea, eb)


def _inner(fe, loc, a, b):
    ea, eb = fe.to_expr(a, loc), fe.to_expr(b, loc)
    if ea.shape == () or eb.shape == ():
        return op("multiply", ea, eb)
    na, nb = const_value(ea.shape[-1]), const_value(eb.shape[-1])
    if na is not None and nb is not None and na != nb:
        raise FlowgradError(f"{loc}: np.inner: shapes {tuple(const_value(d) for d in ea.shape)} and "
                            f"{tuple(const_value(d) for d in eb.shape)} not aligned: {na} != {nb}")
    return _tensordot(fe, loc, ea, eb, ([-1], [-1]))


def _kron(fe, loc, a, b):
    ea, eb = fe.to_expr(a, loc), fe.to_expr(b, loc)
    if not ea.shape or not eb.shape:
        return fe.materialize(op("multiply", ea, eb), "kron", loc)
    nd = max(len(ea.shape), len(eb.shape))
    ea = indexing.getitem(fe, ea, (None,) * (nd - len(ea.shape)) + (slice(None),) * len(ea.shape), loc)
    eb = indexing.getitem(fe, eb, (None,) * (nd - len(eb.shape)) + (slice(None),) * len(eb.shape), loc)
    # a[i, j] * b[k, l] at [i, k, j, l], merged pairwise to [i * K + k, j * L + l]
    spread_a = indexing.getitem(fe, ea, tuple(x for _ in range(nd) for x in (slice(None), None)), loc)
    spread_b = indexing.getitem(fe, eb, tuple(x for _ in range(nd) for x in (None, slice(None))), loc)
    prod = fe.materialize(op("multiply", spread_a, spread_b), "kron", loc)
    return _reshape(fe, loc, prod, tuple(p * q for p, q in zip(ea.shape, eb.shape)))


def _cross(fe, loc, a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    ea, eb = fe.to_expr(a, loc), fe.to_expr(b, loc)
    if axis is not None or (axisa, axisb, axisc) != (-1, -1, -1):
        raise unsupported(loc, "np.cross along an axis other than the last", "move the axis last (np.moveaxis)")
    n = {_const_int(e.shape[-1], "the length of the vectors", loc) for e in (ea, eb)}
    if n != {3}:
        raise unsupported(loc, f"np.cross of vectors of length {sorted(n)}", "use 3-vectors")

    def part(e, k):
        return indexing.getitem(fe, e, (Ellipsis, k), loc)
    a0, a1, a2 = (part(ea, k) for k in range(3))
    b0, b1, b2 = (part(eb, k) for k in range(3))
    return stack_values(fe, [a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1, loc)


def _square_matrix(fe, loc, a, what):
    e = fe.to_expr(a, loc)
    if len(e.shape) != 2:
        raise unsupported(loc, f"np.linalg.{what} of a stack of matrices", "call it on one matrix at a time")
    e = e if e.dtype.kind == "f" else op("float64", e)
    return _read(fe, e, loc)


def _det(fe, loc, a):
    e = _square_matrix(fe, loc, a, "det")
    c = fe.container("det", e.dtype, ())
    fe.emit(Call("det", [e], [c], {}, loc=loc))
    return Read(Ref(c, ()))


def _slogdet(fe, loc, a):
    e = _square_matrix(fe, loc, a, "slogdet")
    sign, logdet = fe.container("sign", e.dtype, ()), fe.container("logdet", e.dtype, ())
    fe.emit(Call("slogdet", [e], [sign, logdet], {}, loc=loc))
    return Read(Ref(sign, ())), Read(Ref(logdet, ()))


def _cholesky(fe, loc, a, upper=False):
    e = _square_matrix(fe, loc, a, "cholesky")
    c = fe.container("cholesky", e.dtype, e.shape)
    fe.emit(Call("cholesky", [e], [c], {}, loc=loc))
    return _transpose(fe, loc, Read(Ref(c))) if upper else Read(Ref(c))


def _inv(fe, loc, a):
    e = fe.to_expr(a, loc)
    if len(e.shape) != 2:
        raise unsupported(loc, "np.linalg.inv of a stack of matrices", "invert one matrix per call")
    e = e if e.dtype.kind == "f" else op("float64", e)
    return _solve(fe, loc, e, _eye(fe, loc, e.shape[0], dtype=e.dtype))


# ---------------------------------------------------------------- sequences and grids


def _diff(fe, loc, a, n=1, axis=-1, prepend=None, append=None):
    e = fe.to_expr(a, loc)
    nd = len(e.shape)
    if nd == 0:
        raise FlowgradError(f"{loc}: diff requires input that is at least one dimensional")
    axis = axis_index(axis, nd, loc)
    n = _const_int(n, "n", loc)
    if n < 0:
        raise FlowgradError(f"{loc}: order must be non-negative but got {n}")
    parts = []
    for extra in (prepend, append):
        if extra is not None:
            x = fe.to_expr(extra, loc)
            if len(x.shape) == 0:
                x = _broadcast_copy(fe, loc, x, e.shape[:axis] + (Const(1),) + e.shape[axis + 1:])
            parts.append(x)
        else:
            parts.append(None)
    if prepend is not None or append is not None:
        e = _concatenate(fe, loc, [x for x in (parts[0], e, parts[1]) if x is not None], axis)
    for _ in range(n):
        hi = indexing.getitem(fe, e, _along(axis, nd, slice(1, None)), loc)
        lo = indexing.getitem(fe, e, _along(axis, nd, slice(None, -1)), loc)
        e = op("not_equal" if e.dtype == BOOL else "subtract", hi, lo)
    return e


def _linspace(fe, loc, start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0):
    lo, hi = fe.to_expr(start, loc), fe.to_expr(stop, loc)
    if lo.shape or hi.shape:
        raise unsupported(loc, "np.linspace between arrays", "use scalar start and stop")
    num = fe.to_expr(num, loc)
    if num.dtype.kind not in "iu":
        raise FlowgradError(f"{loc}: np.linspace: num must be an integer, not {num.dtype}")
    if const_value(num) is not None and const_value(num) < 0:
        raise FlowgradError(f"{loc}: Number of samples, {const_value(num)}, must be non-negative.")
    div = op("subtract", num, 1) if endpoint else num
    # NumPy's step is nan where there is no interval (num = 1 with the endpoint); only y[0] is then
    # made, which is start either way
    div = op("maximum", div, 1)
    div = float(const_value(div)) if const_value(div) is not None else op("float64", div)
    delta = op("subtract", _float(hi), _float(lo))
    step = op("divide", delta, div)
    i = _arange(fe, loc, const_value(num) if const_value(num) is not None else num)
    y = op("add", op("multiply", op("float64", i), step), _float(lo))
    if endpoint:
        last = op("logical_and", op("equal", i, op("subtract", num, 1)), op("greater", num, 1))
        y = op("where", last, _float(hi), y)
    dt = _dtype_arg(dtype) if dtype is not None else \
        result_dtype([lo, hi, Const(0.0)], "float")          # NumPy: result_type(start, stop, float(num))
    if dt.name not in CASTS:
        raise unsupported(loc, f"np.linspace(dtype={dt})", "use float64, float32, int64 or int32")
    if dt != np.float64:
        y = op(dt.name, op("floor", y) if dt.kind in "iu" else y)
    if retstep:
        step = op("where", op("greater", op("subtract", num, 1) if endpoint else num, 0), step, np.nan)
    return (y, step) if retstep else y


def _trapezoid(fe, loc, y, x=None, dx=1.0, axis=-1):
    e = fe.to_expr(y, loc)
    nd = len(e.shape)
    axis = axis_index(axis, nd, loc)
    if x is None:
        d = fe.to_expr(dx, loc)
    else:
        ex = fe.to_expr(x, loc)
        if len(ex.shape) == 1:
            d = _diff(fe, loc, ex)
            if nd > 1:
                d = indexing.getitem(fe, _read(fe, d, loc), _along(axis, nd, slice(None), None), loc)
        else:
            d = _diff(fe, loc, ex, axis=axis)
    hi = indexing.getitem(fe, e, _along(axis, nd, slice(1, None)), loc)
    lo = indexing.getitem(fe, e, _along(axis, nd, slice(None, -1)), loc)
    return reduce(fe, "sum", op("divide", op("multiply", d, op("add", hi, lo)), 2.0), axis, False, loc)


def _meshgrid(fe, loc, *xi, copy=True, sparse=False, **kw):
    order = kw.pop("indexing", "xy")
    if kw or order not in ("xy", "ij"):
        raise unsupported(loc, "np.meshgrid with these options", "use indexing='xy' or 'ij'")
    vecs = [_flat(fe, loc, v) for v in xi]
    n = len(vecs)
    where = list(range(n))
    if order == "xy" and n > 1:
        where[0], where[1] = 1, 0
    shape = [None] * n
    for k, v in enumerate(vecs):
        shape[where[k]] = v.shape[0]
    out = []
    for k, v in enumerate(vecs):
        spread = indexing.getitem(fe, v, _along(where[k], n, slice(None), None), loc)
        out.append(spread if sparse else _broadcast_copy(fe, loc, spread, tuple(shape)))
    return out


def _flat(fe, loc, v):
    e = fe.to_expr(v, loc)
    return e if len(e.shape) == 1 else _reshape(fe, loc, e, (_size(e),))


def _take(fe, loc, a, indices, axis=None, out=None, mode=None):
    if out is not None or mode not in (None, "raise"):
        raise unsupported(loc, "np.take with out= or mode=", "index the array instead")
    e = fe.to_expr(a, loc)
    if axis is None:
        e, axis = _flat(fe, loc, e), 0
    axis = axis_index(axis, len(e.shape), loc)
    idx = indices if isinstance(indices, (int, np.integer, Expr)) else fe.to_expr(indices, loc)
    return indexing.getitem(fe, e, (slice(None),) * axis + (idx,), loc)


def _take_along_axis(fe, loc, arr, indices, axis=-1):
    e, idx = fe.to_expr(arr, loc), fe.to_expr(indices, loc)
    if axis is None:
        e, axis = _flat(fe, loc, e), 0
    return gather_along(fe, loc, e, idx, axis, e.shape)


def gather_along(fe, loc, e, idx, axis, grid):
    """``e`` indexed by ``idx`` along ``axis`` and by position elsewhere: ``np.take_along_axis``
    (``grid``: e's shape, broadcast against idx) and ``torch.gather`` (idx's shape)."""
    nd = len(e.shape)
    if len(idx.shape) != nd:
        raise FlowgradError(f"{loc}: indices and arr must have the same number of dimensions "
                            f"({len(idx.shape)} and {nd})")
    axis = axis_index(axis, nd, loc)
    items = []
    for k in range(nd):
        if k == axis:
            items.append(_read(fe, idx, loc))
        else:
            n = grid[k]
            r = _arange(fe, loc, const_value(n) if const_value(n) is not None else n)
            items.append(indexing.getitem(fe, r, _along(k, nd, slice(None), None), loc))
    return indexing.getitem(fe, e, tuple(items), loc)


FUNCTIONS = {
    np.var: _var, np.std: _std, np.average: _average, np.ptp: _ptp, np.nansum: _nansum,
    np.nanmean: _nanmean, np.count_nonzero: _counts("count_nonzero"), np.any: _counts("any"),
    np.all: _counts("all"), np.sinc: _sinc, np.heaviside: _heaviside, np.trunc: _trunc, np.fix: _trunc,
    np.deg2rad: _scaled(np.pi / 180.0), np.radians: _scaled(np.pi / 180.0),
    np.rad2deg: _scaled(180.0 / np.pi), np.degrees: _scaled(180.0 / np.pi),
    np.reciprocal: _reciprocal, np.float_power: _float_power,
    np.positive: lambda fe, loc, x: fe.materialize(fe.to_expr(x, loc), "positive", loc),
    np.logical_xor: lambda fe, loc, a, b: op("not_equal", op("bool", fe.to_expr(a, loc)),
                                             op("bool", fe.to_expr(b, loc))),
    np.nan_to_num: _nan_to_num, np.isclose: _isclose, np.allclose: _allclose, np.select: _select,
    np.polyval: _polyval, np.expand_dims: _expand_dims, np.squeeze: _squeeze,
    np.atleast_1d: _atleast(1), np.atleast_2d: _atleast(2), np.broadcast_to: _broadcast_to,
    np.moveaxis: _moveaxis, np.column_stack: _column_stack, np.split: _splitter(True),
    np.array_split: _splitter(False), np.tile: _tile, np.repeat: _repeat, np.pad: _pad,
    np.diagonal: _diagonal, np.diag: _diag, np.trace: _trace, np.tensordot: _tensordot, np.inner: _inner,
    np.kron: _kron, np.cross: _cross, np.linalg.inv: _inv, np.diff: _diff, np.linspace: _linspace,
    np.trapezoid: _trapezoid, np.meshgrid: _meshgrid, np.take: _take, np.take_along_axis: _take_along_axis,
    np.linalg.det: _det, np.linalg.slogdet: _slogdet, np.linalg.cholesky: _cholesky,
}

METHODS = {
    "var": _var, "std": _std, "any": _counts("any"), "all": _counts("all"), "squeeze": _squeeze,
    "trace": _trace, "diagonal": _diagonal, "repeat": _repeat, "take": _take,
}
