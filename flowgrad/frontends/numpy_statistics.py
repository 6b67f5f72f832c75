"""NumPy's counting and covariance functions: ``np.bincount``, ``np.histogram``, ``np.digitize``,
``np.unique`` (the values), ``np.cov`` and ``np.corrcoef``, built like ``numpy_composites``
from sorts, searches, gathers and a ``bincount`` Call, following NumPy's own algorithm (its
uniform-bin index with the same corrections, its normalisations), so values agree to rounding.

Derivatives: a bin count is piecewise constant in the sample positions, so no derivative flows
from the counts to the samples (right almost everywhere, as central differences find); the
weights of ``bincount`` and ``histogram`` receive the adjoint of their bin. Bin edges taken from
the samples' minimum and maximum, and a density's bin widths, do depend on the samples, and
differentiate so. ``np.unique`` is a sort and a selection of the first of each run of equal
values: the adjoint of each unique value goes to one occurrence, the first in the flattened
array (the one a stable sort puts first), as ``jax.numpy.unique`` does; NumPy defines none.
"""
from __future__ import annotations

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import BOOL, F64, I64, Assign, Call, Const, Expr, Read, Ref, const_value, op
from . import indexing
from .numpy_api import _transpose, matmul, reduce
from .numpy_joins import _concatenate
from .numpy_composites import _average, _const_int, _flat, _float, _linspace, _read
from .numpy_order import _searchsorted, _sort


def _check(fe, loc, pairs, message):
    """At run time: raise ValueError(``message`` formatted with the values) unless each pair of
    ``pairs`` is equal (``check_sizes``, kept by every pass)."""
    flag = fe.container("values_ok", BOOL, ())
    fe.emit(Call("check_sizes", [v for ab in pairs for v in ab], [flag], {"message": f"{loc}: {message}"}, loc=loc))


def _check_finite_range(fe, loc, lo, hi, what):
    """NumPy's check of a histogram's range: ``[lo, hi]`` must be finite."""
    finite = op("logical_and", op("isfinite", lo), op("isfinite", hi))
    # printed as [lo, hi]; the second pair catches lo == hi == inf
    _check(fe, loc, [(lo, op("where", finite, lo, hi)), (op("int64", finite), Const(1))],
           f"{what} range of [{{}}, {{}}] is not finite")


def _same_length(fe, loc, x, w, message):
    """``x`` and ``w`` (vectors) of one length: checked now when both are known, else at run time."""
    n, m = const_value(x.shape[0]), const_value(w.shape[0])
    if n is not None and m is not None:
        if n != m:
            raise FlowgradError(f"{loc}: {message}")
    else:
        _check(fe, loc, [(x.shape[0], w.shape[0])], message + " ({} and {})")


def _samples(fe, loc, a, what):
    e = fe.to_expr(a, loc)
    if e.dtype == np.float32 or e.dtype.kind not in "biuf":
        raise unsupported(loc, f"{what} of {e.dtype} values", "convert them with .astype(np.float64)")
    return _read(fe, _float(_flat(fe, loc, e)), loc)


def bincount(fe, loc, x, weights, length):
    """``np.bincount(x, weights, minlength=length)`` where ``length`` is at least ``max(x) + 1``."""
    out = fe.container("bincount", I64 if weights is None else F64, (length,))
    ins = [x] if weights is None else [x, weights]
    fe.emit(Call("bincount", ins, [out], {"length": length}, loc=loc))
    return Read(Ref(out))


def _bincount(fe, loc, x, weights=None, minlength=0):
    e = fe.to_expr(x, loc)
    if len(e.shape) != 1:
        raise FlowgradError(f"{loc}: np.bincount: object too deep for desired array (x must be 1-D)")
    if e.dtype.kind not in "biu":
        raise FlowgradError(f"{loc}: np.bincount: Cannot cast array data from dtype('{e.dtype}') to "
                            "dtype('int64') according to the rule 'safe'")
    e = _read(fe, e if e.dtype == I64 else op("int64", e), loc)
    low = fe.to_expr(0 if minlength is None else minlength, loc)
    if const_value(low) is not None and const_value(low) < 0:
        raise FlowgradError(f"{loc}: np.bincount: 'minlength' must not be negative")
    w = None
    if weights is not None:
        w = fe.to_expr(weights, loc)
        if len(w.shape) != 1:
            raise FlowgradError(f"{loc}: np.bincount: object too deep for desired array (weights must be 1-D)")
        _same_length(fe, loc, e, w, "np.bincount: The weights and list don't have the same length.")
        w = _read(fe, w if w.dtype == F64 else op("float64", w), loc)
    if const_value(e.shape[0]) == 0:
        length = low
    else:
        length = op("maximum", op("add", reduce(fe, "max", e, None, False, loc), 1), low)
    length = Const(const_value(length)) if const_value(length) is not None else _read(fe, length, loc)
    return bincount(fe, loc, e, w, length)


# ---------------------------------------------------------------- histograms and bins


def _outer_edges(fe, loc, s, range):
    """NumPy's ``_get_outer_edges``: the range, or the samples' extremes widened by 0.5 when equal."""
    if range is None:
        if const_value(s.shape[0]) == 0:
            return Const(0.0), Const(1.0)
        lo, hi = reduce(fe, "min", s, None, False, loc), reduce(fe, "max", s, None, False, loc)
        # NaN as NumPy's a.min() gives it (the native backend's min and max pass over NaN)
        nan = op("greater", reduce(fe, "sum", op("int64", op("isnan", s)), None, False, loc), 0)
        _check_finite_range(fe, loc, op("where", nan, np.nan, lo), op("where", nan, np.nan, hi), "np.histogram: autodetected")
    else:
        lo, hi = (_float(fe.to_expr(v, loc)) for v in range)
        lv, hv = const_value(lo), const_value(hi)
        if lv is not None and hv is not None:
            if lv > hv:
                raise FlowgradError(f"{loc}: np.histogram: max must be larger than min in range parameter.")
            if not (np.isfinite(lv) and np.isfinite(hv)):
                raise FlowgradError(f"{loc}: np.histogram: supplied range of [{lv}, {hv}] is not finite")
        else:
            _check(fe, loc, [(op("where", op("greater", lo, hi), lo, hi), hi)],
                   "np.histogram: max must be larger than min in range parameter (range ({}, {}))")
            _check_finite_range(fe, loc, lo, hi, "np.histogram: supplied")
    same = op("equal", lo, hi)
    lo = op("where", same, op("subtract", lo, 0.5), lo)
    hi = op("where", same, op("add", hi, 0.5), hi)
    return _read(fe, lo, loc), _read(fe, hi, loc)


def _uniform_bins(fe, loc, s, n, range):
    """(edges, each sample's bin, n for those outside the range): NumPy's index for equal bins,
    computed from the position in the range and corrected against the edges themselves."""
    lo, hi = _outer_edges(fe, loc, s, range)
    edges = _read(fe, _linspace(fe, loc, lo, hi, n + 1), loc)
    keep = _read(fe, op("logical_and", op("greater_equal", s, lo), op("less_equal", s, hi)), loc)
    f = op("multiply", op("divide", op("subtract", s, lo), op("subtract", hi, lo)), float(n))
    first = op("int64", op("where", keep, f, 0.0))
    at = _read(fe, op("where", op("equal", first, n), n - 1, first), loc)
    below = op("less", s, indexing.getitem(fe, edges, (at,), loc))
    at = _read(fe, op("subtract", at, op("int64", below)), loc)
    above = op("logical_and", op("greater_equal", s, indexing.getitem(fe, edges, (_read(fe, op("add", at, 1), loc),),
                                                                      loc)), op("not_equal", at, n - 1))
    return edges, _read(fe, op("where", keep, op("add", at, op("int64", above)), n), loc)


def _edge_bins(fe, loc, s, bins):
    """(edges, each sample's bin, n for those outside): ``edges[j] <= x < edges[j + 1]``, the last
    bin closed on the right, as NumPy's cumulative counts give."""
    edges = _read(fe, _float(fe.to_expr(bins, loc)), loc)
    if len(edges.shape) != 1:
        raise FlowgradError(f"{loc}: np.histogram: `bins` must be 1d, when an array")
    count = _const_int(edges.shape[0], "the number of bin edges", loc)
    if count < 2:
        raise FlowgradError(f"{loc}: np.histogram: `bins` must have at least two edges, when an array")
    _increasing(fe, loc, bins, edges, "np.histogram: `bins` must increase monotonically, when an array")
    n = count - 1
    last = indexing.getitem(fe, edges, (n,), loc)
    j = op("subtract", _searchsorted(fe, loc, edges, s, "right"), 1)
    j = op("where", op("equal", s, last), n - 1, j)
    keep = op("logical_and", op("greater_equal", s, indexing.getitem(fe, edges, (0,), loc)), op("less_equal", s, last))
    return edges, n, _read(fe, op("where", keep, j, n), loc)


def _increasing(fe, loc, given, edges, message):
    if isinstance(given, (np.ndarray, list, tuple)):
        if np.any(np.diff(np.asarray(given, dtype=np.float64)) < 0):
            raise FlowgradError(f"{loc}: {message}")
        return
    steps = op("less", indexing.getitem(fe, edges, (slice(1, None),), loc),
               indexing.getitem(fe, edges, (slice(None, -1),), loc))
    _check(fe, loc, [(reduce(fe, "sum", op("int64", steps), None, False, loc), Const(0))],
           message + " ({} steps decrease)")


def _histogram(fe, loc, a, bins=10, range=None, density=None, weights=None):
    s = _samples(fe, loc, a, "np.histogram")
    if isinstance(bins, str):
        raise unsupported(loc, f"np.histogram(bins={bins!r})", "pass the number of bins or their edges")
    if isinstance(bins, (int, np.integer)) or (isinstance(bins, Expr) and not bins.shape):
        n = _const_int(bins, "the number of bins", loc)
        if n < 1:
            raise FlowgradError(f"{loc}: np.histogram: `bins` must be positive, when an integer")
        edges, at = _uniform_bins(fe, loc, s, n, range)
    else:
        edges, n, at = _edge_bins(fe, loc, s, bins)
    w = None
    if weights is not None:
        we = fe.to_expr(weights, loc)
        if len(we.shape) != len(fe.to_expr(a, loc).shape):
            raise FlowgradError(f"{loc}: np.histogram: weights should have the same shape as a.")
        wdt = we.dtype
        w = _read(fe, _float(_flat(fe, loc, we)), loc)
        _same_length(fe, loc, s, w, "np.histogram: weights should have the same shape as a.")
    counts = indexing.getitem(fe, bincount(fe, loc, at, w, Const(n + 1)), (slice(None, n),), loc)
    if density:
        widths = op("subtract", indexing.getitem(fe, edges, (slice(1, None),), loc),
                    indexing.getitem(fe, edges, (slice(None, -1),), loc))
        hist = _float(counts)
        return op("divide", op("divide", hist, widths), reduce(fe, "sum", hist, None, False, loc)), edges
    if w is not None and wdt != F64:
        counts = op(wdt.name if wdt.name in ("float32", "int64", "int32") else "float64", counts)
    return counts, edges


def _digitize(fe, loc, x, bins, right=False):
    """np.digitize: ``searchsorted`` of increasing bins (either side), or of the reversed bins
    subtracted from their number for decreasing ones."""
    ex = fe.to_expr(x, loc)
    eb = _read(fe, fe.to_expr(bins, loc), loc)
    if len(eb.shape) != 1:
        raise FlowgradError(f"{loc}: np.digitize: bins must be one-dimensional")
    side = "left" if right else "right"
    n = eb.shape[0]
    if isinstance(bins, (np.ndarray, list, tuple)):
        d = np.diff(np.asarray(bins, dtype=np.float64))
        increasing, decreasing = bool(np.all(d >= 0)), bool(np.all(d <= 0))
        if not increasing and not decreasing:
            raise FlowgradError(f"{loc}: np.digitize: bins must be monotonically increasing or decreasing")
        if increasing:
            return _searchsorted(fe, loc, eb, ex, side)
        return op("subtract", n, _searchsorted(fe, loc, indexing.getitem(fe, eb, (slice(None, None, -1),), loc), ex, side))
    hi, lo = indexing.getitem(fe, eb, (slice(1, None),), loc), indexing.getitem(fe, eb, (slice(None, -1),), loc)
    up = reduce(fe, "sum", op("int64", op("greater", hi, lo)), None, False, loc)
    down = reduce(fe, "sum", op("int64", op("less", hi, lo)), None, False, loc)
    _check(fe, loc, [(op("minimum", up, down), Const(0))],
           "np.digitize: bins must be monotonically increasing or decreasing ({} steps go the other way)")
    rising = _searchsorted(fe, loc, eb, ex, side)
    falling = op("subtract", n, _searchsorted(fe, loc, _read(fe, indexing.getitem(fe, eb, (slice(None, None, -1),), loc),
                                                             loc), ex, side))
    return op("where", op("greater", down, 0), falling, rising)


def _unique(fe, loc, ar, return_index=False, return_inverse=False, return_counts=False, axis=None, *,
            equal_nan=True, sorted=True):
    if return_index or return_inverse or return_counts or axis is not None:
        raise unsupported(loc, "np.unique with return_index, return_inverse, return_counts or axis",
                          "use np.unique for the values alone, or np.sort and comparisons of neighbours")
    s = _read(fe, _sort(fe, loc, _flat(fe, loc, fe.to_expr(ar, loc)), None), loc)
    n = _const_int(s.shape[0], "the number of elements", loc)
    if n == 0:
        return s
    later, earlier = indexing.getitem(fe, s, (slice(1, None),), loc), indexing.getitem(fe, s, (slice(None, -1),), loc)
    new = op("not_equal", later, earlier)
    if equal_nan and s.dtype.kind == "f":            # NumPy keeps one NaN
        new = op("logical_and", new, op("logical_not", op("logical_and", op("isnan", later), op("isnan", earlier))))
    first = fe.alloc("first", BOOL, (Const(n),), loc, covered=True)         # [True] + new: a run's first
    fe.emit(Assign(indexing.view(Ref(first), (slice(0, 1),), loc), Const(True), loc=loc))
    fe.emit(Assign(indexing.view(Ref(first), (slice(1, None),), loc), new, loc=loc))
    return indexing.getitem(fe, s, (Read(Ref(first)),), loc)


# ---------------------------------------------------------------- covariance


def _rows(fe, loc, m, rowvar, what):
    e = fe.to_expr(m, loc)
    if len(e.shape) > 2:
        raise FlowgradError(f"{loc}: np.{what}: m has more than 2 dimensions")
    e = _float(e)
    if len(e.shape) < 2:
        e = indexing.getitem(fe, _read(fe, e, loc), (None,) * (2 - len(e.shape)) + (slice(None),) * len(e.shape), loc)
    elif not rowvar:
        e = _transpose(fe, loc, e)
    return e


def _cov(fe, loc, m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    if dtype is not None and np.dtype(dtype) != np.float64:
        raise unsupported(loc, f"np.cov(dtype={np.dtype(dtype)})", "use float64")
    if ddof is not None and (isinstance(ddof, Expr) or ddof != int(ddof)):
        raise FlowgradError(f"{loc}: np.cov: ddof must be an integer known when captured")
    X = _rows(fe, loc, m, rowvar, "cov")
    if y is not None:
        ey = fe.to_expr(y, loc)
        keep = rowvar or (len(ey.shape) == 2 and const_value(ey.shape[0]) == 1)     # NumPy: y.shape[0] != 1
        X = _concatenate(fe, loc, [X, _rows(fe, loc, ey, keep, "cov")], 0)
    X = _read(fe, X, loc)
    if const_value(X.shape[0]) == 0:
        return fe.const_array(np.zeros((0, 0)))
    ddof = (0 if bias else 1) if ddof is None else int(ddof)
    w = None
    for given in (fweights, aweights):
        if given is not None:
            g = _float(fe.to_expr(given, loc))
            if len(g.shape) != 1:
                raise FlowgradError(f"{loc}: np.cov: cannot handle multidimensional weights")
            w = g if w is None else op("multiply", w, g)
    if w is None:
        avg = reduce(fe, "mean", X, 1, False, loc)
        fact = op("subtract", _count_columns(X), float(ddof))
    else:
        w = _read(fe, w, loc)
        avg = _average(fe, loc, X, axis=1, weights=w)
        w_sum = reduce(fe, "sum", w, None, False, loc)
        if ddof == 0:
            fact = w_sum
        elif aweights is None:
            fact = op("subtract", w_sum, float(ddof))
        else:
            aw = _float(fe.to_expr(aweights, loc))
            fact = op("subtract", w_sum, op("divide", op("multiply", float(ddof),
                                                         reduce(fe, "sum", op("multiply", w, aw), None, False, loc)), w_sum))
    fact = op("where", op("less_equal", fact, 0.0), 0.0, fact)        # NumPy warns and takes 0
    d = _read(fe, op("subtract", X, indexing.getitem(fe, _read(fe, avg, loc), (slice(None), None), loc)), loc)
    dw = d if w is None else _read(fe, op("multiply", d, w), loc)
    c = op("multiply", matmul(fe, d, _transpose(fe, loc, dw), loc), op("divide", 1.0, fact))
    if const_value(X.shape[0]) == 1:
        return indexing.getitem(fe, _read(fe, c, loc), (0, 0), loc)       # squeezed to 0-d
    return c


def _count_columns(X):
    n = X.shape[1]
    return float(const_value(n)) if const_value(n) is not None else op("float64", n)


def _corrcoef(fe, loc, x, y=None, rowvar=True, bias=None, ddof=None, *, dtype=None):
    if bias is not None or ddof is not None:
        raise unsupported(loc, "np.corrcoef with bias= or ddof= (they have no effect)", "leave them out")
    c = _read(fe, _cov(fe, loc, x, y, rowvar, dtype=dtype), loc)
    if not c.shape:
        return op("divide", c, c)
    n = _const_int(c.shape[0], "the number of variables", loc)
    d = indexing.getitem(fe, c, (np.arange(n), np.arange(n)), loc)
    stddev = _read(fe, op("sqrt", d), loc)
    r = op("divide", op("divide", c, indexing.getitem(fe, stddev, (slice(None), None), loc)),
           indexing.getitem(fe, stddev, (None, slice(None)), loc))
    return op("minimum", op("maximum", r, -1.0), 1.0)


FUNCTIONS = {
    np.bincount: _bincount, np.histogram: _histogram, np.digitize: _digitize, np.unique: _unique,
    np.cov: _cov, np.corrcoef: _corrcoef,
}

METHODS = {}
