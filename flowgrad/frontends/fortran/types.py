"""Fortran types and kinds as gfortran defines them, and their NumPy dtypes.

Reals keep their precision: default ``REAL`` (and a literal such as ``0.7``) is single
precision, ``DOUBLE PRECISION``, ``REAL(8)`` and ``0.7D0`` double. Integers of every kind are
computed in int64 (indices, loop counters and sizes); their declared kind gives the dtype of an
integer result handed back to the caller. Logicals are booleans.
"""
from __future__ import annotations

import numpy as np

from ...errors import unsupported
from ...ir.core import BOOL, I64

F32 = np.dtype(np.float32)
F64 = np.dtype(np.float64)

_REAL = {4: F32, 8: F64}
_INT_OUT = {1: np.dtype(np.int8), 2: np.dtype(np.int16), 4: np.dtype(np.int32), 8: np.dtype(np.int64)}


class TypeSpec:
    """A declared type: ``base`` is integer, real, logical, character, complex or type (a
    derived type, named by ``derived``); ``kind`` as Fortran numbers it."""

    __slots__ = ("base", "kind", "derived")

    def __init__(self, base, kind=None, derived=None):
        self.base = base
        self.kind = kind if kind is not None else {"real": 4, "integer": 4, "logical": 4, "complex": 4}.get(base)
        self.derived = derived

    def dtype(self, loc=None):
        """The IR dtype of values of this type."""
        if self.base == "real":
            if self.kind not in _REAL:
                raise unsupported(loc, f"REAL(KIND={self.kind})", "use single (4) or double (8) precision")
            return _REAL[self.kind]
        if self.base == "integer":
            return I64
        if self.base == "logical":
            return BOOL
        if self.base == "character":
            raise unsupported(loc, "CHARACTER data in a computation",
                              "strings can only be passed around or printed, not computed with")
        if self.base == "complex":
            raise unsupported(loc, "COMPLEX data", "split complex values into real and imaginary parts")
        raise unsupported(loc, f"TYPE({self.derived}) used as a value", "use its components")

    def out_dtype(self, loc=None):
        """The dtype a value of this type has when handed back to the caller."""
        if self.base == "integer":
            return _INT_OUT.get(self.kind, np.dtype(np.int64))
        return self.dtype(loc)

    def __repr__(self):
        return f"{self.base}({self.derived or self.kind})"


def type_of_dtype(dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return TypeSpec("real", dtype.itemsize)
    if dtype.kind == "b":
        return TypeSpec("logical")
    return TypeSpec("integer", 8 if dtype.itemsize == 8 else 4)


def selected_real_kind(p=None, r=None):
    """gfortran's SELECTED_REAL_KIND."""
    p = 0 if p is None else int(p)
    r = 0 if r is None else int(r)
    for kind, digits, exponent in ((4, 6, 37), (8, 15, 307), (10, 18, 4931), (16, 33, 4931)):
        if p <= digits and r <= exponent:
            return kind
    return -1


def selected_int_kind(r):
    r = int(r)
    for kind, digits in ((1, 2), (2, 4), (4, 9), (8, 18), (16, 38)):
        if r <= digits:
            return kind
    return -1


def real_literal(text, kind, loc):
    """(value, dtype) of a real literal: ``0.7`` single precision, ``0.7D0`` double, ``0.7_k``
    of kind ``k``."""
    t = text.lower()
    double = "d" in t
    value = float(t.replace("d", "e"))
    if double:
        if kind is not None:
            raise unsupported(loc, f"real literal {text}_{kind}", "a D exponent already makes it double precision")
        return F64.type(value), F64
    dtype = TypeSpec("real", 4 if kind is None else kind).dtype(loc)
    return dtype.type(value), dtype


def implicit_default():
    """Fortran's implicit typing: I-N integer, other letters default real."""
    return {chr(c): (TypeSpec("integer") if "i" <= chr(c) <= "n" else TypeSpec("real"))
            for c in range(ord("a"), ord("z") + 1)}


# the machine constants of EPSILON, HUGE and TINY, by dtype
def machine(name, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        info = np.finfo(dtype)
        return {"epsilon": info.eps, "huge": info.max, "tiny": info.tiny}[name]
    if name == "huge":
        return np.iinfo(np.int32).max
    raise ValueError(name)
