"""Check at run time that sizes known only then agree where NumPy requires it.

Needs: a captured statement list and its container table. Changes: before a statement whose
operands broadcast along an axis whose sizes are expressions that may differ (``x[k:k + 4] *
x[:4]``, the 4 of ``x[k:k + 4]`` being clipped at the end of ``x``; ``w[:] = x[a:b]``), a
``check_sizes`` Call is inserted that raises ValueError, naming the statement's line, when they
do. NumPy raises there too, except where one size is 1 and broadcasts: the loop nests flowgrad
generates take a size known only at run time as the size of the axis, so that case is an error
as well, which says so. Without the check the nest would read past the end of the shorter
operand. Sizes that are equal as expressions, or constants (checked when captured), need none.
"""
from __future__ import annotations

from ..ir.core import BOOL, Assign, Call, Container, Op, Take, const_value, map_blocks, same_expr


def insert_size_checks(stmts, containers, namer):
    """``stmts`` with a ``check_sizes`` before each statement that needs one (see the module)."""
    out = []
    for s in stmts:
        s = map_blocks(s, lambda b: insert_size_checks(b, containers, namer))
        pairs = _pairs(s)
        if pairs:
            flag = Container(namer("sizes_ok"), BOOL, (), "transient")
            containers[flag.name] = flag
            text = ", ".join("{} and {}" for _ in pairs)
            message = (f"{s.loc}: operands could not be broadcast together: an axis of sizes {text} "
                       "(sizes known only at run time must be equal: flowgrad does not broadcast a "
                       "length-1 axis whose length is known only at run time)")
            out.append(Call("check_sizes", [e for ab in pairs for e in ab], [flag], {"message": message},
                            loc=s.loc))
        out.append(s)
    return out


def _pairs(s):
    """The pairs of sizes statement ``s`` assumes equal without knowing it."""
    pairs = []

    def need(a, b, broadcasts=True):
        if broadcasts and (const_value(a) == 1 or const_value(b) == 1) or same_expr(a, b):
            return
        if const_value(a) is not None and const_value(b) is not None:
            return                    # different constants raised when the program was captured
        if not any(same_expr(a, x) and same_expr(b, y) or same_expr(a, y) and same_expr(b, x)
                   for x, y in pairs):
            pairs.append((a, b))

    def broadcast(shapes):
        ndim = max((len(sh) for sh in shapes), default=0)
        for axis in range(1, ndim + 1):
            dims = [sh[-axis] for sh in shapes if len(sh) >= axis]
            for d in dims[1:]:
                need(dims[0], d)

    def visit(e):
        if isinstance(e, Op):
            for a in e.args:
                visit(a)
            broadcast([a.shape for a in e.args])
        elif isinstance(e, Take):
            for a in e.index:
                visit(a)

    if isinstance(s, Assign):
        visit(s.expr)
        for axis in range(1, len(s.expr.shape) + 1):     # the value broadcasts into the view
            if const_value(s.expr.shape[-axis]) != 1:
                need(s.dst.shape[-axis], s.expr.shape[-axis], broadcasts=False)
    elif isinstance(s, Call):
        for e in s.inputs:
            visit(e)
        if s.op in ("scatter", "add_at"):              # the values broadcast to what the index picks
            value, into = s.inputs[0].shape, s.attrs["value_shape"]
            for axis in range(1, min(len(value), len(into)) + 1):
                if const_value(value[-axis]) != 1:
                    need(into[-axis], value[-axis], broadcasts=False)
    return pairs


__all__ = ["insert_size_checks"]
