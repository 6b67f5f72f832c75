"""Read a gather's elements where its one consumer needs them, instead of copying them first.

Needs: the final statement lists of a program (forward, and backward for a gradient), just
before native lowering; nothing after it may run the autodiff or another pass. Changes: a
``c = gather(x, i, j, ...)`` (one index array per axis of the whole ``x``) whose result ``c``
is read exactly once in the whole program, as a whole, by a later statement ``U`` of the same
block, with nothing in between writing what the gather reads, is removed, and ``U`` reads
``take(x, i, j, ...)`` instead. ``U``'s loop nest then loads ``x[i[p], j[p]]`` per element:
spmv_csr's ``data[start:end] @ x[indices[start:end]]`` runs without a temporary (and an
allocation) per row.
"""
from __future__ import annotations

from ..backends.native_calls import whole_reduction
from ..ir.core import (Assign, Call, Read, Take, child_blocks, iter_reads, map_blocks, same_expr, stmt_reads,
                       stmt_writes, walk)
from .fuse import replace_reads


def fuse_gathers(*blocks):
    """``blocks`` (statement lists of one program) with single-use gathers read in place.

    A container may be defined by several gathers (the forward's, and the backward's recomputed
    one): it is fused only when every definition is a gather with its own consumer next in its
    block and those consumers are all its reads."""
    reads, writes = {}, {}
    for s in walk([t for b in blocks for t in b]):
        for r in stmt_reads(s):
            reads[r.ref.container] = reads.get(r.ref.container, 0) + 1
        for w in stmt_writes(s):
            writes[w.container] = writes.get(w.container, 0) + 1

    pairs = {}                       # container -> [(gather, fused consumer)]

    def find(stmts):
        for k, s in enumerate(stmts):
            for b in child_blocks(s):
                find(b)
            found = _candidate(s)
            if found is None:
                continue
            c, take = found
            take, folded = _fold_index_copies(stmts, k, take, reads, writes)
            deps = {r.ref.container for r in iter_reads(take)}
            for t in stmts[k + 1:]:
                if any(r.ref.container is c for u in walk([t]) for r in stmt_reads(u)):
                    if _substitute(t, c, take) is not None:
                        pairs.setdefault(c, []).append(([s] + folded, t, take))
                    break
                if any(w.container in deps or w.container is c for u in walk([t]) for w in stmt_writes(u)):
                    break

    for b in blocks:
        find(b)
    gone, swap = set(), {}
    for c, found in pairs.items():
        if c.kind == "transient" and len(found) == writes.get(c) == reads.get(c):
            # a consumer of several gathers (``x[i] * y[j]``) takes each in turn
            fused = [_substitute(swap.get(id(t), t), c, take) for _, t, take in found]
            if any(f is None for f in fused):
                continue
            for (removed, t, _), f in zip(found, fused):
                gone.update(id(g) for g in removed)
                swap[id(t)] = f

    def rebuild(stmts):
        return [swap.get(id(s), map_blocks(s, rebuild)) for s in stmts if id(s) not in gone]

    return tuple(rebuild(list(b)) for b in blocks)


def _candidate(s):
    """``(c, take)`` for a gather ``c = x[i, j, ...]`` with one index array per axis of a whole ``x``."""
    if not (isinstance(s, Call) and s.op == "gather" and len(s.outputs) == 1):
        return None
    x, *index = s.inputs
    spec = s.attrs["spec"]
    if not (isinstance(x, Read) and x.ref.is_whole() and len(index) == x.ref.container.ndim == len(spec)
            and all(item[0] == "array" for item in spec)):
        return None
    return s.outputs[0], Take(x.ref, index)


def _fold_index_copies(stmts, k, take, reads, writes):
    """``take`` with index arrays defined just before the gather ``stmts[k]`` (``idx =
    indices[start:end]``, read only by it) replaced by their definitions, and those definitions."""
    index, folded = list(take.index), []
    j = k - 1
    while j >= 0:
        d = stmts[j]
        if not (isinstance(d, Assign) and not d.accumulate and d.dst.is_whole()):
            break
        ix = d.dst.container
        at = [n for n, i in enumerate(index) if isinstance(i, Read) and i.ref.container is ix and i.ref.is_whole()]
        later = {w.container for g in folded for w in stmt_writes(g)}
        if len(at) != 1 or ix.kind != "transient" or reads.get(ix) != 1 or writes.get(ix) != 1 or \
                len(d.expr.shape) != ix.ndim or any(r.ref.container in later for r in iter_reads(d.expr)) or \
                not all(same_expr(a, b) for a, b in zip(d.expr.shape, ix.shape)):
            break
        index[at[0]] = d.expr
        folded.append(d)
        j -= 1
    return Take(take.source, index), folded


# Calls whose native lowering reads every input through its elements (a matrix-vector product's
# loops, a scatter's value and positions), so an input may be any expression
_ELEMENTWISE_INPUTS = frozenset({"matmul", "add_at", "scatter"})


def _substitute(u, c, take):
    """``u`` reading ``take`` where it read the whole of ``c`` (once), or None."""
    # the consumer must not write what the gather reads: its copy held the values before the write
    if any(r.ref.container in {w.container for w in stmt_writes(u)} for r in iter_reads(take)):
        return None
    if isinstance(u, Assign):
        if any(r.ref.container is c for ie in u.dst.index_exprs() for r in iter_reads(ie)):
            return None
        new = replace_reads(u.expr, c, take)
        return None if new is None else Assign(u.dst, new, u.accumulate, u.loc)
    if isinstance(u, Call) and (u.op in _ELEMENTWISE_INPUTS or whole_reduction(u) is not None):
        inputs = [replace_reads(x, c, take) for x in u.inputs]
        if any(x is None for x in inputs):
            return None
        return Call(u.op, inputs, u.outputs, u.attrs, u.loc)
    return None


__all__ = ["fuse_gathers"]
