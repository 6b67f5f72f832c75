"""Factorise a matrix once when a loop solves with it on every iteration.

Needs: a statement list (a forward program, or the forward and backward sweeps of a gradient),
the program's container table and a namer. Changes: ``x = solve(A, b)`` inside a loop that
never writes ``A`` becomes ``x = lu_solve(lu, piv, b)``, with ``lu, piv = lu_factor(A)`` just
before the loop (before the outermost loop that leaves ``A`` alone). ``np.linalg.solve``
factorises ``A`` on every call (O(n^3)); the triangular solves are O(n^2). The adjoint of a solve
is a solve with ``A``'s transpose, so the backward sweep's solves are hoisted the same way.
Values are the same LAPACK getrf/getrs results NumPy computes. A factorisation runs even when
the loop makes no iteration; a singular ``A`` still raises only when a solve runs.

``share_factorizations`` then drops a backward sweep's factorisation of a matrix the forward
sweep already factorised, or of its transpose (LAPACK getrs solves with ``A.T`` from ``A``'s
factors), so a gradient through an implicit time step factorises once, not twice. ``factor_repeated_solves`` does the same for a solve outside loops
whose adjoint solves with the same matrix: the forward sweep keeps the factors.
"""
from __future__ import annotations

import numpy as np

from ..ir.core import (Call, Container, For, If, Read, Ref, While, iter_reads, map_blocks, same_ref,
                       stmt_writes, walk)


def hoist_factorizations(stmts, containers, namer):
    """``stmts`` with loop-invariant solves factorised ahead of their loops (new containers are
    added to ``containers``)."""
    out = []
    for s in stmts:
        if isinstance(s, (For, While)):
            body = hoist_factorizations(s.body, containers, namer)
            varying = {w.container for u in walk(body) for w in stmt_writes(u)}
            if isinstance(s, For):
                varying.add(s.var)
            pre = []
            body = _rewrite(body, varying, pre, containers, namer)
            out += pre
            s = For(s.var, s.start, s.stop, s.step, body, s.reverse, s.loc) if isinstance(s, For) else \
                While(s.cond, body, s.loc)
        else:
            s = map_blocks(s, lambda b: hoist_factorizations(b, containers, namer))
        out.append(s)
    return out


def _invariant(e, varying):
    return isinstance(e, Read) and len(e.shape) == 2 and \
        not any(r.ref.container in varying for r in iter_reads(e)) and \
        not any(r.ref.container in varying for ie in e.ref.index_exprs() for r in iter_reads(ie))


def _rewrite(stmts, varying, pre, containers, namer):
    """Replace invariant solves (and move invariant factorisations made by inner loops) at this
    loop level: through branches, not into nested loops (already done)."""
    out = []
    for s in stmts:
        if isinstance(s, Call) and s.op == "solve" and _invariant(s.inputs[0], varying):
            factor, s = _factored(s, containers, namer)
            pre.append(factor)
        elif isinstance(s, Call) and s.op == "lu_factor" and _invariant(s.inputs[0], varying):
            pre.append(s)
            continue
        elif isinstance(s, If):
            s = map_blocks(s, lambda b: _rewrite(b, varying, pre, containers, namer))
        out.append(s)
    return out


def factor_repeated_solves(stmts, other, containers, namer):
    """``stmts`` (one sweep of a gradient) with each top-level ``solve`` whose matrix, or its
    transpose, the other sweep ``other`` also solves with (or factorises) at its top level made a
    ``lu_factor`` and a ``lu_solve``. Run on the forward sweep, then on the backward one: the
    adjoint of ``np.linalg.solve`` solves with the transpose, and ``share_factorizations`` then
    drops the backward sweep's factorisation when nothing wrote the matrix in between, so that
    solve is two triangular solves, O(n^2), not a factorisation again, O(n^3)."""
    theirs = [s.inputs[0] for s in other if isinstance(s, Call) and s.op in ("solve", "lu_factor")]

    def repeated(s):
        return isinstance(s, Call) and s.op == "solve" and len(s.inputs[0].shape) == 2 and \
            any(_transposed(a, s.inputs[0]) is not None for a in theirs)

    out = []
    for s in stmts:
        out += _factored(s, containers, namer) if repeated(s) else [s]
    return out


def _factored(s, containers, namer):
    """``lu_factor`` and ``lu_solve`` for ``solve`` Call ``s``."""
    a = s.inputs[0]
    dtype = np.result_type(a.dtype, np.float64) if a.dtype.kind != "f" else a.dtype
    lu = Container(namer("lu"), dtype, a.shape, "transient")
    piv = Container(namer("piv"), np.dtype(np.int32), a.shape[:1], "transient")
    containers[lu.name], containers[piv.name] = lu, piv
    return [Call("lu_factor", [a], [lu, piv], {}, s.loc),
            Call("lu_solve", [Read(Ref(lu)), Read(Ref(piv)), s.inputs[1]], s.outputs, {}, s.loc)]


def share_factorizations(before, stmts):
    """``stmts`` (run right after ``before``) without the top-level factorisations of a matrix
    that ``before`` factorised at its top level and that nothing wrote since, or of that matrix's
    transpose; their solves use the kept factors (``trans`` for the transpose)."""
    known = []          # (matrix Read, lu, piv) valid at the current point

    def forget(s):
        written = {w.container for u in walk([s]) for w in stmt_writes(u)}
        known[:] = [k for k in known if not ({k[0].ref.container, k[1], k[2]} & written)]

    for s in before:
        forget(s)
        if isinstance(s, Call) and s.op == "lu_factor":
            known.append((s.inputs[0], *s.outputs))
    kept = {}           # name of a dropped factorisation's lu -> (kept lu, kept piv, transposed)
    out = []
    for s in stmts:
        if isinstance(s, Call) and s.op == "lu_factor":
            match = next(((lu, piv, t) for a, lu, piv in known
                          for t in (_transposed(a, s.inputs[0]),) if t is not None), None)
            if match is not None:
                kept[s.outputs[0].name] = match
                continue
        s = _use_kept(s, kept)
        forget(s)
        if isinstance(s, Call) and s.op == "lu_factor":
            known.append((s.inputs[0], *s.outputs))
        out.append(s)
    return out


def _transposed(a, b):
    """0 when Reads ``a`` and ``b`` are the same 2-d view, 1 when ``b`` is ``a``'s transpose,
    else None."""
    if len(a.shape) != 2 or len(b.shape) != 2:
        return None
    ra, rb = a.ref, b.ref
    if not same_ref(Ref(ra.container, ra.items), Ref(rb.container, rb.items)):
        return None
    pa, pb = tuple(ra.perm or (0, 1)), tuple(rb.perm or (0, 1))
    return 0 if pa == pb else (1 if pa == pb[::-1] else None)


def _use_kept(s, kept):
    if isinstance(s, Call) and s.op == "lu_solve" and s.inputs[0].ref.container.name in kept:
        lu, piv, t = kept[s.inputs[0].ref.container.name]
        attrs = dict(s.attrs, trans=s.attrs.get("trans", 0) ^ t)
        return Call("lu_solve", [Read(Ref(lu)), Read(Ref(piv)), s.inputs[2]], s.outputs, attrs, s.loc)
    return map_blocks(s, lambda b: [_use_kept(u, kept) for u in b])
