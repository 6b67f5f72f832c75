"""Sum a loop's outer-product updates with matrix products instead of one pass per iteration.

Needs: a statement list (the backward sweep of a gradient). Changes: in a reversed loop, an
update ``G[v] += a[:, newaxis] * b[newaxis, :]`` (the adjoint of a matrix-vector product
``W @ x``, or of a row ``A[i] @ B``), where nothing else in the loop touches ``G`` and ``v`` is the
same in every iteration, stores ``a`` and ``b`` as the next rows of two stacks instead; every
``_ROWS`` rows, and after the loop, ``G[v] += A_stack.T @ B_stack``. Each iteration's pass over
``G`` (read and written, memory-bound) becomes part of a BLAS product: lif_neurons' ``g_W`` over
50 steps, k2mm's ``g_B`` over the rows of ``A``. An update under a branch stores its rows only
when the branch runs.
"""
from __future__ import annotations

from ..ir.core import (F64, I64, Assign, Call, Const, Container, For, If, Index, NewAxis, Op, Read, Ref, Slice,
                       const_value, iter_reads, map_blocks, op, same_expr, same_ref, scalar, stmt_reads, stmt_writes,
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
        """Nothing but updates of the region ``dst`` touches its container in the loop."""
        for u in walk(loop.body):
            other = found.get(id(u))
            if other is not None and same_ref(other[0], dst):
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
            dst, a, b = found
            n, m = dst.shape
            name = dst.container.name
            stack_a = _new(containers, namer, "stack_" + name, (_ROWS, n))
            stack_b = _new(containers, namer, "stack_" + name, (_ROWS, m))
            rows = _new(containers, namer, "rows_" + name, (), I64)
            total = _new(containers, namer, "sum_" + name, (n, m))

            def flush(k):
                part = [Slice(0, k, 1)]
                return [Call("matmul_tn_flat", [Read(Ref(stack_a, part + [Slice(0, n, 1)])),
                                                Read(Ref(stack_b, part + [Slice(0, m, 1)]))], [total], {}, s.loc),
                        Assign(dst, Read(Ref(total)), accumulate=True, loc=s.loc)]

            before.extend([Assign(Ref(stack_a), Const(0.0)), Assign(Ref(stack_b), Const(0.0)),
                           Assign(Ref(rows, ()), Const(0))])
            out += [Assign(Ref(stack_a, [Index(scalar(rows)), Slice(0, n, 1)]), a, loc=s.loc),
                    Assign(Ref(stack_b, [Index(scalar(rows)), Slice(0, m, 1)]), b, loc=s.loc),
                    Assign(Ref(rows, ()), Const(1), accumulate=True),
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
    """``(dst, a, b)`` when ``s`` is ``dst += a[:, newaxis] * b[newaxis, :]`` at a position the
    loop does not move, with ``a`` and ``b`` as vectors; else None."""
    if not (isinstance(s, Assign) and s.accumulate and s.dst.perm is None and len(s.dst.shape) == 2
            and s.dst.container.dtype == F64):
        return None
    g = s.dst.container
    if any(r.ref.container in written for ie in s.dst.index_exprs() for r in iter_reads(ie)) or \
            any(r.ref.container is g for r in iter_reads(s.expr)):
        return None
    n, m = (const_value(d) for d in s.dst.shape)
    if n is not None and m is not None and n * m < _MIN_ELEMENTS:
        return None
    factors = _factors(s.expr)
    if factors is None:
        return None
    n, m = s.dst.shape
    cols, rows, scale = [], [], []
    for f in factors:
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
    a = _product(cols + scale)
    b = _product(rows)
    if len(a.shape) != 1 or len(b.shape) != 1 or not (same_expr(a.shape[0], n) and same_expr(b.shape[0], m)):
        return None
    return s.dst, a, b


def _factors(e):
    """The factors of a product (a negation is a factor -1), or None when ``e`` is not one."""
    if isinstance(e, Op) and e.name == "multiply":
        left, right = _factors(e.args[0]), _factors(e.args[1])
        return None if left is None or right is None else left + right
    if isinstance(e, Op) and e.name == "negative":
        inner = _factors(e.args[0])
        return None if inner is None else inner + [Const(-1.0)]
    return [e]


def _product(fs):
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


__all__ = ["defer_outer_products"]
