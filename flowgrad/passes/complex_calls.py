"""Refuse complex operands of the Call ops that do not take them (``CallRule.complex``).

A call such as ``np.sort`` or ``np.linalg.eigh`` of complex values would otherwise run NumPy's
lexicographic order or a real algorithm on them, or lose their imaginary parts on the native
backend: each is named with the user's line instead. Runs on the captured program, before
anything is differentiated; changes nothing.
"""
from __future__ import annotations

from ..autodiff.rules import CALLS
from ..errors import unsupported
from ..ir.core import Call, walk


def refuse_complex_calls(stmts):
    """``stmts`` unchanged, or an UnsupportedError at the first call of an op that takes no complex
    values whose inputs or outputs are complex."""
    for s in walk(stmts):
        if isinstance(s, Call) and not CALLS[s.op].complex and (
                any(e.dtype.kind == "c" for e in s.inputs) or any(c.dtype.kind == "c" for c in s.outputs)):
            raise unsupported(s.loc, f"{s.op} of complex values",
                              "flowgrad computes with complex values in elementwise arithmetic, sums and products, "
                              "matrix products, linear solves and FFTs; apply this to real values (np.real(z), "
                              "np.imag(z), np.abs(z))")
    return stmts
