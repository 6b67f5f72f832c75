"""Pack a strided view that a loop reads or writes on every iteration into a contiguous buffer.

Needs: the final statement lists of a program, just before native lowering (after ``take``);
nothing after it may run the autodiff or another pass. Changes: when every access of a container
``x`` inside a loop is to one view ``x[..., k]`` whose elements are not adjacent in memory (a
column: the container's last axis is indexed) and whose position the loop does not change, the
view is copied into a new buffer ``p`` before the loop (``p = x[:, k]``), the loop reads and
writes ``p`` instead, and ``p`` is copied back after the loop when the loop writes it.

Each iteration then walks one contiguous buffer instead of one cache line per element: the
modified Gram-Schmidt's inner loop over ``j`` reads the column ``Q[:, k]`` on every ``j``, and
its adjoint updates ``g_Q[:, k]`` on every ``j`` as well; with 1600-byte rows the columns of
``Q``, ``g_Q``, ``A`` and ``g_A`` do not fit in the L1 cache together.

The pack is made at the outermost loop where it holds, and only for views of a size known when
the program is built (a buffer of that size is allocated once, in the workspace).
"""
from __future__ import annotations

from ..ir.core import (Assign, Call, Container, For, If, Index, Op, Pop, Push, Read, Ref, Slice, While,
                       const_value, iter_reads, map_blocks, same_ref, stmt_reads, stmt_writes, walk)


def pack_strided_views(stmts, containers, namer):
    """``stmts`` with loop-invariant column views packed around the loops that use them."""
    out = []
    for s in stmts:
        if isinstance(s, For):
            before, s, after = _pack(s, containers, namer)
            out += before
            out.append(map_blocks(s, lambda b: pack_strided_views(b, containers, namer)))
            out += after
        elif isinstance(s, (While, If)):
            out.append(map_blocks(s, lambda b: pack_strided_views(b, containers, namer)))
        else:
            out.append(s)
    return out


def _pack(loop, containers, namer):
    """``(copies in, loop, copies out)`` for the views of ``loop`` worth packing."""
    varying = {loop.var} | {w.container for v in walk(loop.body) for w in stmt_writes(v)}
    refs = {}                     # container -> the one view the loop uses, or None
    for v in walk(loop.body):
        for ref in _refs(v):
            c = ref.container
            seen = refs.get(c, ref)
            refs[c] = ref if seen is not None and same_ref(seen, ref) else None
    before, after, body = [], [], loop.body
    for c, ref in refs.items():
        if ref is None or not _strided(ref) or any(
                r.ref.container in varying for ie in ref.index_exprs() for r in iter_reads(ie)):
            continue
        p = Container(namer("pack_" + c.name), c.dtype, ref.shape, "transient")
        swapped = [_swap(v, ref, p) for v in body]
        if any(r.container is c for v in walk(swapped) for r in _refs(v)):
            continue                                  # read where it cannot be swapped
        containers[p.name] = p
        body = swapped
        before.append(Assign(Ref(p), Read(ref), loc=loop.loc))
        if c in varying:
            after.append(Assign(ref, Read(Ref(p)), loc=loop.loc))
    if not before:
        return [], loop, []
    return before, For(loop.var, loop.start, loop.stop, loop.step, body, loop.reverse, loop.loc), after


def _strided(ref):
    """A view of a size known now, along axes other than the container's last, which is indexed."""
    c = ref.container
    if ref.perm is not None or len(ref.items) != c.ndim or c.ndim < 2 or c.kind == "tape":
        return False
    if not isinstance(ref.items[-1], Index) or not any(isinstance(it, Slice) for it in ref.items):
        return False
    sizes = [const_value(d) for d in ref.shape]
    return None not in sizes and all(n > 1 for n in sizes)


def _refs(s):
    """Every view a simple statement reads or writes, indices included (a push reads its view, a
    pop writes it)."""
    return [r.ref for r in stmt_reads(s)] + list(stmt_writes(s))


def _swap(s, ref, p):
    """``s`` with the view ``ref`` read and written as the whole of ``p``."""
    def ex(e):
        if isinstance(e, Read) and same_ref(e.ref, ref):
            return Read(Ref(p))
        if isinstance(e, Op):
            return Op(e.name, [ex(a) for a in e.args], e.dtype, e.shape)
        return e

    def dst(r):
        return Ref(p) if same_ref(r, ref) else r

    if isinstance(s, Assign):
        return Assign(dst(s.dst), ex(s.expr), s.accumulate, s.loc)
    if isinstance(s, Call):
        return Call(s.op, [ex(e) for e in s.inputs], s.outputs, s.attrs, s.loc)
    if isinstance(s, Push):
        return Push(s.tape, dst(s.ref), s.loc, s.copy)
    if isinstance(s, Pop):
        return Pop(s.tape, dst(s.ref), s.loc)
    if isinstance(s, (For, While, If)):
        return map_blocks(s, lambda b: [_swap(v, ref, p) for v in b])
    return s
