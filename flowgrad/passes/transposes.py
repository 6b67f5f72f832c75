"""Products read transposed: a product that is the transpose of another reads it instead of
being computed again, and the columns of a Gram matrix are read as its rows.

Needs: a captured statement list, before the autodiff. Changes: of two matrix products
``p = x @ y.T`` and, later in the same block, ``q = y @ x.T`` (``(x y^T)^T = y x^T``; any pair of
operands one of which reads the other's matrices transposed), the second becomes ``q = p.T``,
where nothing between the two writes what ``x``, ``y`` or ``p`` read. The value is the same up to
the rounding of the product, which is not symmetric in its operands' order.

A symmetric rank-2k update (PolyBench syr2k's ``A[:i+1, k] * B[i, k] + B[:i+1, k] * A[i, k]``,
``A B^T + B A^T`` once its loops are products) then makes one product instead of two, and its
adjoint two instead of four: the adjoint of ``q = p.T`` adds ``q``'s adjoint transposed to ``p``'s.

A Gram matrix ``g = x^T x`` (or ``x x^T``: ``rules.is_gram``) is symmetric, so where every value a
container holds is one, a read of part of a column, ``g[a:b, i]``, reads the same part of row
``i`` instead: contiguous, where the column is strided (a loop over it does not vectorise), and
its adjoint lands in the row, which the Gram adjoint (``b (gg + gg^T)``) takes either way. syrk's
rows ``C[i, :i+1] += alpha * (A A^T)[:i+1, i]`` read their products so once the contract pass has
made them one.
"""
from __future__ import annotations

from ..autodiff.rules import _swap_last, is_gram
from ..ir.core import (Assign, Call, Index, Read, Ref, Slice, child_blocks, map_blocks, map_refs, same_expr,
                       stmt_writes, walk, written_only_by)


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


def read_gram_rows(stmts):
    """``stmts`` with reads of a Gram matrix's columns made reads of its rows (see the module)."""
    grams = {c for c in written_only_by(stmts, lambda s, c: isinstance(s, Call) and s.op == "matmul" and
                                        s.outputs[0] is c and is_gram(*s.inputs)) if c.ndim == 2}
    if not grams:
        return stmts
    try:
        return map_refs(stmts, lambda r: _row(r, grams))
    except ValueError:              # a call holding statements (a fixed point's): left as it is
        return stmts


def _row(r, symmetric):
    """``g[i, a:b]`` for a column read ``g[a:b, i]`` of a symmetric ``g``; any other ``r`` as it is."""
    if r.container in symmetric and r.perm is None and len(r.items) == 2 and \
            isinstance(r.items[0], Slice) and isinstance(r.items[1], Index):
        return Ref(r.container, (r.items[1], r.items[0]))
    return r
