"""Complex numbers: ``np.real``, ``np.imag``, ``np.conj``, ``np.angle``, ``np.vdot``, ``complex()``,
``np.complex128()``, and the ``.real``, ``.imag`` and ``.conj()`` of arrays.

Complex values are containers of dtype complex64 or complex128, computed with the same element
functions as real ones (``ir.core.ELEMENTWISE``: ``real``, ``imag``, ``conj`` and ``angle`` besides
the holomorphic ones); what complex numbers do not define (an order, ``floor``, ``arctan2``) is
refused where it is built (``ir.core.COMPLEX_REFUSED``).

NumPy's ``z.real`` and ``z.imag`` of a complex array are views; here they are copies, recorded as
standing for ``z``'s memory (``indexing.stand_in``), so that writing through one and then reading
the other is refused rather than giving another result than NumPy.
"""
from __future__ import annotations

import numpy as np

from ..errors import FlowgradError
from ..ir.core import Expr, Read, op
from . import indexing
from .numpy_api import _python_scalar, _ravel, matmul


def part(fe, x, which, loc):
    """``x.real`` or ``x.imag`` (``which``): a real array's ``.real`` is the array itself, as NumPy's."""
    if not isinstance(x, Expr):
        return getattr(np, which)(x)
    if which == "real" and x.dtype.kind != "c":
        return x
    e = op(which, x)
    if isinstance(x, Read) and x.shape and x.dtype.kind == "c":
        c = fe.materialize(e, which, loc)
        indexing.stand_in(fe, c.ref.container, x.ref.container, f"z.{which} of a complex array (a view in NumPy)",
                          loc, f"write into the complex array itself (z[k] = ...), or take z.{which} again after "
                          "writing it")
        return c
    return e


def _real(fe, loc, val):
    return part(fe, val, "real", loc)


def _imag(fe, loc, val):
    return part(fe, val, "imag", loc)


def _conj(fe, loc, x):
    return op("conj", fe.to_expr(x, loc)) if isinstance(x, Expr) else np.conj(x)


def _angle(fe, loc, z, deg=False):
    if not isinstance(z, Expr):
        return np.angle(z, deg=deg)
    a = op("angle", fe.to_expr(z, loc))
    return op("multiply", a, 180.0 / np.pi) if deg else a


def _vdot(fe, loc, a, b):
    """``np.vdot``: the conjugate of ``a``, flattened, times ``b``, flattened."""
    ea, eb = _ravel(fe, loc, fe.to_expr(a, loc)), _ravel(fe, loc, fe.to_expr(b, loc))
    if len(ea.shape) != 1 or len(eb.shape) != 1:
        raise FlowgradError(f"{loc}: np.vdot needs arrays")
    return matmul(fe, op("conj", ea) if ea.dtype.kind == "c" else ea, eb, loc)


def _complex(fe, loc, real=0, imag=0):
    """Python's ``complex(real, imag)``: a Python complex, weak in promotion as Python scalars are."""
    if not isinstance(real, Expr) and not isinstance(imag, Expr):
        return complex(real, imag)
    for v in (real, imag):
        if isinstance(v, Expr) and v.shape:
            raise FlowgradError(f"{loc}: only size-1 arrays can be converted to a Python scalar")
    e = op("complex128", fe.to_expr(real, loc))
    if not (isinstance(imag, (int, float)) and imag == 0):
        e = op("add", e, op("multiply", 1j, fe.to_expr(imag, loc)))
    return _python_scalar(fe, e, loc)


def _complex_cast(name):
    """``np.complex128(x)`` / ``np.complex64(x)``: a NumPy complex scalar, or an array converted."""
    def handler(fe, loc, x=0):
        return op(name, x) if isinstance(x, Expr) else getattr(np, name)(x)
    return handler


FUNCTIONS = {
    np.real: _real, np.imag: _imag, np.angle: _angle, np.vdot: _vdot, complex: _complex,
    np.complex128: _complex_cast("complex128"), np.complex64: _complex_cast("complex64"),
}
METHODS = {
    "conj": lambda fe, loc, x: _conj(fe, loc, x), "conjugate": lambda fe, loc, x: _conj(fe, loc, x),
}

__all__ = ["FUNCTIONS", "METHODS", "part"]
