"""Turn sums into shifted views of one array into one sum per element (scatter to gather).

Needs: a statement list (the backward sweep of a gradient). Changes: a run of consecutive
accumulations ``g[o_1 : o_1 + n] += e_1``, ..., ``g[o_m : o_m + n] += e_m`` into views of one
array that differ only by constant offsets (the adjoint of a stencil
``u[1:-1] = u[:-2] + u[1:-1] + u[2:]``, or of a 5-point one in 2-D), of constant extents at least
their spread, none reading ``g``, becomes one accumulation per piece of the union where the same
statements contribute: ``g[k] += e_1(k - o_1) + ... + e_m(k - o_m)`` over the middle, shorter sums at the
ends. Each element of ``g`` is then read and written once instead of ``m`` times, and no loop
carries a dependence through memory (which stops vectorisation when the views are fused into
one loop). Only the order in which an element's contributions are added changes.
"""
from __future__ import annotations

import itertools

from ..frontends.indexing import view
from ..ir.core import (DISJOINT, Assign, Const, Index, Op, Read, Ref, Slice, broadcast_shapes, const_value,
                       iter_reads, map_blocks, view_offsets)


def gather_shifted_sums(stmts):
    """``stmts`` with runs of shifted accumulations into one array gathered (see the module)."""
    stmts = [map_blocks(s, gather_shifted_sums) for s in stmts]
    out, k = [], 0
    while k < len(stmts):
        first, fill = stmts[k], []
        if _assigned(first):
            # ``g[v] = e`` opening a run of sums into ``g`` is ``g[v] = 0`` and ``g[v] += e``: the
            # clearing of an overwritten adjoint fused with its first sum (``cleared`` folds the
            # fill into the gathered pieces it lies under)
            stmts = stmts[:k] + [Assign(first.dst, first.expr, True, first.loc)] + stmts[k + 1:]
            fill = [Assign(first.dst, Const(0.0), False, first.loc)]
        run = _run(stmts, k)
        # the longest leading part of the run that gathers (a 7-point 3-D stencil's adjoint has
        # too many pieces at once: its shifts along the first two axes gather, then the third's)
        n, plan = next(((n, p) for n in range(len(run), 1, -1) for p in [_segments(run[:n])] if p is not None),
                       (1, None))
        if plan is None:
            out.append(first)
        else:
            out += fill + plan
        k += n
    return out


def _assigned(s):
    """Whether ``s`` writes a view of an array with a value that reads nothing of the array."""
    return isinstance(s, Assign) and not s.accumulate and _candidate(Assign(s.dst, s.expr, True)) and \
        not isinstance(s.expr, Const) and \
        not any(r.ref.container is s.dst.container for r in iter_reads(s.expr))


def _run(stmts, k):
    first = stmts[k]
    if not _candidate(first):
        return []
    c = first.dst.container
    run = [first]
    for s in stmts[k + 1:]:
        if not (_candidate(s) and s.dst.container is c and len(s.dst.items) == len(first.dst.items)):
            break
        run.append(s)
    if any(r.ref.container is c for s in run for r in iter_reads(s.expr)) or \
            any(r.ref.container is c for s in run for ie in s.dst.index_exprs() for r in iter_reads(ie)):
        return []
    return run


def _candidate(s):
    return isinstance(s, Assign) and s.accumulate and s.dst.container.ndim > 0 and s.dst.perm is None \
        and len(s.dst.shape) > 0


_MAX_PIECES = 32        # sums per gathered run (the pieces of a 5-point 2-D stencil: 25)


def _segments(run):
    """The gathered statements, or None when ``run`` is not of the form handled."""
    base = run[0].dst
    offsets = []                  # per statement: item position -> offset from ``base``
    for s in run:
        off = view_offsets(base, s.dst)
        if off is None or off is DISJOINT or \
                any(const_value(base.items[p].step) != 1 or const_value(base.items[p].size) is None for p in off):
            return None
        offsets.append(off)
    moving = [pos for pos in offsets[0] if any(o[pos] for o in offsets)]
    extent = {pos: const_value(base.items[pos].size) for pos in moving}
    if not moving or any(extent[p] < max(o[p] for o in offsets) - min(o[p] for o in offsets) for p in moving):
        return None
    spans = []                    # per moving axis: the stretches where the same statements contribute
    for p in moving:
        bounds = sorted({o[p] for o in offsets} | {o[p] + extent[p] for o in offsets})
        spans.append(list(zip(bounds, bounds[1:])))
    if len(list(itertools.product(*spans))) > _MAX_PIECES:
        return None
    space = {p: sum(1 for it in base.items[:p] if not isinstance(it, Index)) for p in moving}
    out = []
    for piece in itertools.product(*spans):
        terms = []
        for s, o in zip(run, offsets):
            if all(o[p] <= lo and hi <= o[p] + extent[p] for p, (lo, hi) in zip(moving, piece)):
                e = s.expr
                for p, (lo, hi) in zip(moving, piece):
                    e = _shift(e, space[p], len(base.shape), lo - o[p], hi - lo, s.loc)
                terms.append(e)
        if not terms:
            continue
        expr = terms[0]
        for t in terms[1:]:
            expr = Op("add", (expr, t), expr.dtype, broadcast_shapes(expr.shape, t.shape))
        items = list(base.items)
        for p, (lo, hi) in zip(moving, piece):
            start = base.items[p].start
            items[p] = Slice(start + Const(lo) if lo else start, Const(hi - lo), Const(1))
        out.append(Assign(Ref(base.container, items), expr, True, run[0].loc))
    return out


def _shift(e, axis, rank, delta, size, loc):
    """``e`` (an expression over a space of ``rank`` axes) read at positions ``delta`` to
    ``delta + size`` along ``axis`` of that space."""
    if isinstance(e, Read):
        shape = e.ref.shape
        k = axis - (rank - len(shape))
        if k < 0 or const_value(shape[k]) == 1:
            return e                      # broadcast along that axis (or one element)
        idx = tuple(slice(delta, delta + size) if j == k else slice(None) for j in range(len(shape)))
        return Read(view(e.ref, idx, loc))
    if isinstance(e, Op):
        args = [_shift(a, axis, rank, delta, size, loc) for a in e.args]
        return Op(e.name, tuple(args), e.dtype, broadcast_shapes(*[a.shape for a in args]))
    return e
