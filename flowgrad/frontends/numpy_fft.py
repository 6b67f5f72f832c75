"""``np.fft``: ``fft``, ``ifft``, ``rfft``, ``irfft``, ``fft2``, ``ifft2``, ``fftn``, ``ifftn`` (with ``n``
or ``s``, ``axis`` or ``axes``, and ``norm``), ``fftshift``, ``ifftshift``, ``fftfreq``, ``rfftfreq``.

Each transform is a Call along one axis (``flowgrad.fft_ops``: the rules and the native lowering);
the length ``n`` is applied first, as NumPy applies it, by slicing the input or copying it into
zeros, so a Call's input always has the transform's length (and its adjoint the input's shape).
A multi-dimensional transform is one Call per axis. Axis lengths are known at capture.
"""
from __future__ import annotations

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import Assign, Call, Const, Expr, Read, Ref, complex_dtype, const_value, op, real_dtype
from . import indexing
from .numpy_api import _roll, axis_index

_NORMS = ("backward", "ortho", "forward")


def _norm(norm, loc, what):
    norm = "backward" if norm is None else norm
    if norm not in _NORMS:
        raise FlowgradError(f'{loc}: {what}: Invalid norm value {norm!r}; should be "backward", "ortho" or '
                            '"forward".')
    return norm


def _operand(fe, a, loc, what):
    e = fe.to_expr(a, loc)
    if not e.shape:
        raise FlowgradError(f"{loc}: {what} of a scalar: pass an array")
    return e


def _length(e, axis, loc, what):
    m = const_value(e.shape[axis])
    if m is None:
        raise unsupported(loc, f"{what} along an axis whose length is known only at run time",
                          "slice the array with bounds known when the function is captured")
    return m


def _points(n, loc, what):
    if isinstance(n, Expr):
        if const_value(n) is None:
            raise unsupported(loc, f"{what} with a number of points known only at run time", "pass n as a constant")
        n = const_value(n)
    n = int(n)
    if n < 1:
        raise FlowgradError(f"{loc}: {what}: Invalid number of FFT data points ({n}) specified.")
    return n


def _along(axis, ndim, part):
    return tuple(part if k == axis else slice(None) for k in range(ndim))


def resized(fe, e, axis, n, loc):
    """``e`` truncated or padded with zeros to length ``n`` along ``axis``, as NumPy's ``n``."""
    m = const_value(e.shape[axis])
    if n == m:
        return e
    if n < m:
        return indexing.getitem(fe, e, _along(axis, len(e.shape), slice(0, n)), loc)
    shape = tuple(Const(n) if k == axis else d for k, d in enumerate(e.shape))
    c = fe.alloc("fftpad", e.dtype, shape, loc)
    fe.emit(Assign(indexing.view(Ref(c), _along(axis, len(shape), slice(0, m)), loc), e, loc=loc))
    return Read(Ref(c))


def _read(fe, e, loc):
    return e if isinstance(e, Read) else fe.materialize(e, "t", loc)


def _call(fe, name, e, shape, dtype, attrs, loc):
    out = fe.container(name, dtype, shape)
    fe.emit(Call(name, [_read(fe, e, loc)], [out], attrs, loc=loc))
    return Read(Ref(out))


def _complex(e):
    return e if e.dtype.kind == "c" else op(complex_dtype(e.dtype).name, e)


def _transform(fe, e, axis, n, inverse, norm, loc, what):
    """The complex transform of ``e`` (complex) along ``axis`` with ``n`` points (None: its length)."""
    n = _length(e, axis, loc, what) if n is None else _points(n, loc, what)
    e = resized(fe, e, axis, n, loc)
    return _call(fe, "fft", e, e.shape, e.dtype, {"axis": axis, "inverse": inverse, "norm": norm}, loc)


def _fft(inverse):
    what = "np.fft.ifft" if inverse else "np.fft.fft"

    def handler(fe, loc, a, n=None, axis=-1, norm=None, out=None):
        if out is not None:
            raise unsupported(loc, f"{what}(out=...)", "assign the result instead")
        e = _operand(fe, a, loc, what)
        axis = axis_index(axis, len(e.shape), loc)
        return _transform(fe, _complex(e), axis, n, inverse, _norm(norm, loc, what), loc, what)
    return handler


def _fftn(inverse, two):
    what = f"np.fft.{'i' if inverse else ''}fft{'2' if two else 'n'}"

    def handler(fe, loc, a, s=None, axes=(-2, -1) if two else None, norm=None, out=None):
        if out is not None:
            raise unsupported(loc, f"{what}(out=...)", "assign the result instead")
        e = _complex(_operand(fe, a, loc, what))
        nd = len(e.shape)
        if axes is None:
            axes = tuple(range(nd)) if s is None else tuple(range(nd - len(s), nd))
        axes = [axis_index(x, nd, loc) for x in axes]
        if s is not None and len(s) != len(axes):
            raise FlowgradError(f"{loc}: {what}: Shape and axes have different lengths.")
        norm = _norm(norm, loc, what)
        for k, axis in enumerate(axes):
            e = _transform(fe, e, axis, None if s is None else s[k], inverse, norm, loc, what)
        return e
    return handler


def _rfft(fe, loc, a, n=None, axis=-1, norm=None, out=None):
    what = "np.fft.rfft"
    e = _operand(fe, a, loc, what)
    if e.dtype.kind == "c":
        raise unsupported(loc, "np.fft.rfft of complex values (NumPy drops their imaginary parts)",
                          "take np.fft.fft of them, or np.fft.rfft(np.real(z))")
    e = e if e.dtype.kind == "f" else op("float64", e)
    axis = axis_index(axis, len(e.shape), loc)
    n = _length(e, axis, loc, what) if n is None else _points(n, loc, what)
    e = resized(fe, e, axis, n, loc)
    shape = tuple(Const(n // 2 + 1) if k == axis else d for k, d in enumerate(e.shape))
    return _call(fe, "rfft", e, shape, complex_dtype(e.dtype), {"axis": axis, "norm": _norm(norm, loc, what)}, loc)


def _irfft(fe, loc, a, n=None, axis=-1, norm=None, out=None):
    what = "np.fft.irfft"
    e = _complex(_operand(fe, a, loc, what))
    axis = axis_index(axis, len(e.shape), loc)
    n = 2 * (_length(e, axis, loc, what) - 1) if n is None else _points(n, loc, what)
    if n < 1:
        raise FlowgradError(f"{loc}: {what}: Invalid number of FFT data points ({n}) specified.")
    e = resized(fe, e, axis, n // 2 + 1, loc)
    shape = tuple(Const(n) if k == axis else d for k, d in enumerate(e.shape))
    return _call(fe, "irfft", e, shape, real_dtype(e.dtype), {"axis": axis, "n": n, "norm": _norm(norm, loc, what)},
                 loc)


def _shift(sign):
    def handler(fe, loc, x, axes=None):
        e = fe.to_expr(x, loc)
        nd = len(e.shape)
        axes = range(nd) if axes is None else (axes if isinstance(axes, (tuple, list)) else (axes,))
        for axis in axes:
            axis = axis_index(axis, nd, loc)
            m = _length(e, axis, loc, "np.fft.fftshift")
            e = _roll(fe, loc, e, sign * (m // 2), axis)
        return e
    return handler


def _freq(fn):
    def handler(fe, loc, n, d=1.0, **kw):
        if isinstance(n, Expr) or isinstance(d, Expr):
            if const_value(n) is None or const_value(d) is None:
                raise unsupported(loc, f"np.fft.{fn.__name__} of values known only at run time",
                                  "pass n and d as constants (or scale a constant frequency array)")
            n, d = const_value(n), const_value(d)
        return fe.const_array(fn(n, d, **kw))
    return handler


FUNCTIONS = {
    np.fft.fft: _fft(False), np.fft.ifft: _fft(True), np.fft.rfft: _rfft, np.fft.irfft: _irfft,
    np.fft.fft2: _fftn(False, True), np.fft.ifft2: _fftn(True, True), np.fft.fftn: _fftn(False, False),
    np.fft.ifftn: _fftn(True, False), np.fft.fftshift: _shift(1), np.fft.ifftshift: _shift(-1),
    np.fft.fftfreq: _freq(np.fft.fftfreq), np.fft.rfftfreq: _freq(np.fft.rfftfreq),
}
METHODS = {}
