"""Dtype rules for complex values: which dtypes carry derivatives, the real and complex dtypes of
each other, and the element functions complex operands are refused for (``refuse_complex``, which
``core.op`` applies as it builds each node)."""
from __future__ import annotations

import numpy as np


def is_inexact(dtype) -> bool:
    """Float or complex: the dtypes that carry derivatives."""
    return np.dtype(dtype).kind in "fc"


def real_dtype(dtype):
    """The real dtype of a complex one (complex64 -> float32), else ``dtype`` itself."""
    dt = np.dtype(dtype)
    return np.dtype(f"f{dt.itemsize // 2}") if dt.kind == "c" else dt


def complex_dtype(dtype):
    """The complex dtype holding values of ``dtype`` (float32 -> complex64, integers -> complex128)."""
    dt = np.dtype(dtype)
    if dt.kind == "c":
        return dt
    return np.dtype(np.complex64) if dt == np.float32 or dt == np.float16 else np.dtype(np.complex128)


_REAL_CASTS = frozenset({"float64", "float32", "int64", "int32", "bool"})

# Element functions NumPy orders complex numbers for (lexicographically) or does not define for
# them: refused on complex operands rather than given a meaning the math does not have. Casts to
# a real dtype are refused too: they would drop the imaginary part.
COMPLEX_REFUSED = {
    "less": "complex numbers have no order", "less_equal": "complex numbers have no order",
    "greater": "complex numbers have no order", "greater_equal": "complex numbers have no order",
    "maximum": "complex numbers have no order", "minimum": "complex numbers have no order",
    "floor": "complex numbers have no order", "ceil": "complex numbers have no order",
    "round": "complex numbers have no order", "sign": "complex numbers have no order",
    "floor_divide": "complex numbers have no order", "mod": "complex numbers have no order",
    "arctan2": "it is defined for real operands", "hypot": "it is defined for real operands",
    "logaddexp": "it is defined for real operands", "cbrt": "it is defined for real operands",
    "gammaln": "it is defined for real operands", "digamma": "it is defined for real operands",
    "trigamma": "it is defined for real operands", "polygamma": "it is defined for real operands",
    "checked_index": "indices are integers",
    "logical_and": "it is defined for real operands", "logical_or": "it is defined for real operands",
    "logical_not": "it is defined for real operands",
}


class ComplexOperandError(TypeError):
    """An element function applied to complex values it is not defined for (``COMPLEX_REFUSED``),
    or a complex value cast to a real dtype. ``args``: (the construct, what to do instead); the
    frontend reports it at the user's line."""


def refuse_complex(name, args):
    if not any(a.dtype.kind == "c" for a in args):
        return
    if name in COMPLEX_REFUSED:
        what = {"less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}.get(name, f"np.{name}")
        raise ComplexOperandError(f"{what} of complex values ({COMPLEX_REFUSED[name]})",
                                  "compare or combine real values: np.abs(z), np.real(z), np.imag(z)")
    if name in _REAL_CASTS:
        raise ComplexOperandError(f"conversion of complex values to {name} (it would drop the imaginary part)",
                                  "take np.real(z), np.imag(z) or np.abs(z) first")
