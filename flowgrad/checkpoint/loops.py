"""Loop checkpointing on the IR: a top-level ``for`` loop runs forward without recording, taking
the schedule's first snapshots of its state as it goes; its backward executes the rest of the
schedule (periodic or binomial): snapshot, restore, advance, record and reverse actions (see
``schedules``). A top-level ``while`` loop does the same with an online schedule
(``apply_online``): snapshots thinned as its count grows, its segments reversed one by one. A
``for`` loop nested in top-level ``for`` loops (``nested_loops``) pushes its state at entry on
a tape, runs without recording, and its reversal pops that state and runs the whole schedule
(``apply_nested``): per run, one state kept instead of every iteration's tape. Loops are
rewritten innermost first, so that a checkpointed loop around a checkpointed one records and
reverses it as rewritten.

The value-restoration invariant of the reverse pass makes this sound: RECORD pushes exactly what
the store-all program would have pushed for those iterations, and REVERSE pops it, leaving the
state at the start of the reversed segment.
"""
from __future__ import annotations

from ..ir.core import (BOOL, I64, Assign, Call, Const, Container, For, If, Index, Pop, Push, Read, Ref, Slice, While,
                       child_blocks, iter_reads, map_blocks, op, scalar, stmt_reads, stmt_writes, touches, walk)
from . import schedules as S


def top_loops(body):
    """(key, loop) for each top-level loop a plan may schedule: a ``for`` loop by its variable's
    name, the k-th ``while`` loop as ``while<k>``."""
    out, k = [], 0
    for s in body:
        if isinstance(s, For):
            out.append((s.var.name, s))
        elif isinstance(s, While):
            out.append((f"while{k}", s))
            k += 1
    return out


def nested_loops(body):
    """(key, loop, enclosing loops, outermost first) for each ``for`` loop nested in a top-level
    ``for`` loop through ``for`` loops and branches only (each run's count is then known from
    the enclosing loops' variables), keyed by its variable's name."""
    out = []

    def visit(stmts, outer):
        for s in stmts:
            if isinstance(s, For):
                if outer:
                    out.append((s.var.name, s, outer))
                visit(s.body, outer + (s,))
            elif isinstance(s, If):
                visit(s.then, outer)
                visit(s.orelse, outer)

    for s in body:
        if isinstance(s, For):
            visit(s.body, (s,))
    return out


def outside(body, loop):
    """The statements of ``body`` outside ``loop``: ``loop`` left out wherever it is nested (its
    enclosing statements keep their other statements)."""
    out = []
    for s in body:
        if s is loop:
            continue
        out.append(map_blocks(s, lambda b: outside(b, loop)))
    return out


def state_containers(loop, rest_of_program):
    """Containers a loop iteration (``for`` or ``while``) needs from the previous one (or that the
    program reads later); ``rest_of_program``: the statements outside the loop (``outside``)."""
    written = []
    var = getattr(loop, "var", None)
    for s in walk(loop.body):
        for r in stmt_writes(s):
            c = r.container
            if c is not var and c.kind != "tape" and c not in written:
                written.append(c)
    read_outside = {r.ref.container for s in walk(rest_of_program) for r in stmt_reads(s)}
    state = []
    for c in written:
        if c in read_outside or not _defined_first(loop.body, c):
            state.append(c)
    return state


def _defined_first(body, c):
    """Whether each iteration writes ``c`` whole before anything reads it (a container only a
    nested loop touches counts when each of that loop's iterations does so)."""
    for k, s in enumerate(body):
        if isinstance(s, (For, While)) and touches(s, c):
            return not any(touches(t, c) for t in body[:k] + body[k + 1:]) and _defined_first(s.body, c)
        reads = {r.ref.container for t in walk([s]) for r in stmt_reads(t)}
        writes_whole = (isinstance(s, Assign) and s.dst.container is c and s.dst.is_whole()
                        and not s.accumulate) or (isinstance(s, Call) and c in s.outputs
                                                  and not _inplace(s))
        if writes_whole and c not in reads:
            return True
        if c in reads or any(r.container is c for t in walk([s]) for r in stmt_writes(t)):
            return False
    return False


def _inplace(call):
    from ..autodiff.rules import CALLS
    return CALLS[call.op].inplace


def checkpointable(loop, state) -> str | None:
    """Why a loop (``for`` or ``while``) cannot be checkpointed, or None."""
    if any(isinstance(s, (Push, Pop)) for s in walk(loop.body)):
        return "its body runs a gradient program, whose tape replaying would push twice"
    loop_written = {r.container for s in walk(loop.body) for r in stmt_writes(s)} | \
        ({loop.var} if isinstance(loop, For) else set())
    for c in state:
        for d in c.shape:
            if any(r.ref.container in loop_written for r in iter_reads(d)):
                return f"{c.name} changes shape inside the loop"
    return None


def apply(forward, backward, loop: For, kind: int, param: Container, state, namer, containers,
          forward_containers):
    """Rewrite one top-level loop of the instrumented forward/backward programs in place.

    New containers the forward sweep writes go into ``forward_containers`` (and ``containers``),
    those only the backward sweep uses into ``containers``."""
    fi = next(k for k, s in enumerate(forward) if isinstance(s, For) and s.var is loop.var)
    bi = next(k for k, s in enumerate(backward) if isinstance(s, For) and s.var is loop.var
              and s.reverse != loop.reverse)
    recorded_body = forward[fi].body
    reversed_body = backward[bi].body

    def new(hint, dtype, shape=(), in_forward=False):
        c = Container(namer(hint), dtype, shape, "transient")
        containers[c.name] = c
        if in_forward:
            forward_containers[c.name] = c
        return c

    trips = new("trips_" + loop.var.name, I64, in_forward=True)
    nslots = new("slots_" + loop.var.name, I64, in_forward=True)
    kind_c = Const(int(kind))
    pre = [Call("trip_count", [loop.start, loop.stop, loop.step], [trips]),
           Call("ckpt_slots", [kind_c, scalar(trips), scalar(param)], [nslots])]
    snaps = {}
    for c in state:
        snap = new("snap_" + c.name, c.dtype, (scalar(nslots),) + c.shape, in_forward=True)
        snaps[c] = snap
        pre.append(Assign(Ref(snap), Const(0, c.dtype)))
        pre.append(Assign(_slot(snap, c, Const(0)), _whole(c)))

    rows = new("rows_" + loop.var.name, I64, in_forward=True)
    sched = new("schedule_" + loop.var.name, I64, (scalar(rows), Const(3)), in_forward=True)
    nf = new("forward_rows_" + loop.var.name, I64, in_forward=True)
    at = new("forward_at_" + loop.var.name, I64, in_forward=True)
    q = new("q_" + loop.var.name, I64, in_forward=True)
    j = new("j_" + loop.var.name, I64, in_forward=True)
    act, a, b = (new(n + "_" + loop.var.name, I64, in_forward=True) for n in ("act", "a", "b"))
    # iteration j of the schedule is the j-th the forward loop runs (``reversed(range(...))``:
    # counted from its last value)
    nth = op("subtract", op("subtract", scalar(trips), 1), scalar(j)) if loop.reverse else scalar(j)
    setvar = Assign(Ref(loop.var, ()), loop.start + nth * loop.step)

    def steps(body, start, stop, reverse=False):
        return [For(j, start, stop, 1, [setvar] + list(body), reverse=reverse, loc=loop.loc)]

    snap, restore = _snapshots(snaps, state, scalar(a))
    advance = (S.ADVANCE, steps(loop.body, scalar(a), scalar(b)))
    # the forward sweep takes the schedule's first snapshots as it goes (``split_forward``)
    pre.append(Call("ckpt_schedule", [kind_c, scalar(trips), scalar(param)], [sched, rows, nf, at]))
    forward[fi:fi + 1] = pre + [For(q, 0, scalar(nf), 1, _actions(sched, q, act, a, b, [snap, advance]),
                                    loc=loop.loc)] + steps(loop.body, scalar(at), scalar(trips))
    backward[bi:bi + 1] = [For(q, scalar(nf), scalar(rows), 1, _actions(sched, q, act, a, b, [
        snap, restore, advance,
        (S.RECORD, steps(recorded_body, scalar(a), scalar(b))),
        (S.REVERSE, steps(reversed_body, scalar(a), scalar(b), reverse=True)),
    ]), loc=loop.loc)]
    return trips, nslots


def apply_nested(forward, backward, loop: For, kind: int, param: Container, state, namer, containers,
                 forward_containers):
    """Rewrite one nested ``for`` loop (``nested_loops``) of the instrumented forward/backward
    programs in place: going forward it pushes its state on a tape and runs without recording;
    its reversal pops that state and runs the whole schedule (the forward sweep's snapshots
    included), so each run keeps one state until its reversal, not every iteration's tape."""
    found = _find(forward, lambda s: isinstance(s, For) and s.var is loop.var), \
        _find(backward, lambda s: isinstance(s, For) and s.var is loop.var and s.reverse != loop.reverse)
    if None in found:
        return                          # a loop the backward sweep does not reverse: no tape to replace
    (fbody, fi), (bbody, bi) = found
    recorded_body, reversed_body = fbody[fi].body, bbody[bi].body
    key = loop.var.name

    def new(hint, dtype, shape=(), kind="transient"):
        c = Container(namer(hint), dtype, shape, kind)
        containers[c.name] = c
        if kind == "tape":
            forward_containers[c.name] = c
        return c

    entry = [(c, new("tape_entry_" + c.name, c.dtype, kind="tape")) for c in state]
    fbody[fi:fi + 1] = [Push(tape, _whole(c).ref, loop.loc) for c, tape in entry] + \
        [For(loop.var, loop.start, loop.stop, loop.step, loop.body, loop.reverse, loop.loc)]

    trips, nslots = new("trips_" + key, I64), new("slots_" + key, I64)
    kind_c = Const(int(kind))
    pre = [Pop(tape, _whole(c).ref, loop.loc) for c, tape in reversed(entry)] + \
        [Call("trip_count", [loop.start, loop.stop, loop.step], [trips]),
         Call("ckpt_slots", [kind_c, scalar(trips), scalar(param)], [nslots])]
    snaps = {}
    for c in state:
        snaps[c] = snap = new("snap_" + c.name, c.dtype, (scalar(nslots),) + c.shape)
        pre += [Assign(Ref(snap), Const(0, c.dtype)), Assign(_slot(snap, c, Const(0)), _whole(c))]
    rows, q, j, act, a, b = (new(n + "_" + key, I64) for n in ("rows", "q", "j", "act", "a", "b"))
    sched = new("schedule_" + key, I64, (scalar(rows), Const(3)))
    pre.append(Call("ckpt_rows", [kind_c, scalar(trips), scalar(param)], [sched, rows]))
    nth = op("subtract", op("subtract", scalar(trips), 1), scalar(j)) if loop.reverse else scalar(j)
    setvar = Assign(Ref(loop.var, ()), loop.start + nth * loop.step)

    def steps(body, reverse=False):
        return [For(j, scalar(a), scalar(b), 1, [setvar] + list(body), reverse=reverse, loc=loop.loc)]

    # the whole schedule, taking its snapshots too
    bbody[bi:bi + 1] = pre + [For(q, 0, scalar(rows), 1, _actions(sched, q, act, a, b, [
        *_snapshots(snaps, state, scalar(a)),
        (S.ADVANCE, steps(loop.body)),
        (S.RECORD, steps(recorded_body)),
        (S.REVERSE, steps(reversed_body, reverse=True)),
    ]), loc=loop.loc)]


def _find(body, pred):
    """(the statement list holding the first statement ``pred`` accepts, its index), searching
    nested blocks too."""
    for k, s in enumerate(body):
        if pred(s):
            return body, k
        for block in child_blocks(s):
            found = _find(block, pred)
            if found is not None:
                return found
    return None


def _actions(sched, q, act, a, b, cases):
    """Row ``q`` of a schedule read into ``act, a, b``, then the statements of the case ``act``
    names (``cases``: (action code, statements))."""
    def field(k):
        return Read(Ref(sched, [Index(scalar(q)), Index(k)]))
    return [Assign(Ref(act), field(0)), Assign(Ref(a), field(1)), Assign(Ref(b), field(2))] + \
        [If(op("equal", scalar(act), code), stmts) for code, stmts in cases]


def _snapshots(snaps, state, slot):
    """The SNAP and RESTORE cases: the loop state into slot ``slot`` of its snapshots, and back."""
    return ((S.SNAP, [Assign(_slot(snaps[c], c, slot), _whole(c)) for c in state]),
            (S.RESTORE, [Assign(Ref(c), Read(_slot(snaps[c], c, slot))) for c in state]))


def apply_online(forward, backward, loop: While, counter: Container, param: Container, state, namer, containers,
                 forward_containers):
    """Rewrite one top-level ``while`` loop for the online schedule (``schedules.online_snapshots``),
    in place: going forward it keeps at most ``param`` (even) snapshots of its state, thinned as
    the count grows; the backward sweep reverses it segment by segment from the last, each by a
    binomial schedule with ``param`` more snapshots (``schedules.segment_rows``). Memory is then
    bounded whatever the trip count: ``2 * param`` states and one iteration's tape.

    ``counter``: the loop's trip counter (the instrumented forward body counts in it; the reversed
    loop runs over it)."""
    fi = next(k for k, s in enumerate(forward) if isinstance(s, While) and
              any(isinstance(t, Assign) and t.dst.container is counter for t in s.body))
    bi = next(k for k, s in enumerate(backward) if isinstance(s, For) and isinstance(s.stop, Read)
              and s.stop.ref.container is counter)
    recorded_body = [t for t in forward[fi].body if not (isinstance(t, Assign) and t.dst.container is counter)]
    trip, reversed_body = backward[bi].var, backward[bi].body
    containers[trip.name] = trip           # no longer a loop variable: set for each reversed iteration

    def new(hint, dtype, shape=(), in_forward=False):
        c = Container(namer(hint), dtype, shape, "transient")
        containers[c.name] = c
        if in_forward:
            forward_containers[c.name] = c
        return c

    key = counter.name
    every, taken = new("every_" + key, I64, in_forward=True), new("taken_" + key, I64, in_forward=True)
    i = new("i_" + key, I64, in_forward=True)
    nslots = op("multiply", scalar(param), Const(2))
    snaps = {c: new("snap_" + c.name, c.dtype, (nslots,) + c.shape, in_forward=True) for c in state}
    pre = [Assign(Ref(every), Const(1)), Assign(Ref(taken), Const(0))] + \
        [Assign(Ref(snap), Const(0, c.dtype)) for c, snap in snaps.items()]
    due = op("equal", op("mod", scalar(counter), scalar(every)), Const(0))
    thin = [For(i, 0, op("floor_divide", scalar(param), Const(2)), 1,
                [Assign(_slot(snaps[c], c, scalar(i)), Read(_slot(snaps[c], c, op("multiply", scalar(i), Const(2)))))
                 for c in state], loc=loop.loc),
            Assign(Ref(taken), op("floor_divide", scalar(param), Const(2))),
            Assign(Ref(every), op("multiply", scalar(every), Const(2)))]
    take = [Assign(_slot(snaps[c], c, scalar(taken)), _whole(c)) for c in state] + \
        [Assign(Ref(taken), op("add", scalar(taken), Const(1)))]
    online = If(due, [If(op("equal", scalar(taken), scalar(param)), thin), If(due, take)])
    forward[fi:fi + 1] = pre + [While(loop.cond, [online] + list(loop.body) +
                                      [Assign(Ref(counter), Const(1), accumulate=True)], loop.loc)]

    seg, rows, q, j = (new(n + "_" + key, I64) for n in ("segment", "rows", "q", "j"))
    sched = new("schedule_" + key, I64, (scalar(rows), Const(3)))
    act, a, b = (new(n + "_" + key, I64) for n in ("act", "a", "b"))

    def steps(body, reverse=False):
        return [For(j, scalar(a), scalar(b), 1, [Assign(Ref(trip), scalar(j))] + list(body), reverse=reverse,
                    loc=loop.loc)]

    backward[bi:bi + 1] = [For(seg, 0, scalar(taken), 1, [
        Call("ckpt_segment", [scalar(counter), scalar(every), scalar(seg), scalar(param), scalar(param)],
             [sched, rows]),
        For(q, 0, scalar(rows), 1, _actions(sched, q, act, a, b, [
            *_snapshots(snaps, state, scalar(a)),
            (S.ADVANCE, steps(loop.body)),
            (S.RECORD, steps(recorded_body)),
            (S.REVERSE, steps(reversed_body, reverse=True)),
        ]), loc=loop.loc)], reverse=True, loc=loop.loc)]


def _whole(c):
    return Read(Ref(c) if c.ndim else Ref(c, ()))


def _slot(snap, c, at):
    return Ref(snap, [Index(at)] + [Slice(0, d, 1) for d in c.shape])


__all__ = ["top_loops", "nested_loops", "outside", "state_containers", "checkpointable", "apply", "apply_online",
           "apply_nested", "BOOL"]
