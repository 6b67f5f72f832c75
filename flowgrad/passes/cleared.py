"""Write, instead of summing into, what a loop clears at the end of every iteration.

Needs: a statement list (the backward sweep of a gradient). Changes: in a loop whose body ends its
use of ``X`` by clearing a region ``R`` of it (``X[R] = 0``, the adjoint of an overwrite), and
begins it with sums ``X[P_1] += e_1``, ..., ``X[P_m] += e_m`` into disjoint parts that read nothing
of ``X``, where the parts inside ``R`` make up all of ``R`` and ``R`` is zero before the loop (the
adjoint's initial fill), each iteration starts with ``R`` zero: the sums inside ``R`` become
assignments, and the clearing moves after the loop. Every iteration then writes ``R`` once
instead of reading it, writing it and writing zeros into it again.

A time-stepped stencil's adjoint (``B[1:-1] = f(A)``, ``A[1:-1] = f(B)`` in a loop) sums into
``g_B`` from ``g_A``, reads ``g_B`` into ``g_A`` and clears ``g_B``'s interior, every step: one pass
over ``g_B`` of four goes, and one reads less. Parts outside ``R`` (the boundary's, which the loop
never clears) keep summing.

In any block, a zero fill ``X[R] = 0`` followed, before anything else touches ``X``, by such sums
covering ``R`` goes the same way: the sums inside ``R`` are written, the fill removed (the adjoint
of ``A[1:-1] = f(B)`` clears ``g_A``'s interior, and the next statements sum into all of it).
Only the views' bounds are compared, so both rewrites need bounds known when the program is
built.
"""
from __future__ import annotations

from ..ir.boxes import disjoint, inside, region as _region, volume
from ..ir.core import Assign, For, const_value, iter_reads, map_blocks, stmt_reads, stmt_writes, touches, walk


def assign_cleared_sums(stmts):
    """``stmts`` with the sums into regions their loops clear written instead (see the module)."""
    out = []
    for s in stmts:
        s = map_blocks(s, assign_cleared_sums)
        if isinstance(s, For):
            out += _rewrite(s, out)
        else:
            out.append(s)
    return _written_after_clearing(out)


def _written_after_clearing(block):
    """``block`` where a zero fill ``X[R] = 0`` is followed by sums that cover ``R`` before
    anything else touches ``X``: the fill goes and the sums inside ``R`` become assignments."""
    z = 0
    while z < len(block):
        clear = block[z]
        x = clear.dst.container if _zero_fill(clear) else None
        region = _region(clear.dst) if x is not None else None
        first = next((k for k in range(z + 1, len(block)) if touches(block[k], x)), None) if region else None
        sums = _covering(block, first, len(block), x, region) if first is not None else None
        if sums:
            block = [Assign(s.dst, s.expr, False, s.loc) if k in sums else s
                     for k, s in enumerate(block) if k != z]
            continue
        z += 1
    return block


def _zero_fill(s):
    return isinstance(s, Assign) and not s.accumulate and const_value(s.expr) == 0


def _covering(block, first, stop, x, region):
    """The positions of the sums into ``x`` from ``block[first]`` on (before ``stop``) that lie
    inside ``region`` and together make it up, where those statements are sums into disjoint
    parts of ``x`` that read nothing of it, the ones outside the region apart from it; else None."""
    parts, sums = [], set()
    for k in range(first, stop):
        s = block[k]
        if not (isinstance(s, Assign) and s.accumulate and s.dst.container is x) or \
                any(r.ref.container is x for r in iter_reads(s.expr)) or \
                any(r.ref.container is x for e in s.dst.index_exprs() for r in iter_reads(e)):
            break
        box = _region(s.dst)
        if box is None or any(not disjoint(box, p) for p in parts):
            break
        parts.append(box)
        if inside(box, region):
            sums.add(k)
        elif not disjoint(box, region):
            return None
    if not sums or sum(volume(parts[k - first]) for k in sums) != volume(region):
        return None
    return sums


def _rewrite(loop, before):
    """``[loop]``, or the loop with its cleared region written and the clearing after it."""
    body = loop.body
    for z, clear in enumerate(body):
        if not _zero_fill(clear):
            continue
        x = clear.dst.container
        region = _region(clear.dst)
        if region is None or any(touches(s, x) for s in body[z + 1:]):
            continue
        first = next(k for k, s in enumerate(body) if touches(s, x))
        sums = _covering(body, first, z, x, region)
        if not sums or not _zero_before(before, x, region):
            continue
        new = [Assign(s.dst, s.expr, False, s.loc) if k in sums else s for k, s in enumerate(body) if k != z]
        return [For(loop.var, loop.start, loop.stop, loop.step, new, loop.reverse, loop.loc), clear]
    return [loop]


def _zero_before(before, x, region):
    """Whether the statements before the loop leave ``region`` of ``x`` zero: the last of them
    touching ``x`` fills a view holding the region with zeros."""
    for s in reversed(before):
        if not touches(s, x):
            continue
        if not _zero_fill(s) or s.dst.container is not x:
            return False
        box = _region(s.dst)
        return box is not None and inside(region, box)
    return False


__all__ = ["assign_cleared_sums"]
