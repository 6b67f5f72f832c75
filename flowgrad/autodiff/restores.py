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

from ..ir.core import (Const, For, If, Index, NewAxis, Op, Pop, Read, Ref, Slice, child_blocks, const_value, difference,
                       iter_reads, op, same_expr, same_ref, split_offset, stmt_reads, stmt_writes, substitute, touches,
                       walk)


def unobserved(backward, is_restore, replayed, inverses):
    """Ids of the restore placeholders (``is_restore``) in ``backward`` whose values no statement
    reads: those of a container every backward read of which either runs before any restore of
    it (the adjoint of ``sum(C * C)`` reads C as the forward sweep left it) or reads the region
    the last restore before it in the same block put back, with nothing between writing that
    container or what the region's position depends on. Any other read (in a nested block, in
    the index of a restore, by an update run backwards (``inverses``) or by forward statements
    checkpointing re-runs in a loop (``replayed``: backward loop variable -> those statements))
    keeps every restore of its container. A loop's next pass follows all of its restores, except
    where each restore of the container in the loop is at one position of one axis moving with the
    loop's variable, and each read of it there at a position no pass before has restored
    (``_own_rows``): ``g_A[i, :] = g * tmp[i]`` before restoring ``tmp[i]``, or a recurrence
    ``y[j] = a * y[j - 1] + x[j]`` reversed, whose pass j restores ``y[j]`` and reads ``y[j - 1]``,
    which the passes after it never restore: the old values of ``y[j]`` are never read. Such reads
    still see what restores outside the loop put back: those are kept."""
    restores, covering, uncovered = {}, set(), set()
    seen = set()            # containers a restore may have written by the statement visited
    rows = {}               # container -> (loop, axis, offset) of the loops being visited
    forced = set()          # (container, loop): reads in the loop see the container's other restores
    repeating = []          # per enclosing loop, the containers its next pass sees restored

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
                own = {}
                if not isinstance(st, If):       # a loop's next pass follows all of its restores
                    restored = [t for t in walk(blocks[0]) if is_restore(t)]
                    if isinstance(st, For) and st.var.name not in replayed:
                        # not where an enclosing loop's next pass sees this loop's restores
                        own = {x: at for x, at in _own_rows(st, restored, is_restore).items()
                               if not any(x in r for r in repeating)}
                    seen.update(t.ref.container for t in restored if t.ref.container not in own)
                    repeating.append({t.ref.container for t in restored if t.ref.container not in own})
                outer = {x: rows[x] for x in own if x in rows}
                rows.update((x, (st,) + at) for x, at in own.items())
                for block in blocks:
                    visit(block)
                if not isinstance(st, If):
                    repeating.pop()
                for x in own:
                    del rows[x]
                rows.update(outer)
                inside = list(walk([st]))
                disturb(last, {t.ref.container for t in inside if is_restore(t)}
                        | {w.container for t in inside if not is_restore(t) for w in stmt_writes(t)})
                continue
            for rd in stmt_reads(st):
                r = last.get(rd.ref.container)
                if r is not None and same_ref(r.ref, rd.ref):
                    covering.add(id(r))
                elif rd.ref.container in seen:
                    row = rows.get(rd.ref.container)
                    if _elsewhere(rd.ref, row):
                        forced.add((rd.ref.container, row[0]))
                    else:
                        uncovered.add(rd.ref.container)
            disturb(last, {w.container for w in stmt_writes(st)})

    visit(backward)
    kept = set()
    for x, loop in forced:
        inside = {id(t) for t in walk(loop.body)}
        kept.update(id(r) for r in restores.get(x, ()) if id(r) not in inside)
    return {id(r) for x, rs in restores.items() if x not in uncovered for r in rs
            if id(r) not in covering and id(r) not in kept}


def _own_rows(loop, restored, is_restore):
    """``{container: (axis, a)}`` for the containers restored in ``loop`` (``restored``) that each
    restore there indexes at ``var + a`` along one axis, and each read there at ``var + b`` along
    that axis, ``b`` being ``a`` or a position no earlier pass restores: below ``a`` where the loop
    counts down, above it where it counts up."""
    down = _counts_down(loop)
    refs, reads = {}, {}
    for t in restored:
        refs.setdefault(t.ref.container, []).append(t.ref)
    for t in walk(loop.body):
        if not is_restore(t):
            for rd in stmt_reads(t):
                if rd.ref.container in refs:
                    reads.setdefault(rd.ref.container, []).append(rd.ref)
    own = {}
    for x, views in refs.items():
        at = [_moving(v, loop.var) for v in views]
        if not all(len(a) == 1 and a[0][0] == at[0][0][0] and same_expr(a[0][1], at[0][0][1]) for a in at):
            continue
        axis, pos = at[0][0]
        a = split_offset(pos)[1]
        ok = True
        for v in reads.get(x, ()):
            m = _moving(v, loop.var)
            if len(m) != 1 or m[0][0] != axis:
                ok = False
            elif not same_expr(m[0][1], pos):
                base, b = split_offset(m[0][1])
                ok = ok and same_expr(base, split_offset(pos)[0]) and down is not None and (b < a if down else b > a)
        if ok:
            own[x] = (axis, a)
    return own


def _counts_down(loop):
    """Whether ``loop``'s variable decreases from pass to pass (None: the step's sign is unknown)."""
    step = const_value(loop.step)
    if not step:
        return None
    return (step > 0) == bool(loop.reverse)


def _elsewhere(ref, row):
    """Whether view ``ref`` reads, along the axis of ``row`` (``(loop, axis, a)``: the loop's
    restores at its variable plus ``a``), a position other than the restored one."""
    if row is None:
        return False
    loop, axis, a = row
    m = _moving(ref, loop.var)
    return len(m) == 1 and m[0][0] == axis and split_offset(m[0][1])[1] != a


def _moving(view, var):
    """``(axis, position)`` of each axis of its container that ``view`` indexes at ``var`` plus a
    constant."""
    axes = [it for it in view.items if not isinstance(it, NewAxis)]
    return [(k, it.at) for k, it in enumerate(axes) if isinstance(it, Index) and _moves(it.at, var)]


def _moves(e, var):
    base = split_offset(e)[0]
    return isinstance(base, Read) and base.ref.container is var


def read_in_pass(backward):
    """Mark ``local`` (with the loop's variable) each pop at the top of a loop's body whose
    restored values only the statements after it in the same pass read. Two ways qualify a pop,
    the first statement of the body touching its container and the only one writing it:

    - in a top-level loop of ``backward``, it restores a view each next pass's restore covers
      (``V[0:i + 1]`` where the passes count ``i`` up), of a container nothing after the loop
      reads. The next pass then restores all that this one did before reading any of it, and the
      views no pass restores hold what they held before the loop. binomial_option's adjoint
      step reads the values it restores, and the next step's restore covers them: storing them
      cost a tenth of its gradient.
    - in a loop at any depth, the body reads the container only inside the view the pop
      restores, and so does every other statement touching the container from the top-level
      statement holding the loop on (``_own_views``): each is a read after such a pop in its own
      pass. symm's adjoint restores ``C[i, :]`` in a loop nested in its blocks' loop and reads
      that row only.

    A checkpointed loop (``checkpoint.loops``) reverses it a segment at a time, and each of its
    schedules restores the state from a snapshot after a segment's reversal before running or
    saving it (``checkpoint.schedules``), so what a reversal leaves in the container is never
    read there either."""
    _own_views(backward)
    for k, loop in enumerate(backward):
        if not isinstance(loop, For):
            continue
        step = const_value(loop.step)
        if not step:
            continue
        after = {r.ref.container for s in walk(backward[k + 1:]) for r in stmt_reads(s)}
        after |= {r.ref.container for e in (loop.start, loop.stop, loop.step) for r in iter_reads(e)}
        d = -step if loop.reverse else step         # the variable's change from one pass to the next
        for _, pop in _leading_pops(loop):
            if pop.ref.container not in after and all(_covered(it, loop.var, d) for it in pop.ref.items):
                pop.local = loop.var


def _leading_pops(loop):
    """``(position, pop)`` for each pop of ``loop``'s body that is the first statement touching
    its container there and the only one writing it, restoring a view whose position depends only
    on the loop's variable and what the body does not write: the pops either way of
    ``read_in_pass`` may mark."""
    written = {}
    for s in walk(loop.body):
        for w in stmt_writes(s):
            written.setdefault(w.container, []).append(s)
    for n, pop in enumerate(loop.body):
        x = pop.ref.container if isinstance(pop, Pop) else None
        if x is None or written[x] != [pop] or any(touches(s, x) for s in loop.body[:n]) or \
                any(r.ref.container in written for ie in pop.ref.index_exprs() for r in iter_reads(ie)
                    if r.ref.container is not loop.var):
            continue
        yield n, pop


def _own_views(backward):
    """The second way of ``read_in_pass``: per container, the pops at the top of a loop body
    reading it only inside their views (``_view_pops``) are marked where every statement touching
    the container, from the first top-level statement holding one of them on, is such a pop or a
    read after it in its body."""
    found = {}                  # container -> [(top-level position, pop, loop, ids of its reads)]
    for k, top in enumerate(backward):
        for loop in walk([top]):
            if isinstance(loop, For):
                for pop, reads in _view_pops(loop):
                    found.setdefault(pop.ref.container, []).append((k, pop, loop, reads))
    for x, pops in found.items():
        served = {id(pop) for _, pop, _, _ in pops}.union(*(reads for _, _, _, reads in pops))
        if all(id(s) in served for s in walk(backward[pops[0][0]:]) if _touches_itself(s, x)):
            for _, pop, loop, _ in pops:
                pop.local = loop.var


def _view_pops(loop):
    """``(pop, ids of the statements reading its container)`` for each of ``loop``'s
    ``_leading_pops`` whose container the body reads only after it and inside its view."""
    out = []
    for n, pop in _leading_pops(loop):
        x = pop.ref.container
        reads = set()
        for s in walk(loop.body[n + 1:]):
            mine = [r for r in stmt_reads(s) if r.ref.container is x]
            if mine and not all(_inside(r.ref, pop.ref) for r in mine):
                break
            if mine:
                reads.add(id(s))
        else:
            out.append((pop, reads))
    return out


def _inside(a, b):
    """Whether view ``a`` of a container lies inside view ``b`` of it, at the same positions
    (each index the same expression; each slice of step 1 within the other's ends)."""
    a_items = [it for it in a.items if not isinstance(it, NewAxis)]
    b_items = [it for it in b.items if not isinstance(it, NewAxis)]
    if len(a_items) != len(b_items):
        return False
    for x, y in zip(a_items, b_items):
        if isinstance(x, Index) and isinstance(y, Index):
            if not same_expr(x.at, y.at):
                return False
        elif isinstance(x, Slice) and isinstance(y, Slice):
            if const_value(x.step) != 1 or const_value(y.step) != 1:
                return False
            start = difference(x.start, y.start)
            end = difference(op("add", x.start, x.size), op("add", y.start, y.size))
            if start is None or end is None or start < 0 or end > 0:
                return False
        elif isinstance(x, Index) and isinstance(y, Slice) and const_value(y.step) == 1:
            lo, hi = difference(x.at, y.start), difference(x.at, op("add", y.start, y.size))
            if lo is None or hi is None or lo < 0 or hi >= 0:
                return False
        else:
            return False
    return True


def _touches_itself(s, c):
    """Whether statement ``s``'s own expressions (not its nested blocks') read or write ``c``."""
    return any(r.ref.container is c for r in stmt_reads(s)) or any(w.container is c for w in stmt_writes(s))


def _covered(it, var, d):
    """Whether the positions ``it`` takes along its axis when ``var`` is ``v`` are among those it
    takes when ``var`` is ``v + d``."""
    if isinstance(it, NewAxis):
        return True
    if isinstance(it, Index):
        return not _reads(it.at, var)
    step = const_value(it.step)
    if step != 1:
        return not any(_reads(e, var) for e in (it.start, it.size, it.step))
    end = op("add", it.start, it.size)
    return _monotone(it.start, var, d, -1) and _monotone(end, var, d, 1)


def _monotone(e, var, d, sign):
    """Whether integer expression ``e`` moves in direction ``sign`` or not at all (``-1``: never
    up) when ``var`` moves by ``d``."""
    if not _reads(e, var):
        return True
    later = substitute(e, var, op("add", Read(Ref(var, ())), Const(d)))
    diff = difference(later, e)
    if diff is not None:
        return diff * sign >= 0
    if isinstance(e, Op) and e.name in ("maximum", "minimum", "add"):
        return all(_monotone(a, var, d, sign) for a in e.args)
    return False


def _reads(e, var):
    return any(r.ref.container is var for r in iter_reads(e))
