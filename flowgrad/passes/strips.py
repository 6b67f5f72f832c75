"""Blocks of a triangular loop of products: the part the block's iterations share as one product.

Needs: what ``lift_products`` found: a loop ``for v in range(lo, hi)`` (known bounds) and a call
``t = matmul(x, y)`` of its body, the loop's own, whose operands read ``v`` as the batch index of
one operand (``A[v + 1:, v]``) and as one end of the summed slice of both (``A[v + 1:, v]``,
``B[v + 1:, :]``: trmm's ``A[i + 1:, i] @ B[i + 1:, :]``; ``A[i, :i] @ B[:i, :]`` in symm). Such a
loop cannot be one product without padding the triangle with zeros, and a zero times an infinity
is a NaN where the loop had none. Changes: the loop is cut into blocks of ``BLOCK`` iterations;
for each block,

- the part of the summed range every iteration of the block sums over (``[b + BLOCK - 1 + c,
  end)`` when iteration ``v`` sums over ``[v + c, end)``; ``[first, b + c)`` for ``[first, v + c)``)
  is one product ``r`` of the block's rows (BLAS), before the block's iterations;
- each iteration sums the rest of its range (fewer than ``BLOCK`` terms) as before, and adds its
  row of ``r``.

The iterations the blocks leave (where the shared part would be empty: the short ranges at one
end of the triangle) run the loop as it was. Nothing is summed twice and no term is added that
the loop did not add; only the order of the sums changes. Legality: no iteration of a block
writes an element of what the block's product reads (checked iteration by iteration), so the
product reads the values each iteration read. The derivative program then has one product per
block, and its adjoint two.
"""
from __future__ import annotations

from ..ir.core import (I64, Assign, Call, Const, Container, For, Index, NewAxis, Read, Ref, Slice, apart,
                       const_value, iter_reads, loop_range, op, scalar, stmt_writes, substitute, walk)

# Iterations per block. The shared product has this many rows; each iteration still sums up to
# this many terms itself.
BLOCK = 16


def reads_var(e, v):
    """Whether expression ``e`` reads scalar ``v``."""
    return any(r.ref.container is v for r in iter_reads(e))


def value_at(e, v, i):
    """The constant ``e`` takes where loop variable ``v`` is ``i``, or None."""
    return const_value(substitute(e, v, Const(i)))


class _Side:
    """One operand: per item its role (``"b"`` batch, ``"k"`` the summed axis, ``"m"``/``"n"`` a
    free axis, None an index), the batch index's offset from ``v``, and the summed slice's ends:
    ``end`` fixed and the start ``v + c`` (``moves == "start"``), or ``first`` fixed and the stop
    ``v + c``."""

    def __init__(self, ref, roles, shift, moves, c, fixed):
        self.ref, self.roles, self.shift, self.moves, self.c, self.fixed = ref, roles, shift, moves, c, fixed

    def items(self, batch, summed):
        """The operand's items with the batch item ``batch`` (None: as it is) and the summed item
        ``summed``."""
        return [batch if role == "b" and batch is not None else summed if role == "k" else it
                for it, role in zip(self.ref.items, self.roles)]


def _moving(it, v, lo, hi, extent):
    """``("start", c, end)`` where iteration ``i`` of a unit-step slice covers ``[i + c, end)``,
    ``("stop", c, first)`` where it covers ``[first, i + c)``, inside ``[0, extent)``; else None."""
    if const_value(it.step) != 1 or extent is None:
        return None
    spans = [(value_at(it.start, v, i), value_at(it.size, v, i)) for i in range(lo, hi)]
    if any(a is None or n is None or n < 0 or a < 0 or a + n > extent for a, n in spans):
        return None
    starts = [a - i for (a, _), i in zip(spans, range(lo, hi))]
    stops = [a + n - i for (a, n), i in zip(spans, range(lo, hi))]
    if len(set(starts)) == 1 and len({a + n for a, n in spans}) == 1:
        return "start", starts[0], spans[0][0] + spans[0][1]
    if len(set(stops)) == 1 and len({a for a, _ in spans}) == 1:
        return "stop", stops[0], spans[0][0]
    return None


def _side(e, v, lo, hi, written, free):
    """The operand ``e`` of the product as a ``_Side``, or None."""
    if not isinstance(e, Read) or any(isinstance(it, NewAxis) for it in e.ref.items):
        return None
    if any(r.ref.container in written and r.ref.container is not v
           for ie in e.ref.index_exprs() for r in iter_reads(ie)):
        return None
    axes = sum(isinstance(it, Slice) for it in e.ref.items)
    if axes not in (1, 2) or e.ref.perm not in (None, (1, 0)) or e.ref.perm and axes != 2:
        return None
    view_roles = (["m", "k"] if free == "m" else ["k", "n"])[2 - axes if free == "m" else 0:][:axes]
    if e.ref.perm:
        view_roles.reverse()             # a transposed matrix: its items hold the axes the other way
    roles, shift, moving = [], None, None
    for p, it in enumerate(e.ref.items):
        if isinstance(it, Index):
            if not reads_var(it.at, v):
                roles.append(None)
                continue
            offsets = {value_at(it.at, v, i) - i if value_at(it.at, v, i) is not None else None
                       for i in (lo, hi - 1)}
            if shift is not None or len(offsets) != 1 or None in offsets or \
                    any(value_at(it.at, v, i) != i + next(iter(offsets)) for i in range(lo, hi)):
                return None
            shift = next(iter(offsets))
            roles.append("b")
            continue
        role = view_roles.pop(0)
        roles.append(role)
        if not any(reads_var(x, v) for x in (it.start, it.size, it.step)):
            if role == "k":
                return None                  # a summed range that stays: lift_products' case
            continue
        if role != "k":
            return None
        moving = _moving(it, v, lo, hi, const_value(e.ref.container.shape[p]))
        if moving is None:
            return None
    if moving is None:
        return None
    return _Side(e.ref, roles, shift, *moving)


def _blocks(side, lo, hi):
    """The first iteration of the blocked part and the number of blocks: the blocks end at ``hi``
    where the summed range's stop moves (its short ranges come first), start at ``lo`` where its
    start moves; a block's shared part must not be empty."""
    if side.moves == "start":
        n = 0
        while lo + (n + 1) * BLOCK <= hi and lo + (n + 1) * BLOCK + side.c <= side.fixed:
            n += 1
        return lo, n
    n = 0
    while hi - (n + 1) * BLOCK >= lo and hi - (n + 1) * BLOCK + side.c > side.fixed:
        n += 1
    return hi - n * BLOCK, n


def _shared(side, b):
    """The summed item of the shared part of the block starting at ``b`` (an expression)."""
    if side.moves == "start":
        start = op("add", b, Const(BLOCK - 1 + side.c))
        return Slice(start, op("subtract", Const(side.fixed - BLOCK + 1 - side.c), b), 1)
    return Slice(Const(side.fixed), op("subtract", op("add", b, Const(side.c)), Const(side.fixed)), 1)


def _own(side, v, b):
    """The summed item of what iteration ``v`` of the block starting at ``b`` sums itself."""
    if side.moves == "start":
        return Slice(op("add", v, Const(side.c)), op("subtract", op("add", b, Const(BLOCK - 1)), v), 1)
    return Slice(op("add", b, Const(side.c)), op("subtract", v, b), 1)


def _untouched(loop, sides, first, blocks):
    """Whether no iteration of a block writes an element of what its shared product reads."""
    v = loop.var
    fors = [s for s in walk(loop.body) if isinstance(s, For)]
    ranges = {s.var: loop_range(s) for s in fors}
    if any(r is None for r in ranges.values()):
        return False
    writes = [w for s in walk(loop.body) for w in stmt_writes(s)
              if any(w.container is side.ref.container for side in sides)]
    for n in range(blocks):
        b = first + n * BLOCK
        for side in sides:
            batch = Slice(Const(b + side.shift), Const(BLOCK), 1) if side.shift is not None else None
            shared = Ref(side.ref.container, side.items(batch, _shared(side, Const(b))))
            for i in range(b, b + BLOCK):
                at = {u: tuple((substitute(e, v, Const(i)), k) for e, k in bounds) for u, bounds in ranges.items()}
                for w in writes:
                    if w.container is side.ref.container and \
                            not apart(substitute(Read(w), v, Const(i)).ref, shared, at):
                        return False
    return True


def strip_mine(loop, k, call, lo, hi, written, containers, namer):
    """The statements standing for ``loop`` with the product ``call`` (at ``k`` in its body) cut
    into blocks (see the module), or None."""
    v = loop.var
    x, y = _side(call.inputs[0], v, lo, hi, written, "m"), _side(call.inputs[1], v, lo, hi, written, "n")
    if x is None or y is None or (x.shift is None) == (y.shift is None) or x.moves != y.moves:
        return None
    batched = x if x.shift is not None else y
    if sum(r in ("k", "m", "n") for r in batched.roles) != 1:
        return None                          # a batch of matrices: not one product
    first, blocks = _blocks(x, lo, hi)
    if (first, blocks) != _blocks(y, lo, hi) or blocks < 2 or not _untouched(loop, (x, y), first, blocks):
        return None
    t = call.outputs[0]
    b = Container(namer("block"), I64, ())
    containers[b.name] = b
    vb = scalar(b)
    reads = []
    for side in (x, y):
        batch = Slice(op("add", vb, Const(side.shift)), Const(BLOCK), 1) if side.shift is not None else None
        items = side.items(batch, _shared(side, vb))
        # the batch axis becomes the product's first (x batched) or last (y batched) axis
        pos_b = side.roles.index("b") if side.shift is not None else None
        turn = pos_b is not None and (pos_b > side.roles.index("k")) != (side is y)
        reads.append(Read(Ref(side.ref.container, items, (1, 0) if turn else side.ref.perm)))
    shape = ((Const(BLOCK),) + tuple(t.shape)) if batched is x else (tuple(t.shape) + (Const(BLOCK),))
    r = Container(namer(t.name), t.dtype, shape, "transient")
    containers[r.name] = r
    product = Call("matmul", reads, [r], call.attrs, call.loc)
    own = Call("matmul", [Read(Ref(side.ref.container, side.items(None, _own(side, scalar(v), vb)), side.ref.perm))
                          for side in (x, y)], [t], call.attrs, call.loc)
    row = Index(op("subtract", scalar(v), vb))
    whole = [Slice(Const(0), n, 1) for n in t.shape]
    add = Assign(Ref(t, whole), Read(Ref(r, [row] + whole if batched is x else whole + [row])), True, call.loc)
    body = loop.body[:k] + [own, add] + loop.body[k + 1:]
    stop = first + blocks * BLOCK
    out = []
    if x.moves == "stop" and first > lo:
        out.append(For(v, Const(lo), Const(first), Const(1), loop.body, False, loop.loc))
    out.append(For(b, Const(first), Const(stop), Const(BLOCK),
                   [product, For(v, vb, op("add", vb, Const(BLOCK)), Const(1), body, False, loop.loc)],
                   False, loop.loc))
    if x.moves == "start" and stop < hi:
        out.append(For(v, Const(stop), Const(hi), Const(1), loop.body, False, loop.loc))
    return out


__all__ = ["BLOCK", "strip_mine"]
