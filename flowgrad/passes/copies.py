"""Read the original instead of a copy while both hold the same values.

Needs: a statement list (a captured program, a gradient's backward sweep). Changes: after
``t = g[v]`` (``t`` a transient array written whole), later statements of the same block read
``g[v]`` where they read ``t``, until a statement writes ``t``, ``g`` or what ``v``'s indices
read (a simple statement writing a part of ``g`` that provably misses ``g[v]`` does not end the
stretch: a pass of a reversed loop restoring its own row before it reads the rows before it);
a statement ``g[v] = t`` in that stretch changes nothing and is removed. A read of part of
``t`` (``t[1:]``, as the gather pass leaves them) reads that part of ``g[v]``. ``eliminate_dead``
then drops the copy when nothing reads ``t`` any more.

The adjoint of an update ``x[v] = x[v] - f(...)`` saves ``g_x[v]``, writes it back scaled by one
and spreads it to ``f``'s operands; after this pass the saved copy and the write-back are gone, and
each element of ``g_x[v]`` is read once where it is spread (two passes over memory fewer).
For one element (``x[i] -= L[i, j] * x[j]`` in a loop over ``j``) the copy is a scalar: it stays,
and only the write-back goes, whose store to ``g_x[i]`` in every iteration kept the loop from
being vectorised.

The other way round, ``t = call(...)`` followed in the same block by ``g = t`` (``g`` a transient
of ``t``'s shape, nothing in between touching ``g``, ``t`` read nowhere else) becomes a call that
writes ``g`` itself: a weight gradient ``g_w = x.T @ g_h`` is computed into the gradient's buffer
instead of into a product that is then copied there.
"""
from __future__ import annotations

from collections import Counter

from ..autodiff.rules import CALLS
from ..ir.core import (Assign, Call, Index, NewAxis, Op, Read, Ref, If, For, Slice, While, apart, child_blocks,
                       iter_reads, map_blocks, same_expr, same_ref, stmt_reads, stmt_writes, walk)


def propagate_copies(stmts, results=(), calls=True):
    """``stmts`` with reads of array copies redirected to their originals, and calls whose one
    result is copied writing the copy's destination (see the module); ``results``: the
    containers handed to the caller. ``calls=False`` leaves the inputs of calls reading a copy
    of part of an array as they are, and those of calls standing for statements (a fixed
    point's iteration, whose statements read the copy): in a captured program a call's input is
    a whole array (the frontend copies a view into one), which the derivative rules of calls
    take it to be."""
    out = _propagate(stmts, calls)
    reads = Counter(x.ref.container for s in walk(out) for x in stmt_reads(s))
    for c in results:
        reads[c] += 1                     # read after the program
    return _retarget(out, reads)


def _propagate(stmts, calls):
    out = [map_blocks(s, lambda b: _propagate(b, calls)) for s in stmts]
    k = 0
    while k < len(out):
        copy = _copy(out[k])
        if copy is not None:
            _redirect(out, k, *copy, calls)
        k += 1
    return out


def _retarget(stmts, reads):
    """``t = call(...); ...; g = t`` -> ``g = call(...); ...`` where ``t``'s one read is the copy."""
    out = [map_blocks(s, lambda b: _retarget(b, reads)) for s in stmts]
    k = 0
    while k < len(out):
        s = out[k]
        if isinstance(s, Call) and len(s.outputs) == 1 and s.outputs[0].ndim and reads[s.outputs[0]] == 1:
            j = _copied_to(out, k, s)
            if j is not None:
                out[k] = Call(s.op, s.inputs, [out[j].dst.container], s.attrs, s.loc)
                del out[j]
        k += 1
    return out


def _copied_to(out, k, call):
    """Position of the statement after ``out[k]`` copying ``call``'s result whole into another
    transient that neither the call nor anything in between reads or writes, else None."""
    t = call.outputs[0]
    for j in range(k + 1, len(out)):
        u = out[j]
        copy = _copy(u)
        if copy is not None and copy[1].container is t and copy[1].is_whole() and copy[1].perm is None:
            g = copy[0]
            between = list(walk([call] + out[k + 1:j]))
            if any(x.ref.container is g for v in between for x in stmt_reads(v)) or \
                    any(w.container is g for v in between for w in stmt_writes(v)):
                return None
            return j
        if any(x.ref.container is t for v in walk([u]) for x in stmt_reads(v)):
            return None
    return None


def _copy(s):
    """``(t, ref)`` when ``s`` is ``t = ref`` for a transient ``t`` of ``ref``'s shape (a scalar
    copy is only written back, never read through: it stays in a register)."""
    if not (isinstance(s, Assign) and not s.accumulate and s.dst.is_whole() and isinstance(s.expr, Read)):
        return None
    t, r = s.dst.container, s.expr.ref
    if t.kind != "transient" or r.container is t or r.container.dtype != t.dtype:
        return None
    if len(r.shape) != t.ndim or not all(same_expr(a, b) for a, b in zip(r.shape, t.shape)):
        return None
    return t, r


def _redirect(out, k, t, r, calls):
    deps = {t} | {x.ref.container for ie in r.index_exprs() for x in iter_reads(ie)}
    j = k + 1
    while j < len(out):
        u = out[j]
        if isinstance(u, Assign) and not u.accumulate and same_ref(u.dst, r) and _whole_read(u.expr, t):
            del out[j]                    # writes back the values it already holds
            continue
        written = [w for v in walk([u]) for w in stmt_writes(v)]
        # a simple statement writing elsewhere in the original (a pass restoring its own row
        # before it reads the row above, copied) leaves the copied values as they are
        stops = {w.container for w in written} & deps or \
            any(w.container is r.container and (child_blocks(u) or not apart(w, r)) for w in written)
        if t.ndim and (isinstance(u, Assign) or not stops):
            # an assignment reads its right side in full before it writes (NumPy semantics, kept
            # by every backend); a call might write its output while it reads its inputs
            out[j] = _substitute(u, t, r, calls)
        if stops:
            return
        j += 1


def _whole_read(e, t):
    return isinstance(e, Read) and e.ref.container is t and e.ref.is_whole() and e.ref.perm is None


def _substitute(s, t, r, calls):
    if not any(x.ref.container is t for v in walk([s]) for x in stmt_reads(v)):
        return s
    if isinstance(s, Assign):
        if any(x.ref.container is t for ie in s.dst.index_exprs() for x in iter_reads(ie)):
            return s
        return Assign(s.dst, _expr(s.expr, t, r), s.accumulate, s.loc)
    if isinstance(s, Call):
        if not (calls or r.is_whole() and CALLS[s.op].expand is None):
            return s
        return Call(s.op, [_expr(e, t, r) for e in s.inputs], s.outputs, s.attrs, s.loc)
    if isinstance(s, (For, While, If)):
        return map_blocks(s, lambda b: [_substitute(v, t, r, calls) for v in b])
    return s                              # a tape push reads the copy itself


def _expr(e, t, r):
    if _whole_read(e, t):
        return Read(r)
    if isinstance(e, Read) and e.ref.container is t:
        inner = _compose(r, e.ref)
        return e if inner is None else Read(inner)
    if isinstance(e, Op):
        args = [_expr(a, t, r) for a in e.args]
        return e if all(a is b for a, b in zip(args, e.args)) else Op(e.name, args, e.dtype, e.shape)
    return e


def _compose(r, sub):
    """The view of ``r``'s container that ``sub`` (a view of a copy of ``r``) reads, or None
    when ``r`` permutes axes or either view inserts them (``sub``'s own permutation, of the axes
    the two views share in one order, stays)."""
    if r.perm is not None or \
            any(isinstance(it, NewAxis) for it in tuple(r.items) + tuple(sub.items)):
        return None
    inner = iter(sub.items)
    items = []
    for it in r.items:
        if isinstance(it, Index):
            items.append(it)
            continue
        at = next(inner)
        if isinstance(at, Index):
            items.append(Index(it.start + at.at * it.step))
        else:
            items.append(Slice(it.start + at.start * it.step, at.size, at.step * it.step))
    return Ref(r.container, items, sub.perm)
