"""A product that is the transpose of another reads it instead of being computed again.

Needs: a captured statement list, before the autodiff. Changes: of two matrix products
``p = x @ y.T`` and, later in the same block, ``q = y @ x.T`` (``(x y^T)^T = y x^T``; any pair of
operands one of which reads the other's matrices transposed), the second becomes ``q = p.T``,
where nothing between the two writes what ``x``, ``y`` or ``p`` read. The value is the same up to
the rounding of the product, which is not symmetric in its operands' order.

A symmetric rank-2k update (PolyBench syr2k's ``A[:i+1, k] * B[i, k] + B[:i+1, k] * A[i, k]``,
``A B^T + B A^T`` once its loops are products) then makes one product instead of two, and its
adjoint two instead of four: the adjoint of ``q = p.T`` adds ``q``'s adjoint transposed to ``p``'s.
"""
from __future__ import annotations

from ..autodiff.rules import _swap_last
from ..ir.core import Assign, Call, Read, Ref, child_blocks, map_blocks, same_expr, stmt_writes, walk


def share_transposed_products(stmts):
    """``stmts`` with each product that is the transpose of an earlier one in its block made a
    transposed read of it (see the module)."""
    out = []
    for s in stmts:
        s = map_blocks(s, share_transposed_products)
        if _product(s):
            earlier = next((p for p in reversed(out) if _product(p) and _transposed(p, s)), None)
            if earlier is not None and _unchanged(out[out.index(earlier) + 1:], earlier):
                s = Assign(Ref(s.outputs[0]), _swap_last(Read(Ref(earlier.outputs[0]))))
        out.append(s)
    return out


def _product(s):
    return isinstance(s, Call) and s.op == "matmul" and all(
        isinstance(e, Read) and len(e.shape) == 2 for e in s.inputs) and len(s.outputs[0].shape) == 2


def _transposed(p, q):
    """Whether ``q``'s product is ``p``'s transposed: ``q = b^T a^T`` for ``p = a b``."""
    (a, b), (c, d) = p.inputs, q.inputs
    return same_expr(c, _swap_last(b)) and same_expr(d, _swap_last(a)) and \
        p.outputs[0].dtype == q.outputs[0].dtype


def _unchanged(between, p):
    """Whether no statement of ``between`` writes what product ``p`` reads or its output."""
    read = {e.ref.container for e in p.inputs} | {p.outputs[0]}
    return not any(w.container in read for s in walk(between) for w in stmt_writes(s)
                   if not child_blocks(s))
