"""Sum a loop of products with one matrix product.

Needs: a captured statement list and its containers, before the autodiff (so that the
derivative program is built from the product too). Changes: a loop whose body is one update
``X[v] += e`` (or ``-=``), where ``e`` is a sum of terms, each the product of factors of which
exactly two read the loop variable ``k``, each of those as a plain index of one axis (``A[i, k]``,
``A[:n, k]``, ``b[k, None, :]``), becomes ``X[v] += e'``, where each term of ``e'`` is the term's
other factors times the ``matmul`` of its two factors' views over the loop's range (``A[:n, lo:hi]
@ A[i, lo:hi]``). The update (``X[v] = X[v] - e`` too) must be to a place the loop does not move, of a container nothing
else in the loop reads (so no iteration reads what an earlier one wrote).

A loop of axpy updates (syrk's ``C[i, :i + 1] += alpha * A[i, k] * A[:i + 1, k]``) becomes one
matrix-vector product, a loop of outer products a matrix product, and a loop of scalar products
a dot product: each a BLAS call over contiguous rows, where the loop walked a column per
iteration. Their adjoints are products too, so the gradient gains the same way. The sum over
``k`` is added in another order (the compiled functions reassociate sums anyway). The update is
skipped when the loop makes no iteration, and the loop variable keeps the value the loop leaves
in it.
"""
from __future__ import annotations

from ..ir.core import (Assign, Call, Const, Container, For, If, Index, NewAxis, Op, Read, Ref, Slice, const_value,
                       iter_reads, map_blocks, op, same_expr, same_ref, scalar)
from .outer import factors, product

# Below this many iterations (when known) a product call costs more than the loop it replaces.
_MIN_TRIPS = 8


def contract_product_loops(stmts, containers, namer):
    """``stmts`` with each loop of products summed by matrix products (see the module)."""
    out = []
    for s in stmts:
        s = map_blocks(s, lambda b: contract_product_loops(b, containers, namer))
        raised = _contract(s, containers, namer) if isinstance(s, For) else None
        out += [s] if raised is None else raised
    return out


def _contract(loop, containers, namer):
    if loop.reverse or const_value(loop.step) != 1 or len(loop.body) != 1:
        return None
    s = loop.body[0]
    k = loop.var
    update = _update(s)
    if update is None:
        return None
    sign, expr = update
    dst = s.dst.container
    if any(r.ref.container in (k, dst) for ie in s.dst.index_exprs() for r in iter_reads(ie)) or \
            any(r.ref.container is dst for r in iter_reads(expr)):
        return None
    trips = op("maximum", Const(0), op("subtract", loop.stop, loop.start))
    if const_value(trips) is not None and const_value(trips) < _MIN_TRIPS:
        return None
    terms = _terms(expr, sign)
    if terms is None:
        return None
    calls, parts = [], []
    for sign, fs in terms:
        ours = [f for f in fs if _reads(f, k)]
        scale = [f for f in fs if not _reads(f, k)]
        if len(ours) != 2 or any(f.dtype != dst.dtype for f in ours):
            return None
        views = [_along(f, k, loop.start, trips) for f in ours]
        if None in views:
            return None
        made = _product_of(views, containers, namer, s.loc)
        if made is None:
            return None
        call, result = made
        calls.append(call)
        part = product([result] + scale)
        parts.append(part if sign > 0 else op("negative", part))
    total = parts[0]
    for p in parts[1:]:
        total = op("add", total, p)
    last = op("subtract", loop.stop, Const(1))
    body = calls + [Assign(s.dst, total, accumulate=True, loc=s.loc), Assign(Ref(k, ()), last, loc=loop.loc)]
    runs = op("greater", loop.stop, loop.start)
    if const_value(runs) is not None:
        return body if const_value(runs) else []
    return [If(runs, body, [], loop.loc)]


def _update(s):
    """``(sign, e)`` for ``dst += e`` or ``dst = dst + e`` (sign 1) and ``dst = dst - e`` (sign -1)
    of floating-point values, else None."""
    if not (isinstance(s, Assign) and s.dst.container.dtype.kind == "f"):
        return None
    if s.accumulate:
        return 1, s.expr
    e = s.expr
    if isinstance(e, Op) and e.name in ("add", "subtract") and e.dtype == s.dst.container.dtype:
        left, right = e.args
        if isinstance(left, Read) and same_ref(left.ref, s.dst):
            return (1 if e.name == "add" else -1), right
        if e.name == "add" and isinstance(right, Read) and same_ref(right.ref, s.dst):
            return 1, left
    return None


def _terms(e, sign=1):
    """``[(sign, factors)]`` for a sum of products, or None."""
    if isinstance(e, Op) and e.name in ("add", "subtract"):
        left, right = _terms(e.args[0], sign), _terms(e.args[1], sign if e.name == "add" else -sign)
        return None if left is None or right is None else left + right
    if isinstance(e, Op) and e.name == "negative":
        return _terms(e.args[0], -sign)
    fs = factors(e)
    return None if fs is None else [(sign, fs)]


def _reads(e, k):
    return any(r.ref.container is k for r in iter_reads(e))


class _View:
    """A factor's view with the loop's axis as a slice: its Ref, the position of that axis
    among the view's axes, and the factor's other axes (sizes, right-aligned as broadcast)."""

    def __init__(self, ref, axis, sizes):
        self.ref, self.axis, self.sizes = ref, axis, sizes


def _along(f, k, start, trips):
    """``f`` (a Read whose one item ``Index(k)`` is the only place it reads ``k``) as a view over
    the loop's range, or None. Length-one slices become indices and new axes are dropped; the
    broadcast shape of ``f`` itself is kept in ``sizes``."""
    if not isinstance(f, Read) or f.ref.perm is not None:
        return None
    ref = f.ref
    items, axis, found = [], None, 0
    for it in ref.items:
        if isinstance(it, Index) and isinstance(it.at, Read) and same_expr(it.at, scalar(k)):
            axis = sum(isinstance(x, Slice) for x in items)
            items.append(Slice(start, trips, 1))
            found += 1
            continue
        if isinstance(it, Index):
            if _reads(it.at, k):
                return None
            items.append(it)
        elif isinstance(it, Slice):
            if any(_reads(x, k) for x in (it.start, it.size, it.step)):
                return None
            items.append(Index(it.start) if const_value(it.size) == 1 else it)
        # NewAxis: dropped, only ``sizes`` keeps it
    if found != 1:
        return None
    if sum(isinstance(x, Slice) for x in items) > 2:
        return None
    return _View(Ref(ref.container, items), axis, f.shape)


def _product_of(views, containers, namer, loc):
    """``(call, result)``: a matmul of the two views summing over the loop's axis, and a Read of
    its result shaped as the product of the two factors broadcast; or None when the factors share
    an axis (a batch of products) or have more than one axis each."""
    rank = max(len(v.sizes) for v in views)
    sizes = [(Const(1),) * (rank - len(v.sizes)) + tuple(v.sizes) for v in views]
    owner = []                       # per broadcast axis: which factor spans it (None: neither)
    for a in range(rank):
        spans = [i for i in (0, 1) if const_value(sizes[i][a]) != 1]
        if len(spans) > 1:
            return None
        owner.append(spans[0] if spans else None)
    axes = [[a for a in range(rank) if owner[a] == i] for i in (0, 1)]
    if any(len(x) > 1 for x in axes):
        return None
    for v, x in zip(views, axes):
        if len([it for it in v.ref.items if isinstance(it, Slice)]) != 1 + len(x):
            return None
    # (n, K) @ (K, m), (n, K) @ (K,), (K,) @ (K, n) or (K,) @ (K,); of two factors with an axis
    # the one spanning the earlier axis goes first, and a factor with one goes where its layout
    # needs no transpose (its adjoint is then a product over rows too)
    if all(axes):
        order = sorted((0, 1), key=lambda i: axes[i][0])
    elif any(axes):
        d = 0 if axes[0] else 1
        order = [d, 1 - d] if views[d].axis == 1 else [1 - d, d]
    else:
        order = [0, 1]
    a, b = (_operand(views[i], axes[i], first) for i, first in zip(order, (True, False)))
    shape = tuple(sizes[owner[x]][x] for x in range(rank) if owner[x] is not None)
    dtype = views[0].ref.container.dtype
    out = Container(namer("contracted"), dtype, shape, "transient")
    containers[out.name] = out
    result_items = [Slice(0, sizes[owner[x]][x], 1) if owner[x] is not None else NewAxis() for x in range(rank)]
    result = Read(Ref(out, result_items) if rank else Ref(out, ()))
    return Call("matmul", [a, b], [out], loc=loc), result


def _operand(view, axes, first):
    """A Read of ``view`` as a matmul operand: ``(n, K)`` when ``first``, else ``(K, n)``; ``(K,)``
    for a view with no axis besides the loop's."""
    ref = view.ref
    turn = axes and (view.axis == 0) == first
    return Read(Ref(ref.container, ref.items, (1, 0) if turn else None))


__all__ = ["contract_product_loops"]
