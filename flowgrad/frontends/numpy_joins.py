"""Joining arrays: ``np.stack``, ``np.concatenate``, ``np.hstack`` and ``np.vstack``, each a fresh
array written slot by slot. Like NumPy, each takes a sequence of arrays or one array, whose
items along its first axis are then the arrays joined.
"""
from __future__ import annotations

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import Assign, Const, Expr, Read, Ref, Slice, const_value
from . import indexing
from .numpy_api import _copy, _ravel, axis_index


def stack_values(fe, values, axis, loc):
    """np.stack: each value written into its slot of a fresh array."""
    exprs = [fe.to_expr(v, loc) for v in values]
    if not exprs:
        raise FlowgradError(f"{loc}: cannot stack an empty sequence")
    shape = exprs[0].shape
    ndim = len(shape) + 1
    axis = axis_index(axis, ndim, loc)
    dt = np.result_type(*[e.dtype for e in exprs]) if any(not isinstance(e, Const) for e in exprs) else \
        np.result_type(*[e.value for e in exprs])
    out_shape = shape[:axis] + (Const(len(exprs)),) + shape[axis:]
    c = fe.alloc("stack", dt, out_shape, loc, covered=True)
    for k, e in enumerate(exprs):
        idx = tuple([slice(None)] * axis + [k])
        fe.emit(Assign(indexing.view(Ref(c), idx, loc), e, loc=loc))
    return Read(Ref(c))


def _stack(fe, loc, arrays, axis=0):
    return stack_values(fe, sequence(fe, arrays, "np.stack", loc), axis, loc)


def _concatenate(fe, loc, arrays, axis=0):
    exprs = [fe.to_expr(a, loc) for a in sequence(fe, arrays, "np.concatenate", loc)]
    if not exprs:
        raise FlowgradError(f"{loc}: need at least one array to concatenate")
    if any(not e.shape for e in exprs):
        raise FlowgradError(f"{loc}: zero-dimensional arrays cannot be concatenated")
    ndim = len(exprs[0].shape)
    if axis is None:
        exprs = [_ravel(fe, loc, e) for e in exprs]
        axis, ndim = 0, 1
    axis = axis_index(axis, ndim, loc)
    for e in exprs:
        if len(e.shape) != ndim or any(
                k != axis and const_value(d) is not None and const_value(f) is not None and const_value(d) != const_value(f)
                for k, (d, f) in enumerate(zip(e.shape, exprs[0].shape))):
            raise FlowgradError(f"{loc}: all the input array dimensions except for the concatenation axis must "
                                f"match exactly ({_shape_text(exprs[0])} and {_shape_text(e)}, axis {axis})")
    total = Const(0)
    for e in exprs:
        total = total + e.shape[axis]
    shape = exprs[0].shape[:axis] + (total,) + exprs[0].shape[axis + 1:]
    c = fe.alloc("concat", np.result_type(*[e.dtype for e in exprs]), shape, loc, covered=True)
    off = Const(0)
    for e in exprs:
        items = [Slice(0, d, 1) for d in shape]
        items[axis] = Slice(off, e.shape[axis], 1)
        fe.emit(Assign(Ref(c, items), e, loc=loc))
        off = off + e.shape[axis]
    return Read(Ref(c))


def _shape_text(e):
    return str(tuple(const_value(d) if const_value(d) is not None else "?" for d in e.shape))


def sequence(fe, arrays, what, loc):
    """The items of ``arrays``: a list or tuple as it is, an array as NumPy iterates over it
    (along its first axis, whose length must then be known when captured)."""
    if not isinstance(arrays, (Expr, np.ndarray)):
        return list(arrays)
    e = fe.to_expr(arrays, loc)
    if not e.shape:
        raise FlowgradError(f"{loc}: {what}: a 0-d array is not a sequence of arrays")
    n = const_value(e.shape[0])
    if n is None:
        raise unsupported(loc, f"{what} of one array whose first axis has a length known only at run time",
                          "pass a list of arrays, or reshape the array instead")
    return [indexing.getitem(fe, e, (k,), loc) for k in range(n)]


def _one_element(fe, e, loc):
    """A new 1-element vector holding 0-d ``e`` (``np.atleast_1d``)."""
    c = fe.alloc("one", e.dtype, (Const(1),), loc, covered=True)
    fe.emit(Assign(Ref(c), e, loc=loc))
    return Read(Ref(c))


def _hstack(fe, loc, arrays, dtype=None, casting="same_kind"):
    if isinstance(arrays, Expr) and len(arrays.shape) in (1, 2):
        return _copy(fe, loc, _ravel(fe, loc, arrays))      # the elements, or the rows, one after another
    exprs = [fe.to_expr(a, loc) for a in sequence(fe, arrays, "np.hstack", loc)]
    exprs = [_one_element(fe, e, loc) if not e.shape else e for e in exprs]     # np.atleast_1d
    return _concatenate(fe, loc, exprs, 0 if len(exprs[0].shape) == 1 else 1)


def _vstack(fe, loc, arrays, dtype=None, casting="same_kind"):
    if isinstance(arrays, Expr) and len(arrays.shape) == 2:
        return _copy(fe, loc, arrays)                       # its rows, stacked again
    exprs = [fe.to_expr(a, loc) for a in sequence(fe, arrays, "np.vstack", loc)]
    exprs = [_one_element(fe, e, loc) if not e.shape else e for e in exprs]
    exprs = [indexing.getitem(fe, e, (None,), loc) if len(e.shape) == 1 else e for e in exprs]
    return _concatenate(fe, loc, exprs, 0)


FUNCTIONS = {np.stack: _stack, np.concatenate: _concatenate, np.hstack: _hstack, np.vstack: _vstack}

METHODS = {}
