"""Run a reversed loop forwards when the order of its iterations does not matter.

Needs: the backward sweep of a gradient. Changes: a loop ``for v in reversed(range(...))`` becomes
``for v in range(...)`` when its iterations are independent but for sums, that is when each
container the body writes is

- written only in part ``v`` of one axis, and read there only (``g_B[k, :] += ...``, ``g_A[i, k]``)
  or in a part no iteration writes (``g_x[i]`` where ``j < i`` writes ``g_x[j]``): iterations
  touch disjoint parts;
- only summed into, and read by nothing else in the body (``g_alpha += s``): the sums commute, as
  they do where the compiled functions reassociate; or
- written whole at the top of the body before anything in it reads it, read nowhere outside the
  loop, and not a result (``gsum = ...``): a value private to one iteration;

and the body neither pushes nor pops a tape (whose entries come back in reverse order).

Such a loop around statements over one axis of their own, which cross what it writes along a less
contiguous axis than the loop's (``g_A[:, i] = g * y``, ``g_y += g * A[:, i]`` over ``i``), is then
interchanged: the loop over that axis goes outside and the loop's iterations become the statements'
elements (``g_A[j, :] = g_x * y[j]``, ``g_y[j] += sum(g_x * A[j, :])``). A sum into a part the loop
does not move becomes a sum over the elements; a scalar the body defines from what it does not
write is substituted into its uses. Else a loop of statements on single elements becomes
statements over its iterations, bounds known or not (``g_x[0:i] += gold * L[i, 0:i]``), a scalar
it defines from a part no iteration writes computed once ahead of them: trisolv's backward,
whose inner loop re-read ``g_x[i]`` while writing ``g_x[j]`` and so did not vectorise, ran 2.3x
faster (67 against 29 us at n = 300). mvt's column-loop adjoint, which wrote ``g_A`` a column at a
time, ran 10x faster interchanged (23.7 against 2.3 ms at n = 2000): each row is now written in
one contiguous pass.

Why: the reversed loop walks the rows it touches from the last to the first. A loop nest whose
rows are in L2 ran 2.5-3x slower that way than in ascending order in a measurement of gemm's
adjoint (``g_B[k, :] += g_C[i, :] * a``, ``s = g_C[i, :] @ B[k, :]`` over ``k``): the hardware
prefetchers follow ascending addresses.
"""
from __future__ import annotations

from collections import Counter

from ..ir.core import (I64, Assign, Call, Const, Container, For, If, Index, NewAxis, Op, Pop, Push, Read, Ref,
                       Slice, While, apart, as_expr, child_blocks, const_value, is_cheap, iter_reads, loop_range,
                       loop_span, map_blocks, map_refs, op, reads_besides_sum, same_expr, same_ref, scalar, shifted,
                       stmt_reads, stmt_writes, walk)


def forward_independent_loops(stmts, results, containers, namer):
    """``stmts`` with its reversed loops whose iterations commute run forwards, and interchanged
    where that walks memory in order (see the module); ``results``: the containers handed to the
    caller; new containers go into ``containers``, named by ``namer``."""
    return _block(stmts, _Reads(stmts, results), containers, namer)


class _Reads:
    """Where a loop's last values of a container may be read after it. ``outside(loop, c, n)``
    (``n``: the reads of ``c`` inside the loop) counts the reads of ``c`` outside ``loop`` (a
    result counts as one), leaving out those in another loop that binds ``c`` itself before
    reading it: its variable, or a value it writes whole at the top of its body (a loop variable
    or a temporary that a later loop uses again)."""

    def __init__(self, stmts, results):
        self.stmts, self.results = stmts, set(results)
        self.total = Counter(r.ref.container for s in walk(stmts) for r in stmt_reads(s))
        self.bound = {}

    def outside(self, loop, c, inside):
        extra = int(c in self.results)
        if self.total[c] == inside:
            return extra
        return self._count(self.stmts, loop, c) + extra

    def _binds(self, s, c):
        if id(s) not in self.bound:
            self.bound[id(s)] = {s.var} | _private(s.body)
        return c in self.bound[id(s)]

    def _count(self, stmts, loop, c):
        n = 0
        for s in stmts:
            if s is loop:
                continue
            if isinstance(s, For) and self._binds(s, c) and not any(t is loop for t in walk(s.body)):
                continue
            n += sum(1 for r in stmt_reads(s) if r.ref.container is c)
            for b in child_blocks(s):
                n += self._count(b, loop, c)
        return n


def _block(stmts, reads, containers, namer):
    out = []
    for s in stmts:
        s = map_blocks(s, lambda b: _block(b, reads, containers, namer))
        if isinstance(s, For) and s.reverse and _independent(s, reads):
            s = For(s.var, s.start, s.stop, s.step, s.body, False, s.loc)
            try:
                s = _interchanged(s, containers, namer)
            except _Unfit:
                try:
                    out += _vectorised(s, containers, namer)
                    continue
                except _Unfit:
                    pass
        out.append(s)
    return out


def interchange_forward_loops(stmts, results, containers, namer):
    """``stmts`` (a captured program, before the autodiff) with its loops over independent
    iterations interchanged where that walks memory in order, as ``forward_independent_loops``
    does for reversed ones. Where only the loop's leading statements are over one axis of their
    own (symm's ``C[:i, j] += a * A[i, :i]`` before ``C[i, j] = ...``), the loop is split in two
    first: its iterations being independent, running every iteration's leading statements before
    any iteration's others changes nothing, unless a value private to an iteration passes between
    the two (then the loop stays as it is). A loop of statements on single elements becomes
    statements over its iterations (``_vectorised``), and one of statements on rows statements
    over all its rows (``_widened``)."""
    return _forward_block(stmts, _Reads(stmts, results), containers, namer)


def _forward_block(stmts, reads, containers, namer):
    out = []
    for s in stmts:
        s = map_blocks(s, lambda b: _forward_block(b, reads, containers, namer))
        if isinstance(s, For) and not s.reverse and _independent(s, reads):
            out += _split_interchanged(s, containers, namer)
        else:
            out.append(s)
    return out


# Iterations a loop of the captured program needs for its interchange: they become the elements
# of the statements inside, whose loops should be long enough to vectorise.
_MIN_INNER = 16


def _split_interchanged(loop, containers, namer):
    start, stop, step = (const_value(e) for e in (loop.start, loop.stop, loop.step))
    if None in (start, stop, step) or step < 1 or (stop - start) // step < _MIN_INNER:
        return [loop]
    try:
        return [_interchanged(loop, containers, namer)]
    except _Unfit:
        pass
    try:
        return _vectorised(loop, containers, namer)
    except _Unfit:
        pass
    try:
        return _widened(loop, containers, namer)
    except _Unfit:
        pass
    body = loop.body
    k = 0
    while k < len(body) and isinstance(body[k], Assign) and len(body[k].dst.shape) == 1:
        k += 1
    if k == 0 or k == len(body):
        return [loop]

    def touched(block):
        return {r.ref.container for s in walk(block) for r in stmt_reads(s)} | \
            {w.container for s in walk(block) for w in stmt_writes(s)}

    if _private(body) & touched(body[:k]) & touched(body[k:]):
        return [loop]
    try:
        head = _interchanged(For(loop.var, loop.start, loop.stop, loop.step, body[:k], False, loop.loc),
                             containers, namer)
    except _Unfit:
        return [loop]
    return [head, For(loop.var, loop.start, loop.stop, loop.step, body[k:], False, loop.loc)]


def _independent(loop, reads):
    body = list(walk(loop.body))
    if any(isinstance(s, (Push, Pop, While)) for s in body):
        return False
    written = {w.container for s in body for w in stmt_writes(s)}
    inside = Counter(r.ref.container for s in walk([loop]) for r in stmt_reads(s))
    if loop.var in written or reads.outside(loop, loop.var, inside[loop.var]):
        return False                      # the value it is left with changes
    private = _private(loop.body)
    for c in written:
        if c in private and not reads.outside(loop, c, inside[c]):
            continue
        if not (_summed_only(c, body) or _own_part(c, body, loop) or _summed_apart(c, body, loop)):
            return False
    return True


def _private(block):
    """Containers the block writes whole, unconditionally, before any statement in it reads them."""
    seen, private = set(), set()
    for s in block:
        touched = {r.ref.container for v in walk([s]) for r in stmt_reads(v)}
        if isinstance(s, (Assign, Call)) and not (isinstance(s, Assign) and s.accumulate):
            whole = [w.container for w in stmt_writes(s) if w.is_whole()]
            own = {r.ref.container for r in stmt_reads(s)}
            private |= {c for c in whole if c not in seen and c not in own}
        elif isinstance(s, For):
            if s.var not in seen:
                private.add(s.var)
        seen |= touched | {w.container for v in walk([s]) for w in stmt_writes(v)}
    return private


def _summed_only(c, body):
    """Every write of ``c`` is a sum into it, and nothing else reads it."""
    for s in body:
        if any(w.container is c for w in stmt_writes(s)) and not (isinstance(s, Assign) and s.accumulate):
            return False
        if any(r.ref.container is c for r in reads_besides_sum(s)):
            return False
    return True


def _summed_apart(c, body, loop):
    """Every write of ``c`` is a sum into it, and it is read besides only where no iteration sums
    into it (``gold = g_A[i, j]``, ``j`` from ``i`` on, beside sums into ``g_A[i, 0:i]`` and
    ``g_A[0:i, j]``): what each view covers over all the iterations is compared."""
    reads = []
    for s in body:
        if any(w.container is c for w in stmt_writes(s)) and not (isinstance(s, Assign) and s.accumulate):
            return False
        reads += [r.ref for r in reads_besides_sum(s) if r.ref.container is c]
    return bool(reads) and all(_never_written(r, loop) for r in reads)


def _own_part(c, body, loop):
    """Every write of ``c`` indexes one axis at the same position, ``var`` plus a constant, and
    every read of it is there too or of a part no iteration writes (``g_x[i]`` in a loop writing
    ``g_x[j]`` for ``j`` in ``range(0, i)``)."""
    var = loop.var
    writes = [w for s in body for w in stmt_writes(s) if w.container is c]
    reads = [r.ref for s in body for r in stmt_reads(s) if r.ref.container is c]
    axis = at = None
    for k, ref in enumerate(writes + reads):
        if ref.perm is not None or any(isinstance(it, NewAxis) for it in ref.items):
            return False
        if at is None:
            axis = next((k for k, it in enumerate(ref.items) if isinstance(it, Index) and shifted(it.at, var)),
                        None)
            if axis is None:
                return False
            at = ref.items[axis].at
        elif not (len(ref.items) > axis and isinstance(ref.items[axis], Index) and same_expr(ref.items[axis].at, at)) \
                and not (k >= len(writes) and _unwritten(ref, writes, loop, body)):
            return False
    return True


def _unwritten(ref, writes, loop, body):
    """Whether view ``ref``, read in ``body`` of ``loop``, is the same view in every iteration
    and shares no element with the views ``writes`` any iteration writes."""
    bounds = loop_range(loop)
    varying = {loop.var} | {w.container for s in body for w in stmt_writes(s)}
    if bounds is None or any(r.ref.container in varying for e in ref.index_exprs() for r in iter_reads(e)):
        return False
    return all(apart(ref, w, {loop.var: bounds}) for w in writes)


# ---------------------------------------------------------------- folding


def fold_into_row_loops(stmts, results, containers, namer):
    """``stmts`` (a backward sweep) with the statements over whole rows that follow a loop over
    rows folded into it, one row an iteration (``for i: g_A[i, :] = g * r[i]`` then ``g_A +=
    g_m[:, None] * p`` and ``g_p = sum_to(A * g_m[:, None])`` become ``for i: g_A[i, :] = g *
    r[i]; g_A[i, :] += g_m[i] * p; g_p += A[i, :] * g_m[i]``), where the loop's iterations with
    the rows added still commute (as ``forward_independent_loops`` asks): every pass over the
    rows is then one pass. A sum over the rows that overwrites its destination sums into it
    from zero, set ahead of the loop. For the compiled functions, whose nests share a row's
    statements; NumPy's statements over whole arrays stay as they are. bicg's gradient read
    ``A`` and wrote ``g_A`` twice: once in the loop and once in the two statements after it."""
    return _fold_block(stmts, _Reads(stmts, results), containers, namer)


def _fold_block(stmts, reads, containers, namer):
    out = []
    k = 0
    while k < len(stmts):
        s = map_blocks(stmts[k], lambda b: _fold_block(b, reads, containers, namer))
        k += 1
        if isinstance(s, For) and not s.reverse and const_value(s.step) == 1:
            before, after, zeros = [], [], []
            while out and _fold(out[-1], s, before, after, zeros, reads, containers, namer, ahead=True):
                out.pop()
            while k < len(stmts) and _fold(stmts[k], s, before, after, zeros, reads, containers, namer):
                k += 1
            if before or after:
                out += [Assign(Ref(c), Const(0.0)) for c in zeros]
                s = For(s.var, s.start, s.stop, s.step, before + s.body + after, False, s.loc)
        out.append(s)
    return out


def _fold(t, loop, before, after, zeros, reads, containers, namer, ahead=False):
    """Whether statement ``t`` folds into ``loop`` ahead of its body (``ahead``) or after it, with
    the rows ``before`` and ``after`` it already takes; adds its rows and the containers its sum
    over the rows starts from zero."""
    try:
        zeroed, rows = _row(t, loop, containers, namer)
    except _Unfit:
        return False
    body = rows + before + loop.body + after if ahead else before + loop.body + after + rows
    others = before + loop.body + after
    if not _independent(For(loop.var, loop.start, loop.stop, loop.step, body, False, loop.loc), reads) or \
            not _zeroed_apart(zeroed, others):
        return False
    if ahead:
        before[:0] = rows
    else:
        after += rows
    zeros += zeroed
    return True


def _zeroed_apart(zeros, body):
    """Whether no statement of ``body`` touches the containers in ``zeros``."""
    return not any(r.ref.container in zeros for t in walk(body) for r in stmt_reads(t)) and \
        not any(w.container in zeros for t in walk(body) for w in stmt_writes(t))


def _row(s, loop, containers, namer):
    """``(zeroed, stmts)``: statement ``s``, over the loop's rows along its first axis, as
    statements on row ``loop.var`` (an element of each view's axis along it), and the containers
    its sum over the rows sums into from zero; raises ``_Unfit`` for any other statement."""
    trips = op("subtract", loop.stop, loop.start)
    at = Read(Ref(loop.var, ())) if const_value(loop.start) == 0 else op("subtract", Read(Ref(loop.var, ())),
                                                                         loop.start)
    if isinstance(s, Assign) and len(s.dst.shape) >= 2 and same_expr(s.dst.shape[0], trips) and \
            const_value(trips) not in (0, 1):
        rank = len(s.dst.shape)
        return [], [Assign(_row_ref(s.dst, rank, at), _row_expr(s.expr, rank, at), s.accumulate, s.loc)]
    if isinstance(s, Call) and s.op == "sum_to" and len(s.outputs) == 1:
        full, shape = s.attrs["full"], s.attrs["shape"]
        x = s.inputs[0]
        if len(full) < 2 or len(x.shape) != len(full) or len(shape) > len(full) or \
                not same_expr(as_expr(full[0]), trips) or const_value(trips) in (0, 1) or \
                len(shape) == len(full) and const_value(as_expr(shape[0])) != 1:
            raise _Unfit
        out = s.outputs[0]
        kept = tuple(shape[1:]) if len(shape) == len(full) else tuple(shape)       # the row's sum's shape
        if len(kept) == len(full) - 1 and all(same_expr(as_expr(a), as_expr(b)) for a, b in zip(kept, full[1:])):
            return [out], [Assign(Ref(out), _row_expr(x, len(full), at), True, s.loc)]     # no sum in a row
        part = Container(namer("gsum"), out.dtype, kept)
        containers[part.name] = part
        row = Call("sum_to", [_row_expr(x, len(full), at)], [part],
                   {**s.attrs, "full": tuple(full[1:]), "shape": part.shape}, s.loc)
        return [out], [row, Assign(Ref(out), Read(Ref(part)), True, s.loc)]
    raise _Unfit


def _row_expr(e, rank, at):
    if isinstance(e, Const):
        return e
    if isinstance(e, Read):
        return Read(_row_ref(e.ref, rank, at))
    if isinstance(e, Op):
        return op(e.name, *(_row_expr(a, rank, at) for a in e.args))
    raise _Unfit


def _row_ref(ref, rank, at):
    """View ``ref``, in a statement of ``rank`` axes, at row ``at`` of the statement's first axis
    (right-aligned, as NumPy broadcasts): unchanged where it does not span that axis, its one
    row where it broadcasts along it."""
    if len(ref.shape) < rank:
        return ref
    if ref.perm is not None:
        raise _Unfit
    items = list(ref.items)
    k = next(k for k, it in enumerate(items) if not isinstance(it, Index))
    it = items[k]
    if isinstance(it, NewAxis):
        del items[k]
    else:
        items[k] = Index(it.start if const_value(it.size) == 1 else op("add", it.start, op("multiply", at, it.step)))
    while True:                 # the leading length-1 axes left broadcast as no axes do
        k = next((k for k, it in enumerate(items) if not isinstance(it, Index)), None)
        if k is None or not isinstance(items[k], NewAxis):
            return Ref(ref.container, items)
        del items[k]


# ---------------------------------------------------------------- interchange


class _Unfit(Exception):
    """The loop is not one ``_interchanged`` turns inside out."""


def _interchanged(loop, containers, namer):
    """``loop`` (independent, running forwards) with the axis its statements walk outside and its
    own iterations as their elements (see the module); raises ``_Unfit`` where it does not apply or
    would not walk the written arrays more contiguously."""
    trips, written, defs, stmts = _parts(loop)
    if not stmts or not all(isinstance(s, Assign) and len(s.dst.shape) == 1 for s in stmts):
        raise _Unfit
    m = stmts[0].dst.shape[0]
    if const_value(m) == 1 or any(not same_expr(s.dst.shape[0], m) for s in stmts) or \
            any(r.ref.container in written | {loop.var} for r in iter_reads(m)):
        raise _Unfit
    j = Container(namer("j"), I64, ())
    vec = _Vectorise(loop, trips, m, scalar(j), written)
    body = _over_iterations(vec, defs, stmts, containers, namer)
    if vec.score <= 0:
        raise _Unfit
    containers[j.name] = j
    return For(j, 0, m, 1, body, False, loop.loc)


def _vectorised(loop, containers, namer):
    """``loop`` (independent, running forwards) over statements on single elements (``t = p[j]``,
    ``C[i, j] = beta * C[i, j] + t``) as statements over its iterations (``C[i, 0:n] = beta *
    C[i, 0:n] + p[0:n]``): the derivative program then tapes and restores whole views where it
    pushed one element per iteration. Raises ``_Unfit`` where a statement is not on elements."""
    trips, written, defs, stmts = _parts(loop)
    if not stmts or not all(isinstance(s, Assign) and s.dst.shape == () for s in stmts):
        raise _Unfit
    return _over_iterations(_Vectorise(loop, trips, None, Const(0), written), defs, stmts, containers, namer)


def _widened(loop, containers, namer):
    """``loop`` (independent, running forwards, constant bounds) over statements on one row of
    their arrays each (``tmp[i, :] = alpha * p[i, :]``, ``D[i, :] += t[i, :]``, the loop's
    variable indexing the leading axis of each view it moves) as statements over all its rows
    (``tmp[0:n, :] = alpha * p[0:n, :]``): what the passes and the derivative know of whole
    arrays then applies (a fill the rows overwrite dropped, a product summed into its
    destination by BLAS, an adjoint's copy propagated, one push of a whole view instead of one
    per row). A value private to an iteration (``t = tanh(a[i, :])``, a scalar) gets a row of
    its own in a new container. Raises ``_Unfit`` for any other loop."""
    trips = _parts(loop)[0]
    body = loop.body
    if not body or not all(isinstance(s, Assign) for s in body):
        raise _Unfit
    var, start, step = loop.var, const_value(loop.start), const_value(loop.step)
    at = op("subtract", scalar(var), Const(start)) if start else scalar(var)       # 0 at the first row
    private = {c: Container(namer(c.name + "_rows"), c.dtype, ((trips - 1) * step + 1,) + c.shape)
               for c in _private(body) if c is not var}
    body = map_refs(body, lambda ref: _own_row(ref, private, at))
    _elementwise(body, loop)
    rows = _Widen(loop, trips, {w.container for s in body for w in stmt_writes(s)})
    out = []
    for s in body:
        rank = len(s.dst.shape)
        dst = rows.ref(s.dst, rank)
        if dst is s.dst:                      # a view every iteration writes again
            raise _Unfit
        out.append(Assign(dst, rows.expr(s.expr, rank), s.accumulate, s.loc))
    containers.update((c.name, c) for c in private.values())
    return out


def _own_row(ref, private, at):
    """``ref``, of a container private to an iteration, as the same view of its row ``at`` (the
    loop's variable less its start) in the container ``private`` gives it."""
    c = private.get(ref.container)
    if c is None:
        return ref
    if ref.perm is not None:
        raise _Unfit
    return Ref(c, [Index(at)] + list(ref.items))


class _Widen:
    """Rewrites a loop body's views and expressions over all the loop's iterations, each a row
    along a new leading axis: a view the variable moves gets a slice over the iterations for the
    variable's index (which must come before the view's other axes), and length-1 axes after it
    up to the statement's rank, so that it broadcasts as the row did; a view it does not move
    broadcasts along the new axis as it is."""

    def __init__(self, loop, trips, written):
        self.loop, self.trips, self.written = loop, trips, written

    def expr(self, e, rank):
        if isinstance(e, Const):
            return e
        if isinstance(e, Read):
            c = e.ref.container
            if c is self.loop.var or c.ndim == 0 and c in self.written:
                raise _Unfit
            return Read(self.ref(e.ref, rank))
        if isinstance(e, Op):
            return op(e.name, *(self.expr(a, rank) for a in e.args))
        raise _Unfit

    def ref(self, ref, rank):
        var = self.loop.var
        if ref.perm is not None:
            raise _Unfit
        items, moved = [], False
        for it in ref.items:
            uses = {r.ref.container for e in _exprs(it) for r in iter_reads(e)}
            if uses & self.written:
                raise _Unfit
            if var in uses:
                if moved or not isinstance(it, Index) or not shifted(it.at, var) or \
                        any(not isinstance(x, Index) for x in items):
                    raise _Unfit
                items.append(Slice(_at_start(it.at, var, self.loop.start), self.trips, self.loop.step))
                items += [NewAxis() for _ in range(rank - len(ref.shape))]
                moved = True
            else:
                items.append(it)
        return Ref(ref.container, items) if moved else ref


def _parts(loop):
    """``(trips, written, defs, stmts)`` of a loop of positive constant step, with constant bounds
    and at least two iterations or unit step and bounds it does not write: its trip count (an
    expression for run-time bounds), the containers its body writes, and its body split after
    the leading scalar definitions; raises ``_Unfit`` for any other loop."""
    start, stop, step = (const_value(e) for e in (loop.start, loop.stop, loop.step))
    if step is None or step < 1:
        raise _Unfit
    if start is not None and stop is not None:
        if stop - start < 2 * step:
            raise _Unfit
        trips = (stop - start + step - 1) // step
    elif step == 1 and loop_range(loop) is not None:
        trips = op("maximum", Const(0), op("subtract", loop.stop, loop.start))
    else:
        raise _Unfit
    written = {w.container for s in walk(loop.body) for w in stmt_writes(s)}
    k = 0
    while k < len(loop.body) and _scalar_def(loop.body[k]):
        k += 1
    return trips, written, loop.body[:k], loop.body[k:]


def _over_iterations(vec, defs, stmts, containers, namer):
    """The statements ``stmts`` (after the scalar definitions ``defs``, substituted into them) over
    the loop's iterations, as ``vec`` rewrites them; a sum into one element over the iterations
    becomes a ``sum``. A definition reading a part of a written container that no iteration
    writes (``gold = g_x[i]`` in a loop summing into ``g_x[j]``, ``j < i``) is computed once,
    ahead of the statements, where the loop runs at least once."""
    _elementwise(stmts, vec.loop)
    body = []
    for s in defs:
        if any(r.ref.container in vec.written and r.ref.container not in vec.defs and
               not _never_written(r.ref, vec.loop) for r in iter_reads(s.expr)):
            body.append(_ahead(vec, s))
            continue
        if not is_cheap(s.expr):
            raise _Unfit
        vec.defs[s.dst.container] = vec.expr(s.expr)
    for s in stmts:
        dst = vec.ref(s.dst, weight=2)
        expr = vec.expr(s.expr)
        if dst.shape:
            body.append(Assign(dst, expr, s.accumulate, s.loc))
        elif s.accumulate and expr.shape:        # a sum over the iterations
            total = Container(namer("gsum"), expr.dtype, ())
            containers[total.name] = total
            body += [Call("sum", [expr], [total], {"axis": None, "keepdims": False}, s.loc),
                     Assign(dst, scalar(total), True, s.loc)]
        else:
            raise _Unfit
    return body


def _never_written(ref, loop):
    """Whether no iteration of ``loop`` writes what view ``ref`` covers over its iterations
    (``g_A[i, j]`` for ``j`` from ``i`` on, where the loop sums into ``g_A[i, 0:i]`` and
    ``g_A[0:i, j]``): read there, the view holds the same values whatever the order."""
    span = loop_span(ref, loop)
    writes = [w for s in walk(loop.body) for w in stmt_writes(s) if w.container is ref.container]
    spans = [loop_span(w, loop) for w in writes]
    return span is not None and None not in spans and all(apart(span, w) for w in spans)


def _ahead(vec, s):
    """Definition ``s`` computed once ahead of the loop's statements (``_over_iterations``);
    raises ``_Unfit`` where its value may change from one iteration to the next."""
    body = list(walk(vec.loop.body))
    writes = {}
    for t in body:
        for w in stmt_writes(t):
            writes.setdefault(w.container, []).append(w)
    for r in iter_reads(s.expr):
        c = r.ref.container
        if c in vec.defs or c is vec.loop.var or c.ndim == 0 and c in writes and c not in vec.ahead or \
                c in writes and not _unwritten(r.ref, writes[c], vec.loop, body):
            raise _Unfit
    vec.ahead.add(s.dst.container)
    if const_value(vec.trips) is not None:
        return s
    return If(op("greater", vec.trips, Const(0)), [s], (), s.loc)


def _scalar_def(s):
    return isinstance(s, Assign) and not s.accumulate and s.dst.container.ndim == 0


def _elementwise(stmts, loop):
    """Each container the statements write is written through views that share no element over
    the iterations of ``loop`` (one view, or ``g_A[i, 0:i]`` and ``g_A[0:i, j]`` for ``j`` from
    ``i`` on) and read only through them, so their order per element is all that matters."""
    views = {}
    for s in stmts:
        seen = views.setdefault(s.dst.container, [])
        if not any(same_ref(v, s.dst) for v in seen):
            seen.append(s.dst)
    for vs in views.values():
        if len(vs) > 1:
            spans = [loop_span(v, loop) for v in vs]
            if any(x is None for x in spans) or \
                    not all(apart(x, y) for k, x in enumerate(spans) for y in spans[k + 1:]):
                raise _Unfit
    for s in stmts:
        if any(r.ref.container in views and not any(same_ref(r.ref, v) for v in views[r.ref.container])
               for r in list(iter_reads(s.expr)) + [r for e in s.dst.index_exprs() for r in iter_reads(e)]):
            raise _Unfit


class _Vectorise:
    """Rewrites a loop body's views and expressions over the loop's iterations at one element ``j``
    of the body's axis; ``score`` counts the views the interchange walks more contiguously (less
    the ones it walks less so)."""

    def __init__(self, loop, trips, m, j, written):
        self.loop, self.trips, self.m, self.j, self.written = loop, trips, m, j, written
        self.defs = {}
        self.ahead = set()
        self.score = 0

    def expr(self, e):
        if isinstance(e, Const):
            return e
        if isinstance(e, Read):
            c = e.ref.container
            if c in self.defs and len(e.ref.shape) <= 1:
                return self.defs[c]
            if c is self.loop.var or c.ndim == 0 and c in self.written and c not in self.ahead:
                raise _Unfit
            return Read(self.ref(e.ref, weight=1))
        if isinstance(e, Op):
            return op(e.name, *(self.expr(a) for a in e.args))
        raise _Unfit

    def ref(self, ref, weight):
        """``ref`` at element ``j`` of the body's axis, over the loop's iterations where it moves
        with them."""
        var = self.loop.var
        if ref.perm is not None or len(ref.shape) > 1 or \
                len(ref.shape) == 1 and const_value(ref.shape[0]) != 1 and not same_expr(ref.shape[0], self.m):
            raise _Unfit
        items, axis, moves, walks = [], 0, None, None
        for it in ref.items:
            if isinstance(it, NewAxis):
                continue                        # broadcast along the body's axis
            uses = {r.ref.container for e in _exprs(it) for r in iter_reads(e)}
            if uses & self.written:
                raise _Unfit
            if var in uses:
                if moves is not None or not isinstance(it, Index) or not shifted(it.at, var):
                    raise _Unfit
                moves = axis
                items.append(Slice(_at_start(it.at, var, self.loop.start), self.trips, self.loop.step))
            elif isinstance(it, Slice):         # the body's axis (or one element of a broadcast)
                walks = axis
                at = it.start if const_value(it.size) == 1 else op("add", it.start, op("multiply", self.j, it.step))
                items.append(Index(at))
            else:
                items.append(it)
            axis += 1
        if moves is not None and walks is not None and const_value(ref.shape[0]) != 1:
            self.score += weight if moves > walks else -weight
        return Ref(ref.container, items)


def _exprs(it):
    if isinstance(it, Index):
        return (it.at,)
    return () if isinstance(it, NewAxis) else (it.start, it.size, it.step)


def _at_start(e, var, start):
    """``e`` (``var`` or ``var`` plus or minus a constant) at ``var = start``."""
    if isinstance(e, Read):
        return start
    return op(e.name, _at_start(e.args[0], var, start), e.args[1])


__all__ = ["fold_into_row_loops", "forward_independent_loops", "interchange_forward_loops"]
