"""Restores of overwritten values that nothing observes.

Reverse mode puts back what each forward statement overwrote, so that the backward sweep reads
every container as the forward sweep had it. Often the only reads of a container in the backward
sweep read the region one restore has just put back: ``C[i, j] = tape; g_beta += g * C[i, j]``
for the statement ``C[i, j] = beta * C[i, j] + ...``. Such a read sees the value from the tape,
whatever the container held before; the container's other restores (of ``C[:i, j] += v``, which
other rows receive) put back values no statement reads, and need neither restore nor tape.
PolyBench's symm tapes i values per (i, j) that way: its gradient kept 0.6 million values where
12,000 are read.
"""
from __future__ import annotations

from ..ir.core import (For, If, Index, NewAxis, Read, child_blocks, iter_reads, same_expr, same_ref, split_offset,
                       stmt_reads, stmt_writes, walk)


def unobserved(backward, is_restore, replayed, inverses):
    """Ids of the restore placeholders (``is_restore``) in ``backward`` whose values no statement
    reads: those of a container every backward read of which either runs before any restore of
    it (the adjoint of ``sum(C * C)`` reads C as the forward sweep left it) or reads the region
    the last restore before it in the same block put back, with nothing between writing that
    container or what the region's position depends on. Any other read (in a nested block, in
    the index of a restore, by an update run backwards (``inverses``) or by forward statements
    checkpointing re-runs in a loop (``replayed``: backward loop variable -> those statements))
    keeps every restore of its container. A loop's next pass follows all of its restores, except
    where each restore of the container in the loop, and each read of it there, is at one position
    of one axis moving with the loop's variable (``g_A[i, :] = g * tmp[i]`` before restoring
    ``tmp[i]``): the restores of the other passes put back other elements."""
    restores, covering, uncovered = {}, set(), set()
    seen = set()            # containers a restore may have written by the statement visited

    def deps(ref):
        return {rd.ref.container for ie in ref.index_exprs() for rd in iter_reads(ie)}

    def disturb(last, written):
        for x in [x for x, r in last.items() if x in written or deps(r.ref) & written]:
            del last[x]

    def visit(stmts):
        last = {}           # container -> the restore whose region reads may take as restored
        for st in stmts:
            if is_restore(st):
                x = st.ref.container
                restores.setdefault(x, []).append(st)
                seen.add(x)
                uncovered.update(deps(st.ref))
                inverse = inverses.get(id(st))
                if inverse is not None:
                    uncovered.update(rd.ref.container for rd in stmt_reads(inverse))
                disturb(last, {x})
                last[x] = st
                continue
            blocks = child_blocks(st)
            if blocks:
                uncovered.update(rd.ref.container for rd in stmt_reads(st))
                if isinstance(st, For) and st.var.name in replayed:
                    uncovered.update(rd.ref.container for t in walk(replayed[st.var.name]) for rd in stmt_reads(t))
                if not isinstance(st, If):       # a loop's next pass follows all of its restores
                    restored = [t for t in walk(blocks[0]) if is_restore(t)]
                    own = _own_rows(st, restored, is_restore) - seen \
                        if isinstance(st, For) and st.var.name not in replayed else set()
                    seen.update(t.ref.container for t in restored if t.ref.container not in own)
                for block in blocks:
                    visit(block)
                inside = list(walk([st]))
                disturb(last, {t.ref.container for t in inside if is_restore(t)}
                        | {w.container for t in inside if not is_restore(t) for w in stmt_writes(t)})
                continue
            for rd in stmt_reads(st):
                r = last.get(rd.ref.container)
                if r is not None and same_ref(r.ref, rd.ref):
                    covering.add(id(r))
                elif rd.ref.container in seen:
                    uncovered.add(rd.ref.container)
            disturb(last, {w.container for w in stmt_writes(st)})

    visit(backward)
    return {id(r) for x, rs in restores.items() if x not in uncovered for r in rs if id(r) not in covering}


def _own_rows(loop, restored, is_restore):
    """The containers restored in ``loop`` (``restored``) that each restore and each read in it
    index at one position, the loop's variable plus a constant, along one axis."""
    refs = {}
    for t in restored:
        refs.setdefault(t.ref.container, []).append(t.ref)
    for t in walk(loop.body):
        if not is_restore(t):
            for rd in stmt_reads(t):
                if rd.ref.container in refs:
                    refs[rd.ref.container].append(rd.ref)
    own = set()
    for x, views in refs.items():
        at = [_moving(v, loop.var) for v in views]
        if all(len(a) == 1 and a[0][0] == at[0][0][0] and same_expr(a[0][1], at[0][0][1]) for a in at):
            own.add(x)
    return own


def _moving(view, var):
    """``(axis, position)`` of each axis of its container that ``view`` indexes at ``var`` plus a
    constant."""
    axes = [it for it in view.items if not isinstance(it, NewAxis)]
    return [(k, it.at) for k, it in enumerate(axes) if isinstance(it, Index) and _moves(it.at, var)]


def _moves(e, var):
    base = split_offset(e)[0]
    return isinstance(base, Read) and base.ref.container is var
