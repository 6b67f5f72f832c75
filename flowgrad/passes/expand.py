"""Put back the statements a call stands for (``CallRule.expand``: a fixed point's iteration).

Differentiation takes such a call as one operation with rules of its own (``flowgrad.implicit``:
the adjoint solves a linear system instead of reversing the iteration); after it, the pipelines
replace the call by its statements, so the later passes and the backends see ordinary code.
"""
from __future__ import annotations

from ..autodiff.rules import CALLS
from ..ir.core import Call, map_blocks


def expand_calls(stmts):
    """``stmts`` with every call that stands for statements replaced by them (nested ones too)."""
    out = []
    for s in stmts:
        if isinstance(s, Call) and CALLS[s.op].expand is not None:
            out += expand_calls(CALLS[s.op].expand(s))
        else:
            out.append(map_blocks(s, expand_calls))
    return out


__all__ = ["expand_calls"]
