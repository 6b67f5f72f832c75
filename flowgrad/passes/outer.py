"""Sum a loop's outer-product updates with matrix products instead of one pass per iteration.

Needs: a statement list (the backward sweep of a gradient). Changes: in a reversed loop, an
update ``G[v] += a[:, newaxis] * b[newaxis, :]`` (the adjoint of a matrix-vector product
``W @ x``, or of a row ``A[i] @ B``), where nothing else in the loop reads ``G`` or writes it but
by adding to it (the sums commute), stores ``a`` and ``b`` as the next rows of two stacks
instead; every ``_ROWS`` rows, and after the loop, ``G[w] += A_stack.T @ B_stack``. Each
iteration's pass over ``G`` (read and written, memory-bound) becomes part of a BLAS product:
lif_neurons' ``g_W`` over 50 steps, k2mm's ``g_B`` over the rows of ``A``. An update under a
branch stores its rows only when the branch runs.

``w`` is ``v`` when the loop does not move it. When one end of an axis of ``v`` moves with the
loop and the other stays (the triangular sweeps ``G[:, i:]``, ``G[:i + 1, :]`` of covariance-style
products), ``w`` spans that axis from the end that stays to the container's edge, and each
stored row is zero outside the iteration's part of it: the product adds zeros there.
"""
from __future__ import annotations

from ..ir.core import (F64, I64, Assign, Call, Const, Container, For, If, Index, NewAxis, Op, Read, Ref, Slice,
                       const_value, iter_reads, map_blocks, op, same_expr, scalar, stmt_reads, stmt_writes,
                       walk)


# Below this many elements a rank-one update costs less than storing its vectors and a product
# call, and the stacks could outgrow the matrix they sum into.
_MIN_ELEMENTS = 4096
# Rows a stack holds: when full, its product is added and it starts again, so the stacks stay
# small whatever the trip count, and each product is still a BLAS-sized one.
_ROWS = 64


def defer_outer_products(stmts, containers, namer):
    """``stmts`` with outer-product updates in reversed loops summed after them (see the module)."""
    out = []
    for s in stmts:
        s = map_blocks(s, lambda b: defer_outer_products(b, containers, namer))
        if isinstance(s, For) and s.reverse:
            before, loop, after = _defer(s, containers, namer)
            out += before + [loop] + after
        else:
            out.append(s)
    return out


def _defer(loop, containers, namer):
    written = {w.container for t in walk(loop.body) for w in stmt_writes(t)} | {loop.var}
    before, after = [], []
    found = {id(t): (t, _outer_update(t, written)) for t in walk(loop.body)}
    found = {k: v for k, (t, v) in found.items() if v is not None}

    def alone(dst):
        """Nothing but sums into it touches ``dst``'s container in the loop: the sums commute, so
        the outer products can be added after the loop."""
        for u in walk(loop.body):
            if id(u) in found or _adds_to(u, dst.container):
                continue
            if any(r.ref.container is dst.container for r in stmt_reads(u)) or \
                    any(w.container is dst.container for w in stmt_writes(u)):
                return False
        return True

    candidates = {k: v for k, v in found.items() if alone(v[0])}

    def block(stmts):
        # an update under a branch not taken stores no row
        out = []
        for s in stmts:
            if isinstance(s, If):
                out.append(If(s.cond, block(s.then), block(s.orelse), s.loc))
                continue
            found = candidates.get(id(s))
            if found is None:
                out.append(s)
                continue
            dst, a, b, cover = found
            n, m = (it.size for it in cover)
            name = dst.container.name
            stack_a = _new(containers, namer, "stack_" + name, (_ROWS, n))
            stack_b = _new(containers, namer, "stack_" + name, (_ROWS, m))
            rows = _new(containers, namer, "rows_" + name, (), I64)
            total = _new(containers, namer, "sum_" + name, (n, m))
            target = _cover_ref(dst, cover)

            def flush(k):
                part = [Slice(0, k, 1)]
                return [Call("matmul_tn_flat", [Read(Ref(stack_a, part + [Slice(0, n, 1)])),
                                                Read(Ref(stack_b, part + [Slice(0, m, 1)]))], [total], {}, s.loc),
                        Assign(target, Read(Ref(total)), accumulate=True, loc=s.loc)]

            before.extend([Assign(Ref(stack_a), Const(0.0)), Assign(Ref(stack_b), Const(0.0)),
                           Assign(Ref(rows, ()), Const(0))])
            for stack, vector, view, whole in ((stack_a, a, _axis_items(dst)[0], cover[0]),
                                               (stack_b, b, _axis_items(dst)[1], cover[1])):
                out += _stack_row(stack, rows, vector, view, whole, s.loc)
            out += [Assign(Ref(rows, ()), Const(1), accumulate=True),
                    If(op("equal", scalar(rows), Const(_ROWS)), flush(Const(_ROWS)) + [Assign(Ref(rows, ()), Const(0))])]
            after.extend(flush(scalar(rows)))
        return out

    body = block(loop.body)
    return before, For(loop.var, loop.start, loop.stop, loop.step, body, loop.reverse, loop.loc), after


def _new(containers, namer, hint, shape, dtype=F64):
    c = Container(namer(hint), dtype, shape, "transient")
    containers[c.name] = c
    return c


def _outer_update(s, written):
    """``(dst, a, b, cover)`` when ``s`` is ``dst += a[:, newaxis] * b[newaxis, :]`` at a position
    ``cover`` holds in every iteration (see ``_cover``), with ``a`` and ``b`` as vectors; else None."""
    if not (isinstance(s, Assign) and s.accumulate and s.dst.perm is None and len(s.dst.shape) == 2
            and s.dst.container.dtype == F64):
        return None
    g = s.dst.container
    if any(r.ref.container is g for r in iter_reads(s.expr)):
        return None
    cover = _cover(s.dst, written)
    if cover is None:
        return None
    n, m = (const_value(it.size) for it in cover)
    if n is not None and m is not None and n * m < _MIN_ELEMENTS:
        return None
    fs = factors(s.expr)
    if fs is None:
        return None
    n, m = s.dst.shape
    cols, rows, scale = [], [], []
    for f in fs:
        shape = f.shape
        if shape == ():
            scale.append(f)
        elif len(shape) == 2 and const_value(shape[1]) == 1 and const_value(shape[0]) != 1:
            cols.append(_drop_axis(f, 1))
        elif len(shape) == 1 or len(shape) == 2 and const_value(shape[0]) == 1 and const_value(shape[1]) != 1:
            rows.append(f if len(shape) == 1 else _drop_axis(f, 0))
        else:
            return None
    if not cols or not rows or any(c is None for c in cols + rows):
        return None
    a = product(cols + scale)
    b = product(rows)
    if len(a.shape) != 1 or len(b.shape) != 1 or not (same_expr(a.shape[0], n) and same_expr(b.shape[0], m)):
        return None
    return s.dst, a, b, cover


def _moves(e, written):
    return any(r.ref.container in written for r in iter_reads(e))


def _axis_items(ref):
    """The two Slice items of a 2-D view without new axes, in order."""
    return [it for it in ref.items if isinstance(it, Slice)]


def _cover(dst, written):
    """Per axis of the 2-D view ``dst``, a Slice the loop does not move that holds every
    iteration's part of that axis: the view's own, or where one end of it moves with the loop (a
    triangular sweep, ``G[:, i:]``), the rest of the axis from the end that stays; None when the
    position moves otherwise (or an index does)."""
    if any(isinstance(it, NewAxis) for it in dst.items) or any(
            isinstance(it, Index) and _moves(it.at, written) for it in dst.items):
        return None
    axes = [(it, d) for it, d in zip(dst.items, dst.container.shape) if isinstance(it, Slice)]
    if len(axes) != 2:
        return None
    cover = []
    for it, dim in axes:
        if const_value(it.step) != 1 or _moves(it.step, written):
            return None
        if not _moves(it.start, written) and not _moves(it.size, written):
            cover.append(it)
        elif not _moves(it.start, written):
            cover.append(Slice(it.start, op("subtract", dim, it.start), 1))
        elif _ends_at(it, written) is not None:
            cover.append(Slice(Const(0), _ends_at(it, written), 1))
        else:
            return None
    return cover


def _ends_at(it, written):
    """The end of ``it`` when its size is ``maximum(0, end - start)`` with an end the loop does not
    move (a slice ``x[i:end]`` as captured), else None."""
    size = it.size
    if isinstance(size, Op) and size.name == "maximum" and const_value(size.args[0]) == 0:
        size = size.args[1]
    if isinstance(size, Op) and size.name == "subtract" and same_expr(size.args[1], it.start) and \
            not _moves(size.args[0], written):
        return size.args[0]
    return None


def _cover_ref(dst, cover):
    items, axes = [], iter(cover)
    for it in dst.items:
        items.append(next(axes) if isinstance(it, Slice) else it)
    return Ref(dst.container, items)


def _stack_row(stack, rows, vector, view, whole, loc):
    """Statements storing ``vector`` (the values of ``view`` of an axis) as the next row of
    ``stack``, whose rows span ``whole``: zero outside the view when it is only part of it."""
    row = [Index(scalar(rows))]
    if view is whole:
        return [Assign(Ref(stack, row + [Slice(0, whole.size, 1)]), vector, loc=loc)]
    offset = op("subtract", view.start, whole.start)
    return [Assign(Ref(stack, row + [Slice(0, whole.size, 1)]), Const(0.0), loc=loc),
            Assign(Ref(stack, row + [Slice(offset, view.size, 1)]), vector, loc=loc)]


def _adds_to(s, g):
    """Whether ``s`` only adds to part of ``g`` what it computes without reading ``g``."""
    return isinstance(s, Assign) and s.accumulate and s.dst.container is g and \
        not any(r.ref.container is g for r in iter_reads(s.expr)) and \
        not any(r.ref.container is g for ie in s.dst.index_exprs() for r in iter_reads(ie))


def factors(e):
    """The factors of a product (a negation is a factor -1), or None when ``e`` is not one."""
    if isinstance(e, Op) and e.name == "multiply":
        left, right = factors(e.args[0]), factors(e.args[1])
        return None if left is None or right is None else left + right
    if isinstance(e, Op) and e.name == "negative":
        inner = factors(e.args[0])
        return None if inner is None else inner + [Const(-1.0)]
    return [e]


def product(fs):
    """The product of expressions ``fs`` (at least one)."""
    e = fs[0]
    for f in fs[1:]:
        e = op("multiply", e, f)
    return e


def _drop_axis(e, axis):
    """``e`` without its broadcast (length-one) axis ``axis`` of two, or None."""
    if isinstance(e, Const):
        return e
    if isinstance(e, Read):
        ref = e.ref
        view = [k for k, it in enumerate(ref.items) if not isinstance(it, Index)]
        if len(view) != 2 or ref.perm is not None:
            return None
        k = view[axis]
        it = ref.items[k]
        items = list(ref.items)
        if isinstance(it, NewAxis):
            del items[k]
        elif isinstance(it, Slice) and const_value(it.size) == 1:
            items[k] = Index(it.start)
        else:
            return None
        return Read(Ref(ref.container, items))
    if isinstance(e, Op):
        args = []
        for x in e.args:
            if len(x.shape) < 2:
                if axis == 1 and len(x.shape) == 1 and const_value(x.shape[0]) != 1:
                    return None             # a row operand inside a column factor
                args.append(x)
            else:
                y = _drop_axis(x, axis)
                if y is None:
                    return None
                args.append(y)
        return op(e.name, *args)
    return None


__all__ = ["defer_outer_products", "factors", "product"]
