"""Cheap loop-local values evaluated again in the backward sweep instead of kept on a tape.

A definition in a ``for`` body is a statement that defines a container afresh with cheap work (a
whole assignment of cheap element operations, or a gather), or a run of consecutive assignments of
cheap element operations into disjoint parts of one container that together make up all of it
(``np.roll``'s two pieces). It is re-run in that loop's reversed body, and its restores are
dropped, when

- its statements are the container's only writes, and every read of the container comes after
  them in the same iteration (so no one needs its value from an earlier iteration or from
  outside);
- what it reads holds, at the place the replay stands, the values it read in the forward sweep:
  the replay goes after the restores of every later statement of the body that writes what it
  reads (burgers' ``roll(u, 1)`` after the restore of the ``u`` the step overwrites at its end),
  and after the replays it reads; no statement before that place reads the container;
- what it reads is never written, is itself replayed, or is read by the backward sweep anyway,
  and the restores it must follow were needed without it: replaying must not make values needed
  that no tape held before (lif_neurons' ``mask = v > th``, a tape of one byte per element, stays
  on it: replaying it would keep ``v`` from before ``v[mask] = 0``, eight).

spmv_csr's ``start = indptr[i]``, ``idx = indices[start:end]`` and ``gather = x[idx]`` are
recomputed per row instead of pushed and popped per row; a time step's ``np.roll`` of its state
is shifted again from the state the step's restore puts back, instead of kept on a tape of its
own beside the state's.
"""
from __future__ import annotations

from ..ir.boxes import tile
from ..ir.core import (CHEAP_OPS, Assign, Call, Const, Container, For, If, Index, Op, Read, Ref, While, apart,
                       child_blocks, const_value, iter_reads, loop_range, map_blocks, op, scalar, shifted, stmt_reads,
                       stmt_writes, substitute, walk)

# Calls that only move data: as cheap to run again as to copy back from a tape.
_MOVES = frozenset({"gather", "gather_last"})


def replay_definitions(prog, backward, is_restore, needed, inverses):
    """``backward`` with the definitions described in the module replayed in their loops' reversed
    bodies; ``is_restore``: whether a backward statement is a restore placeholder (its ``stmt``:
    the forward statement whose overwrite it puts back); ``needed``: the ids of the restores whose
    values the backward sweep reads as it stands; ``inverses``: restore id -> the statement that
    restores by running an update backwards, which reads what the update read."""
    written = {}
    for t in walk(prog.body):
        for w in stmt_writes(t):
            written[w.container] = written.get(w.container, 0) + 1
    backward_reads = {r.ref.container for t in walk(backward) if not is_restore(t) for r in stmt_reads(t)}
    groups = [g for loop in walk(prog.body) if isinstance(loop, For)
              for g in _definitions_in(loop, prog, written, backward_reads)]
    if not groups:
        return backward
    dropped = set()

    def rebuild(stmts):
        out = []
        for t in stmts:
            if is_restore(t):
                if id(t.stmt) not in dropped:
                    out.append(t)
            elif isinstance(t, For) and (mine := _reversed_here(t, groups, is_restore)):
                placed = _place(t.body, mine, is_restore, needed, inverses)
                dropped.update(id(s) for _, group in placed for s in group.stmts)
                body = []
                for k, s in enumerate(t.body + [None]):
                    body += [u for at, group in placed if at == k for u in group.stmts]
                    if s is not None:
                        body += rebuild([s])
                out.append(For(t.var, t.start, t.stop, t.step, body, t.reverse, t.loc))
            else:
                out.append(map_blocks(t, rebuild))
        return out

    return rebuild(backward)


class _Definition:
    """Statements ``stmts`` of a loop body defining ``container``; ``earlier`` and ``later``: the ids
    of the statements before and after them in the body (nested ones included) that write what
    they read; ``reads``: the containers they read."""

    def __init__(self, stmts, container, earlier, later, reads):
        self.stmts, self.container, self.reads = stmts, container, reads
        self.earlier, self.later = earlier, later


def _reversed_here(loop, groups, is_restore):
    """The definitions of ``groups`` whose loop backward ``loop`` reverses: its body holds the restore
    of the definition's first statement."""
    firsts = {id(t.stmt) for t in loop.body if is_restore(t)}
    return [g for g in groups if id(g.stmts[0]) in firsts]


def _writers(stmts, containers):
    return {id(u) for u in walk(stmts) if any(w.container in containers for w in stmt_writes(u))}


def _definitions_in(loop, prog, written, backward_reads):
    """The definitions of ``loop``'s body to replay (see the module), in body order."""
    body = loop.body
    inside = {id(t) for t in walk(body)}
    outside = {r.ref.container for t in walk(prog.body) if id(t) not in inside for r in stmt_reads(t)}
    chosen, k = [], 0
    while k < len(body):
        c, stop = _definition(body, k)
        if c is None:
            k += 1
            continue
        stmts, k0, k = body[k:stop], k, stop
        if c.kind != "transient" or c in prog.params or c in prog.results or written.get(c) != len(stmts):
            continue
        deps = {r.ref.container for s in stmts for r in stmt_reads(s)}
        if c in deps or c in outside:
            continue
        if not all(d is loop.var or d in backward_reads or not written.get(d) or
                   any(d is g.container for g in chosen) for d in deps):
            continue
        if any(r.ref.container is c for t in walk(body[:k0]) for r in stmt_reads(t)):
            continue
        earlier, later = (_writers(body[:k0], deps), _writers(body[stop:], deps))
        chosen.append(_Definition(stmts, c, earlier, later, deps))
    return chosen


def _definition(body, k):
    """``(container, end)`` of the definition starting at ``body[k]`` (``body[k:end]``), or
    ``(None, None)``."""
    st = body[k]
    c = _fresh_definition(st)
    if c is not None:
        return c, k + 1
    c = _part(st)
    if c is None:
        return None, None
    stop = k + 1
    while stop < len(body) and _part(body[stop]) is c:
        stop += 1
    return (c, stop) if tile([s.dst for s in body[k:stop]], c) else (None, None)


def _fresh_definition(st):
    """The container ``st`` defines afresh with cheap work, or None."""
    if isinstance(st, Assign) and not st.accumulate and st.dst.is_whole() and _cheaper_than_tape(st.expr):
        return st.dst.container
    if isinstance(st, Call) and st.op in _MOVES and len(st.outputs) == 1:
        return st.outputs[0]
    return None


def _part(st):
    """The container ``st`` writes part of with cheap work, or None."""
    if isinstance(st, Assign) and not st.accumulate and _cheaper_than_tape(st.expr):
        return st.dst.container
    return None


def _cheaper_than_tape(e):
    """Whether evaluating ``e`` again costs less than storing and loading it: cheap element
    operations and divisions (attention's ``t = e / sum``), with anything on single values
    (``sqrt(hd)``) in between."""
    if not isinstance(e, Op) or not e.shape:
        return True
    return (e.name in CHEAP_OPS or e.name == "divide") and all(_cheaper_than_tape(a) for a in e.args)


def _place(body, definitions, is_restore, needed, inverses):
    """``[(position, definition)]``: where in the reversed loop body ``body`` each definition's replay
    goes (before ``body[position]``), for those that have such a place (``needed``, ``inverses``:
    see ``replay_definitions``)."""
    placed, at = [], {}
    for group in definitions:
        k, follows = 0, []
        for p, s in enumerate(body):
            restores = [t for t in walk([s]) if is_restore(t) and id(t.stmt) in group.later and
                        t.ref.container in group.reads]
            if restores:
                k = p + 1
                follows += restores
        if any(id(t) not in needed for t in follows):
            continue
        k = max([k] + [at[d] for d in group.reads if d in at])
        before = [t for s in body[:k] for t in walk([s])]
        readers = [inverses[id(t)] if is_restore(t) else t for t in before
                   if not is_restore(t) or id(t) in inverses]
        if any(is_restore(t) and id(t.stmt) in group.earlier for t in before) or \
                any(r.ref.container is group.container for t in readers for r in stmt_reads(t)):
            continue
        at[group.container] = k
        placed.append((k, group))
    return placed


def previous_pass_restores(prog, backward, is_restore, needed, namer):
    """Restores of a value a loop's pass copies for the next pass, taken from where it was copied.

    A statement ``S`` of the body of a top-level ``for`` loop that runs its range forwards (not a
    reversed loop of a gradient program) that defines a container ``c`` afresh with cheap work
    ``f(var)``, the only write of ``c`` in the loop (``xm1 = img[:, j]``, read by the next pass
    before it), overwrites in pass ``j`` what pass ``j - step`` wrote: ``f(j - step)``. Where
    nothing the loop runs between the two passes' ``S`` writes what ``f`` reads there, the reversed
    pass evaluates ``f(j - step)`` instead of popping a tape, and the first pass takes ``c`` as it
    was before the loop, which one copy ahead of the loop keeps. What ``f`` reads must be written, in
    the loop and after it, only by statements whose restores were needed anyway or that overwrite
    each of its elements once (a sweep of rows): the new reads must not make many tapes where one
    went.

    Deriche's recursive filters carry a column of the image and a column of their output from
    pass to pass: those columns come from the image and the output again, where two tapes of a
    column per pass kept them. Returns ``(backward, copies)``: ``copies`` maps the id of each
    loop whose pass restores come from there to the statements copying ``c`` ahead of it, and the
    copies' containers are in ``prog.containers``.
    """
    owner = {}                  # id of a restore's forward statement -> (reversed loop, the restore)
    for t in backward:
        if isinstance(t, For):
            for r in t.body:
                if is_restore(r):
                    owner[id(r.stmt)] = (t, r)
    kept = {id(t.stmt) for t in walk(backward) if is_restore(t) and id(t) in needed}
    swaps, copies, firsts = {}, {}, {}

    def before_loop(loop, c, loc):
        """The copy of ``c`` as it was ahead of ``loop`` (made there once)."""
        if (id(loop), c) not in firsts:
            first = firsts[id(loop), c] = Container(namer(c.name + "_first"), c.dtype, c.shape, "transient")
            prog.containers[first.name] = first
            copies.setdefault(id(loop), []).append(Assign(Ref(first), Read(Ref(c)), loc=loc))
        return Read(Ref(firsts[id(loop), c]))

    for k, loop in enumerate(prog.body):
        if not isinstance(loop, For) or loop.reverse or not const_value(loop.step):
            continue
        written = {}
        for t in walk(loop.body):
            for w in stmt_writes(t):
                written[w.container] = written.get(w.container, 0) + 1
        for p, st in enumerate(loop.body):
            found = owner.get(id(st))
            if found is None or id(found[1]) not in needed:
                continue
            found_pass = _from_previous_pass(loop, p, prog.body[k + 1:], written, kept) or \
                _from_two_passes_back(loop, p, prog.body[k + 1:], written, kept)
            if found_pass is None:
                continue
            (expr, source), c = found_pass, st.dst.container
            if source is not None:          # the second pass takes what the copied container held ahead of the loop
                expr = If(op("not_equal", _back(loop), loop.start), [Assign(Ref(c), expr, loc=st.loc)],
                          [Assign(Ref(c), before_loop(loop, source, st.loc), loc=st.loc)], st.loc)
            else:
                expr = Assign(Ref(c), expr, loc=st.loc)
            swaps[id(found[1])] = If(op("not_equal", scalar(loop.var), loop.start), [expr],
                                     [Assign(Ref(c), before_loop(loop, c, st.loc), loc=st.loc)], st.loc)
    if not swaps:
        return backward, copies

    def rebuild(stmts):
        return [swaps.get(id(t), t) if is_restore(t) else map_blocks(t, rebuild) for t in stmts]
    return rebuild(backward), copies


def _from_previous_pass(loop, p, later, written, kept):
    """``(f(var - step), None)`` for ``loop.body[p]``, ``c = f(var)``, where the restore of its
    overwrite may evaluate it (see ``previous_pass_restores``; ``later``: the top-level statements
    after the loop; ``written``: how often the loop writes each container; ``kept``: the ids of the
    forward statements whose restores are needed), else None."""
    st = loop.body[p]
    if not _defines(st, written) or not _reads_stay(loop, st.expr, [st.dst.container], [(p + 1, None), (0, p)],
                                                    later, written, kept):
        return None
    return substitute(st.expr, loop.var, _back(loop)), None


def _from_two_passes_back(loop, p, later, written, kept):
    """``(f(var - 2 step), c1)`` for ``loop.body[p]``, ``c2 = c1``, a copy of what a later statement
    ``loop.body[q]``, ``c1 = f(var)``, defines afresh (a second-order recursion's ``ym2 = ym1``
    before ``ym1 = y[:, j]``): pass ``j`` overwrites ``c2`` with what pass ``j - 2 step`` computed,
    ``f(j - 2 step)``, or, in the second pass, with ``c1`` as it was ahead of the loop. The same
    conditions as ``_from_previous_pass``'s, over the passes between: nothing from pass ``j - 2
    step``'s ``c1 = f`` to pass ``j``'s ``c2 = c1`` writes what ``f`` read. deriche's filters
    carry two such copies each (its gradient's tapes of a column or row per pass: 8 -> 3)."""
    st = loop.body[p]
    if not (_defines(st, written) and isinstance(st.expr, Read) and st.expr.ref.is_whole()):
        return None
    c2, c1 = st.dst.container, st.expr.ref.container
    q = next((q for q in range(p + 1, len(loop.body)) if any(w.container is c1 for w in stmt_writes(loop.body[q]))),
             None)
    if c1 is c2 or q is None or not _defines(loop.body[q], written):
        return None
    spans = [(q + 1, None), (0, None), (0, p)]     # passes j - 2 step (after q), j - step, j (up to p)
    if not _reads_stay(loop, loop.body[q].expr, [c1, c2], spans, later, written, kept):
        return None
    return substitute(substitute(loop.body[q].expr, loop.var, _back(loop)), loop.var, _back(loop)), c1


def _defines(st, written):
    """Whether ``st`` defines a loop's transient afresh, its only write in the loop, with work
    cheaper than a tape's."""
    return isinstance(st, Assign) and not st.accumulate and st.dst.is_whole() and _cheaper_than_tape(st.expr) and \
        st.dst.container.kind == "transient" and written.get(st.dst.container) == 1


def _back(loop):
    """``var - step`` of ``for`` loop ``loop``: its previous pass."""
    step = const_value(loop.step)
    return op("subtract", scalar(loop.var), Const(step)) if step > 0 else op("add", scalar(loop.var), Const(-step))


def _reads_stay(loop, e, own, spans, later, written, kept):
    """Whether what ``e`` reads (in ``loop``'s body; none of the containers ``own``) keeps, from
    where ``e`` is evaluated to where its restore evaluates it again some passes later, the values
    it read: ``spans``, the parts of the body each pass in between runs, ``(start, stop)`` of the
    pass where ``e`` ran first, the restore's pass last (``_apart_from``), and each container
    it reads written, in the loop and after it, as ``_written_once`` allows."""
    for rd in iter_reads(e):
        x = rd.ref.container
        if any(x is c for c in own) or any(r.ref.container in written and r.ref.container is not loop.var
                                           for ie in rd.ref.index_exprs() for r in iter_reads(ie)):
            return False
        if x is loop.var or x not in written:
            continue
        there = rd.ref                  # the read as the pass in question sees it
        for start, stop in spans:
            if not _apart_from(loop.body[start:stop], x, there, loop):
                return False
            there = substitute(Read(there), loop.var, _back(loop)).ref
        if not (_written_once(loop.body, x, kept, [loop.var]) and _written_once(later, x, kept, [])):
            return False
    return True


def _apart_from(stmts, x, ref, loop):
    """Whether every write of ``x`` in ``stmts`` (in ``loop``'s body) is provably apart from ``ref``."""
    def visit(block, ranges):
        for t in block:
            if any(w.container is x and not apart(w, ref, ranges) for w in stmt_writes(t)):
                return False
            inner = dict(ranges)
            if isinstance(t, For) and loop_range(t) is not None:
                inner[t.var] = loop_range(t)
            if not all(visit(b, inner) for b in child_blocks(t)):
                return False
        return True
    return visit(stmts, {loop.var: loop_range(loop)} if loop_range(loop) is not None else {})


def _written_once(stmts, x, kept, loops):
    """Whether each statement of ``stmts`` (in the loops whose variables are ``loops``) that writes
    ``x`` has its restores needed already (its forward statement's id in ``kept``), or writes each
    element of ``x`` once: at a position each enclosing loop's variable moves."""
    for t in stmts:
        if id(t) not in kept:
            for w in stmt_writes(t):
                if w.container is x and not all(
                        any(isinstance(it, Index) and shifted(it.at, v) for it in w.items) for v in loops):
                    return False
        for block in child_blocks(t):
            inner = loops + [t.var] if isinstance(t, For) else loops + [None] if isinstance(t, While) else loops
            if not _written_once(block, x, kept, inner):
                return False
    return True
