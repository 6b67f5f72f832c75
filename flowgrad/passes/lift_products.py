"""Take the matrix products of a loop's iterations out of the loop, as one product.

Needs: a captured statement list and its containers, before the autodiff (so that the derivative
program has the one product too). Changes: in ``for v in range(lo, hi)`` (known bounds), a call
``t = matmul(x, y)`` at the top of the body whose operands read ``v`` only as

- one index ``v + c`` of one vector operand (``data[:, v]``, ``B[i + 1:, v]``): the batch axis,
  and the operand becomes a matrix over the loop's range (``data[:, lo:hi]``);
- the bounds of unit-step slices along free axes, the rows of a matrix ``x`` or the columns of a
  matrix ``y`` (``data[:, v:]``): the slice widens to the smallest one holding every iteration's
  (``data[:, lo:]``), and each iteration reads its part of the product

becomes one call before the loop, ``r = matmul(x', y')``, with the batch axis as the product's
first axis (``x`` batched) or last (``y`` batched); the loop reads ``r[v - lo, ...]`` where it read
``t``. Legality: nothing in the loop writes an element the widened operands hold (so the values
the product reads before the loop are those each iteration read), the loop does not read ``t``
before the call nor anything outside the loop reads it. A slice that moves along the summed axis
is not widened (padding it with zeros would turn an infinity outside the slice into a NaN): the
loop is cut into blocks sharing one product each instead (``strips``), as is a loop of row updates
over a range moving with it (``C[r, :] += B[i, :] * A[i, r]`` over ``r < i``). Two
operands reading one matrix at different places along their batch and free axes are both widened
to one view (correlation's ``data[:, i] @ data[:, i + 1:]`` becomes ``data.T @ data``), whose
product is a Gram matrix: one product in its adjoint, and BLAS ``syrk`` in native code.

A loop of dot products becomes a matrix-vector product, a loop of vector-matrix products
(covariance's ``data[:, i] @ data[:, i:]``) a matrix product: BLAS calls over whole matrices
where the loop made one small call per iteration, and the same for their adjoints. A triangular
loop computes the products of the other triangle too; the pass gives up where the widened
product is more than ``_MAX_WASTE`` times the loop's work.
"""
from __future__ import annotations

from ..ir.core import (Assign, Call, Const, Container, For, If, Index, NewAxis, Op, Push, Read, Ref, Slice, While,
                       apart, child_blocks, const_value, iter_reads, loop_range, op, same_ref, scalar, split_offset,
                       stmt_reads, stmt_writes, walk)
from .strips import reads_var as _reads_var, strip_mine, value_at as _at

# Below this many iterations one product gains too little over the loop's calls.
_MIN_TRIPS = 8
# The widened product may do at most this many times the work of the loop's products.
_MAX_WASTE = 2.5


def lift_loop_products(stmts, containers, namer, outputs=()):
    """``stmts`` with the matrix products of loops taken out of them, one per loop (see the
    module); ``outputs``: containers the program hands back (never taken apart)."""
    while True:
        new = _lift_somewhere(stmts, stmts, containers, namer, set(outputs))
        if new is None:
            return stmts
        stmts = new


def _lift_somewhere(block, root, containers, namer, outputs):
    """``block`` with one product lifted (innermost loops first), or None."""
    for k, s in enumerate(block):
        blocks = list(child_blocks(s))
        for b, body in enumerate(blocks):
            new = _lift_somewhere(body, root, containers, namer, outputs)
            if new is not None:
                return block[:k] + [_with_blocks(s, blocks[:b] + [new] + blocks[b + 1:])] + block[k + 1:]
        if isinstance(s, For):
            new = _lift(s, root, containers, namer, outputs)
            if new is not None:
                return block[:k] + new + block[k + 1:]
    return None


def _with_blocks(s, blocks):
    if isinstance(s, For):
        return For(s.var, s.start, s.stop, s.step, blocks[0], s.reverse, s.loc)
    if isinstance(s, While):
        return While(s.cond, blocks[0], s.loc)
    return If(s.cond, blocks[0], blocks[1], s.loc)


def _lift(loop, root, containers, namer, outputs):
    lo, hi, step = (const_value(x) for x in (loop.start, loop.stop, loop.step))
    if loop.reverse or step != 1 or lo is None or hi is None or hi - lo < _MIN_TRIPS:
        return None
    written = {loop.var} | {w.container for s in walk(loop.body) for w in stmt_writes(s)}
    for k, call in enumerate(loop.body):
        if not (isinstance(call, Call) and call.op == "matmul" and len(call.outputs) == 1):
            continue
        t = call.outputs[0]
        if not _private(t, k, loop, root, outputs):
            continue
        plan = _plan(call, loop.var, lo, hi, written)
        if plan is None:
            new = strip_mine(loop, k, call, lo, hi, written, containers, namer)
            if new is not None:
                return new
            continue
        if not _untouched(plan, loop):
            continue
        new = _rewrite(loop, k, plan, containers, namer)
        if new is not None:
            return new
    return strip_mine(loop, None, None, lo, hi, written, containers, namer)


def _count(stmts, c, reads=True):
    fn = stmt_reads if reads else stmt_writes
    return sum(1 for s in walk(stmts) for r in fn(s) if (r.ref.container if reads else r.container) is c)


def _private(t, k, loop, root, outputs):
    """Whether the product ``t`` is the loop's own: written by that one call, read only in the
    loop after it."""
    if t.kind != "transient" or t in outputs or _count(root, t, reads=False) != 1:
        return False
    if any(isinstance(s, Push) and s.ref.container is t for s in walk(root)):
        return False
    inside = _count(loop.body[k + 1:], t)
    return inside > 0 and _count(root, t) == inside


class _Operand:
    """An operand's widened view. Per item of its Ref: ``items`` the widened item, ``roles`` what
    the item's axis is to the product (``"b"`` the batch axis, ``"m"``/``"n"`` a free axis of
    ``x``/``y``, ``"k"`` the summed one, None an index), ``offsets`` where each iteration's part
    starts in the widened axis (an expression in the loop variable, or None where the item is
    kept as it is) and ``sizes`` each iteration's extent."""

    def __init__(self, ref, items, roles, offsets, sizes):
        self.ref, self.items, self.roles, self.offsets, self.sizes = ref, items, roles, offsets, sizes

    def axes(self, role):
        """Positions of the items with ``role``."""
        return [p for p, r in enumerate(self.roles) if r == role]

    def view(self, turn):
        return Read(Ref(self.ref.container, self.items, (1, 0) if turn else None))


def _operand(e, v, lo, hi, written, free):
    """The widened view of one operand (see ``_Operand``; ``free`` the role of its free axis), or
    None."""
    if not isinstance(e, Read) or e.ref.perm is not None or any(isinstance(it, NewAxis) for it in e.ref.items):
        return None
    if any(r.ref.container in written and r.ref.container is not v
           for ie in e.ref.index_exprs() for r in iter_reads(ie)):
        return None
    axes = sum(isinstance(it, Slice) for it in e.ref.items)
    if axes not in (1, 2):
        return None
    view_roles = (["m", "k"] if free == "m" else ["k", "n"])[2 - axes if free == "m" else 0:][:axes]
    items, roles, offsets, sizes = [], [], [], []
    for it in e.ref.items:
        if isinstance(it, Index):
            if not _reads_var(it.at, v):
                items.append(it), roles.append(None), offsets.append(None), sizes.append(None)
                continue
            base, shift = split_offset(it.at)
            if "b" in roles or not (isinstance(base, Read) and base.ref.container is v and not base.ref.items):
                return None
            items.append(Slice(lo + shift, hi - lo, 1))
            roles.append("b"), offsets.append(op("subtract", scalar(v), Const(lo))), sizes.append(None)
            continue
        role = view_roles.pop(0)
        roles.append(role), sizes.append(it.size)
        if not any(_reads_var(x, v) for x in (it.start, it.size, it.step)):
            items.append(it), offsets.append(None)
            continue
        if const_value(it.step) != 1 or role == "k":
            return None                  # a slice moving along the summed axis stays a loop
        spans = [(_at(it.start, v, i), _at(it.size, v, i)) for i in range(lo, hi)]
        if any(a is None or n is None for a, n in spans):
            return None
        spans = [(a, a + n) for a, n in spans if n > 0]
        if not spans:
            return None
        first, last = min(a for a, _ in spans), max(b for _, b in spans)
        items.append(Slice(first, last - first, 1))
        offsets.append(op("subtract", it.start, Const(first)))
    return _Operand(e.ref, items, roles, offsets, sizes)


def _share(x, y):
    """Where ``x`` and ``y`` read one matrix at different places along their batch and free
    axes (correlation's ``data[:, :-1].T @ data[:, 1:]``), both widened to the smallest view
    holding the two, so that the product is a Gram matrix (one product in its adjoint)."""
    if x.ref.container is not y.ref.container or len(x.items) != len(y.items):
        return
    union = []
    for a, b, ra, rb in zip(x.items, y.items, x.roles, y.roles):
        if same_ref(Ref(x.ref.container, (a,)), Ref(x.ref.container, (b,))) and (ra == "k") == (rb == "k"):
            union.append(None)
            continue
        if not (isinstance(a, Slice) and isinstance(b, Slice)) or "k" in (ra, rb) or None in (ra, rb):
            return
        bounds = [const_value(z) for z in (a.start, a.size, a.step, b.start, b.size, b.step)]
        if None in bounds or bounds[2] != 1 or bounds[5] != 1:
            return
        first = min(bounds[0], bounds[3])
        union.append(Slice(first, max(bounds[0] + bounds[1], bounds[3] + bounds[4]) - first, 1))
    for o in (x, y):
        for p, u in enumerate(union):
            if u is None:
                continue
            shift = Const(const_value(o.items[p].start) - const_value(u.start))
            o.offsets[p] = shift if o.offsets[p] is None else op("add", o.offsets[p], shift)
            o.items[p] = u


class _Plan:
    def __init__(self, call, x, y, axes):
        self.call, self.x, self.y = call, x, y
        self.axes = axes                 # per axis of the product: (operand, item position)


def _plan(call, v, lo, hi, written):
    x, y = _operand(call.inputs[0], v, lo, hi, written, "m"), _operand(call.inputs[1], v, lo, hi, written, "n")
    if x is None or y is None or (not x.axes("b")) == (not y.axes("b")):
        return None
    if any(len(o.axes("b")) == 1 and len(o.axes("k")) + len(o.axes("m")) + len(o.axes("n")) != 1 for o in (x, y)):
        return None                      # a batch of matrices: not one product
    _share(x, y)
    axes = [(x, p) for p in x.axes("b") + x.axes("m")] + [(y, p) for p in y.axes("n") + y.axes("b")]
    if _waste(axes, v, lo, hi) > _MAX_WASTE:
        return None
    return _Plan(call, x, y, axes)


def _waste(axes, v, lo, hi):
    """The widened product's work over the loop's products' work. Only its batch axis and the
    free axes it widened differ between the two."""
    wide, each = 1, [1] * (hi - lo)
    for o, p in axes:
        if o.offsets[p] is None:
            continue
        wide *= const_value(o.items[p].size)
        if o.roles[p] == "b":
            continue
        for n, i in enumerate(range(lo, hi)):
            each[n] = None if each[n] is None or _at(o.sizes[p], v, i) is None else each[n] * _at(o.sizes[p], v, i)
    if any(w is None for w in each):
        return float("inf")
    return wide / max(sum(each), 1)


def _untouched(plan, loop):
    """Whether no statement of the loop writes an element the widened operands hold."""
    ranges = {s.var: loop_range(s) for s in [loop] + list(walk(loop.body)) if isinstance(s, For)}
    if any(r is None for r in ranges.values()):
        return False
    for o in (plan.x, plan.y):
        wide = Ref(o.ref.container, o.items)
        for s in walk(loop.body):
            for w in stmt_writes(s):
                if w.container is o.ref.container and not apart(w, wide, ranges):
                    return False
    return True


def _rewrite(loop, k, plan, containers, namer):
    call, x, y = plan.call, plan.x, plan.y
    t = call.outputs[0]
    # the batched vector becomes x's rows or y's columns; its view is turned where its container
    # holds the batch axis on the other side
    reads = [o.view(bool(o.axes("b")) and (o.axes("b")[0] > o.axes("k")[0]) != (o is y)) for o in (x, y)]
    r = Container(namer(t.name), t.dtype, tuple(o.items[p].size for o, p in plan.axes), "transient")
    containers[r.name] = r
    lifted = Call("matmul", reads, [r], call.attrs, call.loc)
    base = []
    for o, p in plan.axes:
        off = o.offsets[p] if o.offsets[p] is not None else Const(0)
        base.append(Index(off) if o.roles[p] == "b" else Slice(off, o.sizes[p], 1))
    body = loop.body[:k] + [_replace(s, t, r, base) for s in loop.body[k + 1:]]
    if _count(body, t):
        return None                      # read where the rewrite does not reach (a gather's source)
    return [lifted, For(loop.var, loop.start, loop.stop, loop.step, body, loop.reverse, loop.loc)]


def _compose(r, base, sub):
    """A read of ``r`` (through ``base``, the items placing ``t`` in ``r``) of what ``sub`` read of
    ``t``."""
    inner = list(sub.items)
    items = []
    for it in base:
        if isinstance(it, Index):
            items.append(it)
            continue
        while inner and isinstance(inner[0], NewAxis):
            items.append(inner.pop(0))
        at = inner.pop(0)
        if isinstance(at, Index):
            items.append(Index(op("add", it.start, at.at)))
        else:
            items.append(Slice(op("add", it.start, at.start), at.size, at.step))
    items += inner
    return Ref(r, items, sub.perm)


def _expr(e, t, r, base):
    if isinstance(e, Read):
        if e.ref.container is t:
            return Read(_compose(r, base, e.ref))
        if any(x.ref.container is t for ie in e.ref.index_exprs() for x in iter_reads(ie)):
            items = []
            for it in e.ref.items:
                if isinstance(it, Index):
                    it = Index(_expr(it.at, t, r, base))
                elif isinstance(it, Slice):
                    it = Slice(*(_expr(z, t, r, base) for z in (it.start, it.size, it.step)))
                items.append(it)
            return Read(Ref(e.ref.container, items, e.ref.perm))
        return e
    if isinstance(e, Op):
        args = [_expr(a, t, r, base) for a in e.args]
        return e if all(a is b for a, b in zip(args, e.args)) else op(e.name, *args)
    return e


def _replace(s, t, r, base):
    """Statement ``s`` reading ``r`` through ``base`` where it read ``t``."""
    if isinstance(s, Assign):
        dst = _expr(Read(s.dst), t, r, base).ref
        return Assign(dst, _expr(s.expr, t, r, base), s.accumulate, s.loc)
    if isinstance(s, Call):
        return Call(s.op, [_expr(e, t, r, base) for e in s.inputs], s.outputs, s.attrs, s.loc)
    if isinstance(s, For):
        return For(s.var, _expr(s.start, t, r, base), _expr(s.stop, t, r, base), s.step,
                   [_replace(u, t, r, base) for u in s.body], s.reverse, s.loc)
    if isinstance(s, While):
        return While(_expr(s.cond, t, r, base), [_replace(u, t, r, base) for u in s.body], s.loc)
    if isinstance(s, If):
        return If(_expr(s.cond, t, r, base), [_replace(u, t, r, base) for u in s.then],
                  [_replace(u, t, r, base) for u in s.orelse], s.loc)
    return s


__all__ = ["lift_loop_products"]
