"""The allocation timeline of a gradient call: what is live at each step of forward and backward.

One point per top-level statement of the forward sweep, then of the backward sweep. Each
point has the bytes that do not depend on the plan (``base``: arrays live there, plus the
temporaries evaluating the statement allocates) and, per planned loop, which of its memories
is held there: nothing before the loop runs forward, its snapshots (or, storing every
iteration, its growing tape) from then until the backward sweep reverses it, its reversing
memory while it is reversed, nothing after. The planner's 0/1 program puts one constraint
``base + loop memories <= budget`` on every point.

The model follows what the backend does. The NumPy backend makes an array at its first whole
write (or at entry where a part is written first), lets it go after the statement that uses it
last, and evaluates an expression operator by operator: each operation's result is a
temporary, which NumPy reuses in place for the next operator where it can (the result of
``a + b`` feeds ``(a + b) * c``). Native code fuses expressions into loops (no temporaries)
and keeps its arrays in a workspace for the whole call. A branch counts as its larger arm,
a loop body as its largest statement on top of everything the loop uses.
"""
from __future__ import annotations

from ..ir.core import (Assign, Call, For, If, Op, Push, Read, While, child_blocks, stmt_containers, stmt_reads,
                       stmt_writes, walk)
from ..ir.elements import INFIX

# NumPy reuses an operand's temporary for an operator's result from this size on
# (``NPY_MIN_ELIDE_BYTES``); a smaller temporary is copied.
_ELIDE_BYTES = 256 * 1024
_OPERATORS = set(INFIX) | {"negative"}      # written as Python operators, which NumPy may elide
_COMMUTATIVE = {"add", "multiply"}

HELD, REVERSING = "held", "reversing"
# a value the backward sweep reads: between its last forward use and its first backward one
# (GAP) only storing holds it; at that first use (AGAIN) recomputing it also evaluates it there
GAP, AGAIN = "gap", "again"

# Bytes besides the data: each entry of a NumPy-backend tape is an array object in a list; and
# the interpreter's own objects during a call (frames, views, scalars), an allowance.
ENTRY_BYTES = {"numpy": 128, "native": 0}
CALL_BYTES = 16 * 1024


class Point:
    """One step of the timeline: ``base`` bytes, and per loop variable its phase (HELD or
    REVERSING) here; ``what``: the statement, for a reader (sweep, user line, kind)."""

    __slots__ = ("base", "phases", "what")

    def __init__(self, base, phases, what):
        self.base, self.phases, self.what = base, phases, what

    def total(self, memory):
        """Bytes here given ``memory``: per decision key, the chosen option's bytes by phase."""
        return self.base + sum(memory[k].get(ph, 0) for k, ph in self.phases.items() if k in memory)


def build(gp, size, positions, backend="numpy", values=()):
    """The timeline of store-all gradient program ``gp``.

    ``size``: ``size(container)`` its bytes and
    ``size.dim(expr)`` an extent (None when unknown);
    ``positions``: per planned top-level loop (its key), the index of the loop in the forward
    sweep and of its reversal in the backward sweep (their tapes are counted by the plan, not
    here); ``backend``: "numpy" or "native"; ``values``: forward arrays the backward sweep reads
    that could be recomputed there instead of kept (the NumPy backend only: native code keeps
    every array), each ``(key, container, chain)``, ``chain`` the indices in the forward sweep
    of the definitions evaluating it again (``values.candidates``).

    Returns ``(points, replay bytes per loop, values)``, ``values``: key -> ``(bytes, bytes of
    evaluating it again besides, the point where it would be, the arrays that reads)`` for those
    that can be (what they read is live there, kept); their GAP and AGAIN phases are on the
    points, their bytes there off the base.
    """
    fwd, bwd = list(gp.forward), list(gp.backward)
    stmts = fwd + bwd
    n_fwd = len(fwd)
    outputs = {g for c, g in gp.grads.items() if c.kind == "arg"}        # the gradients returned
    written = {w.container for s in walk(stmts) for w in stmt_writes(s)}
    planned_tapes = set()
    for fi, _ in positions.values():
        planned_tapes |= {t.tape for t in walk(fwd[fi].body) if isinstance(t, Push)}

    tape_bytes = _top_tapes(stmts, size)
    from ..backends.numpy import buffered
    # made at entry: in the forward function, or (those the backward sweep alone uses) in the pullback
    made_early = buffered(stmts)[1] | (buffered(bwd)[1] - {c for t in walk(fwd) for c in stmt_containers(t)})
    first, last = {}, {}
    for i, s in enumerate(stmts):
        for t in walk([s]):
            for c in stmt_containers(t):
                first.setdefault(c, i)
                last[c] = i
    span = {}
    native = backend == "native"
    for c, i in first.items():
        if c.kind == "tape":
            if c in planned_tapes:
                continue
        elif not c.ndim:
            continue
        if c.kind == "arg" and c not in written:
            continue                         # the caller's array, read in place
        start, end = i, last[c]
        if c.kind == "arg" or native or c in made_early:
            start = 0 if c.kind == "arg" or native or i < n_fwd else n_fwd
        if native or c in outputs:
            end = len(stmts)
        span[c] = (start, end)

    recomputable = {} if native else _recomputable(stmts, n_fwd, span, values, size)
    points = []
    for i, s in enumerate(stmts):
        live = [c for c, (a, b) in span.items() if a <= i <= b]
        held = sum(_bytes(c, size, tape_bytes) for c in live)
        phases = {}
        for key, (c, last_fwd, again, _, _) in recomputable.items():
            if last_fwd < i <= again:
                held -= _bytes(c, size, tape_bytes)
                phases[key] = AGAIN if i == again else GAP
        scratch = 0 if native and not isinstance(s, (For, While, If)) else \
            _scratch(s, {c for c in live if span[c][0] < i}, size, native)
        for v, (fi, bi) in positions.items():
            if fi is None:
                continue
            if i >= fi and (bi is None or i < n_fwd + bi):
                phases[v] = HELD
            elif bi is not None and i == n_fwd + bi:
                phases[v] = REVERSING
        sweep = "forward" if i < n_fwd else "backward"
        points.append(Point(held + scratch + CALL_BYTES, phases, (sweep, getattr(s, "loc", None), _kind(s))))
    return points, _recompute_bytes(fwd, n_fwd, positions, span, size, native), \
        {key: (size(c) or 0, extra, again, inputs) for key, (c, _, again, extra, inputs) in recomputable.items()}


def _recomputable(stmts, n_fwd, span, values, size):
    """key -> (container, its last forward use, its first backward use, the bytes of evaluating
    it again there besides its own: its chain's other arrays and the largest temporaries) for
    each value whose chain reads only arrays live there."""
    out = {}
    for key, c, chain in values:
        if c not in span:
            continue
        uses = [i for i, s in enumerate(stmts) if any(c in stmt_containers(t) for t in walk([s]))]
        back = [i for i in uses if i >= n_fwd]
        if not back:
            continue
        last_fwd, again = max(i for i in uses if i < n_fwd), back[0]
        made = {w.container for k in chain for w in stmt_writes(stmts[k])}
        inputs = {r.ref.container for k in chain for r in stmt_reads(stmts[k])} - made
        if any(x in span and not span[x][0] <= again <= span[x][1] for x in inputs):
            continue
        extra = sum(size(x) or 0 for x in made - {c}) + max(_scratch(stmts[k], set(), size, False) for k in chain)
        out[key] = (c, last_fwd, again, extra, inputs)
    return out


def _recompute_bytes(fwd, n_fwd, positions, span, size, native):
    """Per loop: what replaying its forward iterations while it is reversed (any schedule but
    storing every iteration) adds there: the arrays its body writes that are not live there
    already, and the temporaries of its statements."""
    out = {}
    for v, (fi, bi) in positions.items():
        if fi is None or bi is None:
            continue
        at = n_fwd + bi
        live = {c for c, (a, b) in span.items() if a <= at <= b}
        body = fwd[fi]
        written = {w.container for t in walk(body.body) for w in stmt_writes(t)
                   if w.container.ndim and w.container.kind != "tape"}
        out[v] = sum(size(c) or 0 for c in written - live) + _scratch(body, set(span), size, native)
    return out


def _kind(s):
    if isinstance(s, For):
        return f"loop over {s.var.name}"
    return type(s).__name__.lower()


def _bytes(c, size, tape_bytes):
    if c.kind == "tape":
        return tape_bytes.get(c, 0)
    n = size(c)
    return 0 if n is None else n


def _top_tapes(stmts, size):
    """Bytes each tape holds from pushes outside loops (one entry per push)."""
    out = {}
    for s in stmts:
        if isinstance(s, Push) and s.ref.container.ndim:
            out[s.tape] = out.get(s.tape, 0) + _shape_bytes(s.ref, size, s.ref.container.dtype)
        elif isinstance(s, If):
            for body in child_blocks(s):
                for t, b in _top_tapes(body, size).items():
                    out[t] = max(out.get(t, 0), b)
    return out


def _scratch(s, before, size, native):
    """Bytes of temporaries evaluating ``s`` allocates on top of the live arrays (``before``:
    arrays live before ``s``, whose whole rewrite keeps the old array until the new is made)."""
    if isinstance(s, (For, While, If)):
        inner = [t for body in child_blocks(s) for t in body]
        if native:
            return max((_stmt_temp(t, size) for t in walk(inner)), default=0)
        return max((_scratch(t, set(before) | {w.container for w in stmt_writes(t)}, size, native)
                    for t in inner), default=0)
    if isinstance(s, Assign):
        peak, result = _expr(s.expr, size)
        c = s.dst.container
        if c.ndim and s.dst.is_whole() and not s.accumulate:
            if isinstance(s.expr, Read):
                peak = result = _shape_bytes(s.expr, size)     # ``np.array(x)``: a copy
            return peak if c in before else peak - result
        return peak
    if isinstance(s, Call):
        peak = 0
        held = 0
        for e in s.inputs:
            p, r = _expr(e, size)
            peak = max(peak, held + p)
            held += r
        outs = sum(size(c) or 0 for c in s.outputs if c.ndim and c in before)
        return max(peak, held + outs)
    return 0


def _stmt_temp(s, size):
    """Native code: a statement whose destination it also reads elsewhere goes through one
    temporary of the destination's size."""
    if isinstance(s, Assign) and s.dst.container.ndim and not s.accumulate:
        if any(r.ref.container is s.dst.container for r in stmt_reads(s)):
            return _shape_bytes(s.dst, size, s.dst.container.dtype)
    return 0


def _shape_bytes(e, size, dtype=None):
    n = (dtype or e.dtype).itemsize
    for d in e.shape:
        v = size.dim(d)
        if v is None:
            return 0
        n *= v
    return n


def _expr(e, size):
    """(peak bytes of temporaries while evaluating ``e``, bytes of its result if a temporary)."""
    if not isinstance(e, Op):
        return 0, 0
    peak = held = 0
    results = []
    for a in e.args:
        p, r = _expr(a, size)
        peak = max(peak, held + p)
        held += r
        results.append(r)
    res = _shape_bytes(e, size) if e.shape else 0
    # NumPy computes into an operand's temporary: the left one's, or either of a commutative operator
    reusable = results if e.name in _COMMUTATIVE else results[:1]
    if e.name in _OPERATORS and res >= _ELIDE_BYTES and res in reusable:
        return max(peak, held), res
    return max(peak, held + res), res




def rows(points):
    """One constraint per distinct set of loop phases: phases -> the largest base with them."""
    out = {}
    for p in points:
        key = tuple(sorted(p.phases.items()))
        out[key] = max(out.get(key, 0), p.base)
    return out


__all__ = ["Point", "build", "rows", "HELD", "REVERSING"]
