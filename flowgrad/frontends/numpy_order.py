"""NumPy's sorting, order statistics, interpolation, convolution and running products, and the
common ``scipy.special`` functions, built like ``numpy_composites``: a sort is a gather by the
sorting positions (a new ``argsort`` Call), so the derivative rules of gathers cover it, and
each function follows NumPy's (or SciPy's) own formula, so values agree to rounding.
"""
from __future__ import annotations

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import I64, Assign, Call, Const, Expr, For, Read, Ref, const_value, op
from . import indexing
from .numpy_api import _axes, _dtype_arg, reduce
from .numpy_joins import stack_values
from .numpy_composites import (_along, _broadcast_copy, _const_int, _flat, _float, _moveaxis, _read, axis_index,
                               gather_along)


# ---------------------------------------------------------------- sorting, order statistics, interpolation


def _argsort_last(fe, loc, e):
    """int64 positions that sort ``e`` along its last axis (stable, NaN last)."""
    e = _read(fe, e, loc)
    c = fe.container("argsort", I64, e.shape)
    fe.emit(Call("argsort", [e], [c], {}, loc=loc))
    return Read(Ref(c))


def _sort_axis(fe, loc, a, axis):
    """(``a`` with the sort axis moved last, that axis) for axis None (flattened) or an int."""
    e = fe.to_expr(a, loc)
    if axis is None:
        e, axis = _flat(fe, loc, e), 0
    if not e.shape:
        raise FlowgradError(f"{loc}: axis {axis} is out of bounds for array of dimension 0")
    axis = axis_index(axis, len(e.shape), loc)
    return _read(fe, _moveaxis(fe, loc, e, axis, -1), loc), axis


def _sorted_last(fe, loc, last):
    return gather_along(fe, loc, last, _argsort_last(fe, loc, last), -1, last.shape)


def _sort(fe, loc, a, axis=-1, kind=None, order=None, *, stable=None):
    """np.sort: a gather by the sorting positions, so the gradient of each sorted value goes to
    the element it came from."""
    if order is not None:
        raise FlowgradError(f"{loc}: np.sort: order= names fields of a structured array; there are none")
    last, axis = _sort_axis(fe, loc, a, axis)
    return _moveaxis(fe, loc, _sorted_last(fe, loc, last), -1, axis)


def _argsort(fe, loc, a, axis=-1, kind=None, order=None, *, stable=None):
    last, axis = _sort_axis(fe, loc, a, axis)
    return _moveaxis(fe, loc, _argsort_last(fe, loc, last), -1, axis)


def _sort_in_place(fe, loc, a, axis=-1, kind=None, order=None, *, stable=None):
    e = fe.to_expr(a, loc)
    if not isinstance(e, Read):
        raise unsupported(loc, ".sort() of a computed value", "use np.sort")
    fe.write_ref(e.ref, _sort(fe, loc, e, axis), loc)
    return None


def _order_statistics(fe, loc, a, axis, keepdims, picks, cast=True):
    """``picks(sorted values along the last axis, n)`` over ``axis``; NaN where a NaN is present
    (sorted last), as NumPy's median and quantile give."""
    if isinstance(axis, (tuple, list)):
        raise unsupported(loc, "a median or quantile over several axes", "reshape to one axis first")
    e = fe.to_expr(a, loc)
    last, ax = _sort_axis(fe, loc, e, axis)
    s = _sorted_last(fe, loc, last)
    if s.dtype.kind != "f" and cast:
        s = fe.materialize(op("float64", s), "t", loc)
    n = _const_int(s.shape[-1], "the length of the axis", loc)
    if n == 0:
        raise unsupported(loc, "a median or quantile of an empty axis", "check the length first")

    def at(k):
        return indexing.getitem(fe, s, (Ellipsis, k), loc)
    values = picks(at, n)
    out = []
    for v in values if isinstance(values, list) else [values]:
        if s.dtype.kind == "f":
            v = op("where", op("isnan", at(n - 1)), np.nan, v)
        if keepdims:            # the reduced axis (every axis for axis=None) kept with length 1
            if axis is None:
                v = _broadcast_copy(fe, loc, v, (Const(1),) * len(e.shape))
            else:
                v = indexing.getitem(fe, _read(fe, v, loc),
                                     tuple(None if k == ax else slice(None) for k in range(len(e.shape))), loc)
        out.append(v)
    return out if isinstance(values, list) else out[0]


def _median(fe, loc, a, axis=None, out=None, overwrite_input=False, keepdims=False):
    def picks(at, n):
        mid = n // 2
        return at(mid) if n % 2 else op("divide", op("add", at(mid - 1), at(mid)), 2.0)
    return _order_statistics(fe, loc, a, axis, keepdims, picks)


_QUANTILE_METHODS = ("linear", "lower", "higher", "midpoint")


def _quantile(fe, loc, a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False,
              *, weights=None, interpolation=None, scale=1.0):
    if isinstance(q, Expr) or out is not None or weights is not None or interpolation is not None:
        raise unsupported(loc, "a quantile of run-time q, or with out=, weights= or interpolation=",
                          "pass q as constants")
    if method not in _QUANTILE_METHODS:
        raise unsupported(loc, f"quantile method {method!r}", f"use one of {', '.join(_QUANTILE_METHODS)}")
    qs = np.true_divide(np.asarray(q, dtype=np.float64), scale)
    if qs.ndim > 1:
        raise unsupported(loc, "quantiles given as a 2-D array", "pass a scalar or a 1-D list")
    if not ((qs >= 0) & (qs <= 1)).all():
        raise FlowgradError(f"{loc}: Quantiles must be in the range [0, 1]" if scale == 1.0 else
                            f"{loc}: Percentiles must be in the range [0, 100]")

    def picks(at, n):
        out = []
        for qk in np.atleast_1d(qs):
            virtual = (n - 1) * qk                   # NumPy's linear virtual index
            lo = min(max(int(np.floor(virtual)), 0), n - 1)
            hi = min(lo + 1, n - 1)
            gamma = float(virtual - lo) if virtual < n - 1 else 0.0
            a_, b_ = at(lo), at(hi)
            if method == "lower":
                out.append(a_)
            elif method == "higher":
                out.append(at(min(int(np.ceil(virtual)), n - 1)))
            elif method == "midpoint":
                out.append(a_ if lo == hi or gamma == 0.0 else op("divide", op("add", a_, b_), 2.0))
            elif gamma >= 0.5:                       # NumPy's lerp, from the nearer end
                out.append(op("subtract", b_, op("multiply", op("subtract", b_, a_), 1.0 - gamma)))
            else:
                out.append(op("add", a_, op("multiply", op("subtract", b_, a_), gamma)))
        return out if qs.ndim else out[0]
    values = _order_statistics(fe, loc, a, axis, keepdims, picks, cast=method in ("linear", "midpoint"))
    return stack_values(fe, values, 0, loc) if isinstance(values, list) else values


def _percentile(fe, loc, a, q, *args, **kwargs):
    return _quantile(fe, loc, a, q, *args, scale=100.0, **kwargs)


def _searchsorted(fe, loc, a, v, side="left", sorter=None):
    if sorter is not None or side not in ("left", "right"):
        raise unsupported(loc, "np.searchsorted with sorter= or this side", "sort first (np.sort)")
    sa, ev = fe.to_expr(a, loc), fe.to_expr(v, loc)
    if len(sa.shape) != 1:
        raise FlowgradError(f"{loc}: np.searchsorted: a must be 1-D")
    scalar = not ev.shape
    vals = _read(fe, ev if not scalar else _broadcast_copy(fe, loc, ev, (Const(1),)), loc)
    c = fe.container("searchsorted", I64, vals.shape)
    fe.emit(Call("searchsorted", [_read(fe, sa, loc), vals], [c], {"side": side}, loc=loc))
    pos = Read(Ref(c))
    return indexing.getitem(fe, pos, (0,), loc) if scalar else pos


def _interp(fe, loc, x, xp, fp, left=None, right=None, period=None):
    """np.interp, following NumPy's loop: NaN stays NaN, left/right outside ``xp``, ``fp[j]``
    at a node, else the line through the two nodes around ``x``."""
    if period is not None:
        raise unsupported(loc, "np.interp with period=", "wrap x into one period first (x % period)")
    ex, exp_, efp = (op("float64", e) if e.dtype.kind != "f" or e.dtype != np.float64 else e
                     for e in (fe.to_expr(v, loc) for v in (x, xp, fp)))
    if len(exp_.shape) != 1 or len(efp.shape) != 1:
        raise FlowgradError(f"{loc}: np.interp: xp and fp must be 1-D sequences")
    xp_r, fp_r = _read(fe, exp_, loc), _read(fe, efp, loc)
    n = xp_r.shape[0]
    if const_value(n) is not None and const_value(fp_r.shape[0]) is not None and \
            const_value(n) != const_value(fp_r.shape[0]):
        raise FlowgradError(f"{loc}: np.interp: fp and xp are not of the same length")
    if const_value(n) == 0:
        raise FlowgradError(f"{loc}: np.interp: array of sample points is empty")
    first, last = (indexing.getitem(fe, fp_r, (k,), loc) for k in (0, -1))
    lval = first if left is None else fe.to_expr(left, loc)
    rval = last if right is None else fe.to_expr(right, loc)
    x0, xl = (indexing.getitem(fe, xp_r, (k,), loc) for k in (0, -1))
    if const_value(n) == 1:
        inside = first
    else:
        j0 = op("subtract", _searchsorted(fe, loc, xp_r, ex, "right"), 1)
        j = _read(fe, op("minimum", op("maximum", j0, 0), op("subtract", n, 2)), loc)
        j1 = _read(fe, op("add", j, 1), loc)
        xj, xj1, fj, fj1 = (indexing.getitem(fe, arr, (k,), loc) for arr in (xp_r, fp_r) for k in (j, j1))
        slope = op("divide", op("subtract", fj1, fj), op("subtract", xj1, xj))
        line = op("add", op("multiply", slope, op("subtract", ex, xj)), fj)
        line = op("where", op("isnan", line),
                  op("where", op("equal", fj, fj1), fj, op("add", op("multiply", slope, op("subtract", ex, xj1)), fj1)),
                  line)
        inside = op("where", op("greater_equal", j0, op("subtract", n, 1)), last,
                    op("where", op("equal", xj, ex), fj, line))
    return op("where", op("isnan", ex), ex,
              op("where", op("less", ex, x0), lval, op("where", op("greater", ex, xl), rval, inside)))


# ---------------------------------------------------------------- convolution and running products


def _correlate(fe, loc, a, v, mode="valid"):
    """np.correlate: ``c[k] = sum_n a[n + k] * v[n]`` (NumPy's padding for each mode), one
    convolution Call (the im2col + GEMM of the ML front doors, and its adjoints)."""
    ea, ev = fe.to_expr(a, loc), fe.to_expr(v, loc)
    if len(ea.shape) != 1 or len(ev.shape) != 1:
        raise FlowgradError(f"{loc}: np.correlate/np.convolve take 1-D arrays")
    n, m = (_const_int(e.shape[0], "the length of a convolved array", loc) for e in (ea, ev))
    if n == 0 or m == 0:
        raise FlowgradError(f"{loc}: np.correlate/np.convolve: empty array")
    if m > n:                                  # NumPy swaps the operands and reverses the result
        return indexing.getitem(fe, _correlate(fe, loc, ev, ea, mode), (slice(None, None, -1),), loc)
    pads = {"full": (m - 1, m - 1), "same": (m // 2, m - 1 - m // 2), "valid": (0, 0)}.get(mode)
    if pads is None:
        raise FlowgradError(f"{loc}: np.correlate/np.convolve: mode must be 'full', 'same' or 'valid', not {mode!r}")
    dt = np.result_type(ea.dtype, ev.dtype)
    work = dt if dt.kind == "f" else np.dtype(np.float64)
    def signal(e):                             # (1, 1, length): one sample, one channel
        c = fe.container("signal", work, (Const(1), Const(1), e.shape[0]))
        fe.emit(Assign(Ref(c), e if e.dtype == work else op(work.name, e), loc=loc))
        return Read(Ref(c))
    x, w = signal(ea), signal(ev)
    length = n + pads[0] + pads[1] - m + 1
    out = fe.container("correlate", work, (Const(1), Const(1), Const(length)))
    fe.emit(Call("conv", [x, w], [out], {"stride": (1,), "padding": (pads,), "dilation": (1,), "groups": 1}, loc=loc))
    y = indexing.getitem(fe, Read(Ref(out)), (0, 0), loc)
    return y if dt == work else op("int64" if dt.kind in "iu" else dt.name, y)


def _convolve(fe, loc, a, v, mode="full"):
    ea, ev = fe.to_expr(a, loc), fe.to_expr(v, loc)
    if len(ev.shape) == 1 and len(ea.shape) == 1 and \
            _const_int(ev.shape[0], "the length of a convolved array", loc) > \
            _const_int(ea.shape[0], "the length of a convolved array", loc):
        ea, ev = ev, ea
    return _correlate(fe, loc, ea, indexing.getitem(fe, ev, (slice(None, None, -1),), loc), mode)


def _cumprod(fe, loc, a, axis=None, dtype=None, out=None):
    """np.cumprod: a loop over the axis, ``p[k] = p[k - 1] * a[k]`` (reversed as a loop for the
    gradient, which each ``p[k - 1]`` is kept for)."""
    if out is not None:
        raise unsupported(loc, "np.cumprod(out=...)", "assign the result instead")
    e = fe.to_expr(a, loc)
    if axis is None:
        e, axis = _flat(fe, loc, e), 0
    nd = len(e.shape)
    axis = axis_index(axis, nd, loc)
    dt = e.dtype if dtype is None else _dtype_arg(dtype)
    dt = I64 if dt.kind in "bi" and dtype is None else dt
    c = fe.alloc("cumprod", dt, e.shape, loc, covered=True)
    src = _read(fe, e, loc)
    fe.emit(Assign(indexing.view(Ref(c), _along(axis, nd, slice(0, 1)), loc),
                   op(dt.name, Read(indexing.view(src.ref, _along(axis, nd, slice(0, 1)), loc))), loc=loc))
    k = fe.container("k", I64, ())
    at = Read(Ref(k, ()))
    body = [Assign(indexing.view(Ref(c), _along(axis, nd, at), loc),
                   op("multiply", Read(indexing.view(Ref(c), _along(axis, nd, op("subtract", at, 1)), loc)),
                      Read(indexing.view(src.ref, _along(axis, nd, at), loc))), loc=loc)]
    fe.emit(For(k, Const(1), e.shape[axis], Const(1), body, loc=loc))
    return Read(Ref(c))


# ---------------------------------------------------------------- scipy.special


def _expit(fe, loc, x):
    """The logistic sigmoid, from ``exp(-|x|)`` on both sides (no overflow, not even in the adjoint)."""
    e = _float(fe.to_expr(x, loc))
    z = op("exp", op("negative", op("abs", e)))
    return op("where", op("greater_equal", e, 0), op("divide", 1.0, op("add", 1.0, z)),
              op("divide", z, op("add", 1.0, z)))


def _log_expit(fe, loc, x):
    return op("negative", op("logaddexp", 0.0, op("negative", _float(fe.to_expr(x, loc)))))


def _logit(fe, loc, p):
    e = _float(fe.to_expr(p, loc))
    return op("subtract", op("log", e), op("log1p", op("negative", e)))


def _shifted(fe, loc, e, axis):
    """``e`` minus its maximum over ``axis`` (kept), the maximum taken as 0 where it is not finite."""
    m = reduce(fe, "max", e, axis, True, loc)
    m = op("where", op("isfinite", m), m, 0.0)
    return op("subtract", e, m), m


def _logsumexp(fe, loc, a, axis=None, b=None, keepdims=False, return_sign=False):
    if b is not None or return_sign:
        raise unsupported(loc, "scipy.special.logsumexp with b= or return_sign=", "scale inside the exponentials")
    e = _float(fe.to_expr(a, loc))
    d, m = _shifted(fe, loc, e, axis)
    total = op("add", op("log", reduce(fe, "sum", op("exp", d), axis, True, loc)), m)
    if keepdims:
        return total
    axes = _axes(axis, len(e.shape), loc)
    return indexing.getitem(fe, _read(fe, total, loc),
                            tuple(0 if axes is None or k in axes else slice(None) for k in range(len(e.shape))), loc)


def _softmax(log):
    def handler(fe, loc, x, axis=None):
        e = _float(fe.to_expr(x, loc))
        d, _ = _shifted(fe, loc, e, axis)
        d = _read(fe, d, loc)
        total = reduce(fe, "sum", op("exp", d), axis, True, loc)
        return op("subtract", d, op("log", total)) if log else op("divide", op("exp", d), total)
    return handler


def _erf(fe, loc, x):
    e = _read(fe, _float(fe.to_expr(x, loc)), loc)
    c = fe.container("erf", e.dtype, e.shape)
    fe.emit(Call("erf", [e], [c], {}, loc=loc))
    return Read(Ref(c) if c.ndim else Ref(c, ()))


def _xlogy(log):
    def handler(fe, loc, x, y):
        ex, ey = _float(fe.to_expr(x, loc)), _float(fe.to_expr(y, loc))
        zero = op("equal", ex, 0)
        safe = op("where", zero, 1.0, ey)          # log(y) is not evaluated where x is 0
        return op("where", op("logical_and", zero, op("logical_not", op("isnan", ey))), 0.0,
                  op("multiply", ex, op(log, safe)))
    return handler


def _ufunc(name):
    def handler(fe, loc, x):
        return op(name, _float(fe.to_expr(x, loc)))
    return handler


def _betaln(fe, loc, a, b):
    ea, eb = _float(fe.to_expr(a, loc)), _float(fe.to_expr(b, loc))
    return op("subtract", op("add", op("gammaln", ea), op("gammaln", eb)), op("gammaln", op("add", ea, eb)))


def _polygamma(fe, loc, n, x):
    """``scipy.special.polygamma(n, x)``: digamma for n = 0, else the n-th derivative of digamma."""
    ex = _float(fe.to_expr(x, loc))
    if isinstance(n, (int, np.integer)) and not isinstance(n, bool):
        if n < 0:
            raise unsupported(loc, f"polygamma of order {n}", "the order is an integer n >= 0")
        return op("digamma", ex) if n == 0 else op("trigamma", ex) if n == 1 else op("polygamma", Const(int(n)), ex)
    en = fe.to_expr(n, loc)
    if en.dtype.kind not in "iu":
        raise unsupported(loc, "polygamma of a non-integer order", "pass an integer order n >= 1")
    return op("polygamma", en, ex)


def scipy_functions():
    """The ``scipy.special`` functions the frontend lowers (imported only once scipy is)."""
    import scipy.special as sp
    return {sp.expit: _expit, sp.log_expit: _log_expit, sp.logit: _logit, sp.logsumexp: _logsumexp,
            sp.softmax: _softmax(False), sp.log_softmax: _softmax(True), sp.erf: _erf,
            sp.xlogy: _xlogy("log"), sp.xlog1py: _xlogy("log1p"), sp.gammaln: _ufunc("gammaln"),
            sp.digamma: _ufunc("digamma"), sp.psi: _ufunc("digamma"), sp.polygamma: _polygamma, sp.betaln: _betaln}


FUNCTIONS = {
    np.sort: _sort, np.argsort: _argsort, np.median: _median, np.quantile: _quantile,
    np.percentile: _percentile, np.searchsorted: _searchsorted, np.interp: _interp,
    np.correlate: _correlate, np.convolve: _convolve, np.cumprod: _cumprod,
}

METHODS = {"sort": _sort_in_place, "argsort": _argsort, "searchsorted": _searchsorted, "cumprod": _cumprod}
