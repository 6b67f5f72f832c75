"""Blocks of a triangular loop of products: the part the block's iterations share as one product.

Needs: what ``lift_products`` found: a loop ``for v in range(lo, hi)`` (known bounds) and a call
``t = matmul(x, y)`` of its body, the loop's own, whose operands read ``v`` as the batch index of
one operand (``A[v + 1:, v]``) and as one end of the summed slice of both (``A[v + 1:, v]``,
``B[v + 1:, :]``: trmm's ``A[i + 1:, i] @ B[i + 1:, :]``; ``A[i, :i] @ B[:i, :]`` in symm). Such a
loop cannot be one product without padding the triangle with zeros, and a zero times an infinity
is a NaN where the loop had none. Changes: the loop is cut into blocks of ``BLOCK`` iterations
(``SHORT_BLOCK`` in a short loop of vectors); for each block,

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

A loop over rows ``r`` in a range moving with ``v`` whose one statement adds ``u(v, r) * w(v, S)``
to ``X[r, S]`` (symm's ``C[r, :] += alpha * B[i, :] * A[i, r]`` over ``r < i``, once ``order`` has
interchanged its column loop) is blocked alike, with or without a product in the loop: each
iteration adds to the rows only it reaches, and the rows every iteration of the block reaches
receive ``U.T @ W`` once after the block (one BLAS call adding into ``X``). Legality: nothing
else in the loop touches those rows, and nothing in it writes what ``u`` and ``w`` read.
"""
from __future__ import annotations

from ..ir.core import (I64, Assign, Call, Const, Container, For, Index, NewAxis, Op, Read, Ref, Slice, apart,
                       const_value, iter_reads, loop_range, op, scalar, split_offset, stmt_reads, stmt_writes,
                       substitute, walk)

# Iterations per block. The shared product has this many rows; each iteration still sums up to
# this many terms itself. A short loop whose iterations each make a vector (a row of a product,
# a row update) takes SHORT_BLOCK: there the triangle the iterations sum themselves (up to a
# block's iterations times the vector per iteration) weighs more than one more BLAS call per
# block. Measured on symm's and trmm's gradients (one CPU): blocks of 8 iterations were 6-12%
# faster than 16 for 100 to 200 iterations and vectors of 120 to 500 elements, and 3-9% slower
# for 300 iterations; for vectors of 8 to 20 elements 16 stayed 1-3% ahead, and a scalar per
# iteration (ludcmp's substitutions) was no faster either way.
BLOCK = 16
SHORT_BLOCK = 8
SHORT_LOOP = 256        # iterations below which a loop of vectors takes SHORT_BLOCK
WIDE = 24               # elements per iteration from which an iteration's work counts as a vector


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


def _block_size(lo, hi, shape):
    """Iterations per block for a loop over ``[lo, hi)`` whose iterations each make an array of
    ``shape`` (a product's, or a row update's view; see ``BLOCK``)."""
    width = 1
    for n in shape:
        width = None if width is None or const_value(n) is None else width * const_value(n)
    return SHORT_BLOCK if hi - lo < SHORT_LOOP and width is not None and width >= WIDE else BLOCK


def _blocks(side, lo, hi, size):
    """The first iteration of the blocked part and the number of blocks of ``size`` iterations:
    the blocks end at ``hi`` where the summed range's stop moves (its short ranges come first),
    start at ``lo`` where its start moves; a block's shared part must not be empty."""
    if side.moves == "start":
        n = 0
        while lo + (n + 1) * size <= hi and lo + (n + 1) * size + side.c <= side.fixed:
            n += 1
        return lo, n
    n = 0
    while hi - (n + 1) * size >= lo and hi - (n + 1) * size + side.c > side.fixed:
        n += 1
    return hi - n * size, n


def _shared(side, b, size):
    """The summed item of the shared part of the block of ``size`` starting at ``b`` (an
    expression)."""
    if side.moves == "start":
        start = op("add", b, Const(size - 1 + side.c))
        return Slice(start, op("subtract", Const(side.fixed - size + 1 - side.c), b), 1)
    return Slice(Const(side.fixed), op("subtract", op("add", b, Const(side.c)), Const(side.fixed)), 1)


def _own(side, v, b, size):
    """The summed item of what iteration ``v`` of the block of ``size`` starting at ``b`` sums
    itself."""
    if side.moves == "start":
        return Slice(op("add", v, Const(side.c)), op("subtract", op("add", b, Const(size - 1)), v), 1)
    return Slice(op("add", b, Const(side.c)), op("subtract", v, b), 1)


def _untouched(loop, sides, first, blocks, size):
    """Whether no iteration of a block writes an element of what its shared product reads."""
    v = loop.var
    fors = [s for s in walk(loop.body) if isinstance(s, For)]
    ranges = {s.var: loop_range(s) for s in fors}
    if any(r is None for r in ranges.values()):
        return False
    writes = [w for s in walk(loop.body) for w in stmt_writes(s)
              if any(w.container is side.ref.container for side in sides)]
    for n in range(blocks):
        b = first + n * size
        for side in sides:
            batch = Slice(Const(b + side.shift), Const(size), 1) if side.shift is not None else None
            shared = Ref(side.ref.container, side.items(batch, _shared(side, Const(b), size)))
            for i in range(b, b + size):
                at = {u: tuple((substitute(e, v, Const(i)), k) for e, k in bounds) for u, bounds in ranges.items()}
                for w in writes:
                    if w.container is side.ref.container and \
                            not apart(substitute(Read(w), v, Const(i)).ref, shared, at):
                        return False
    return True


class _Update:
    """A loop ``for r in <range moving with v>`` whose one statement adds ``u(v, r) * w(v, S)``
    (times factors the loop does not change) to ``X[r, S]`` (symm's ``C[r, :] += alpha * B[i, :] *
    A[i, r]`` over ``r < i``): over a block of iterations of ``v``, the rows every iteration adds to
    receive one product ``U.T @ W``. ``moves``, ``c`` and ``fixed`` describe the range of ``r`` as
    ``_Side`` does a summed slice; ``u`` is the factor reading ``r``, ``ws`` the factors along
    ``S``, ``scales`` the rest; ``size`` is the length of ``S``."""

    def __init__(self, loop, moving, u, ws, scales, size):
        self.loop, self.assign = loop, loop.body[0]
        self.moves, self.c, self.fixed = moving
        self.u, self.ws, self.scales, self.size = u, ws, scales, size


def _factors(e):
    if isinstance(e, Op) and e.name == "multiply":
        return _factors(e.args[0]) + _factors(e.args[1])
    return [e]


def _roles(ref, v, r, written):
    """Per item of ``ref``: ``("v", shift)`` for an index ``v + shift``, ``("r", shift)`` for
    ``r + shift``, ``("s", None)`` for a slice, None for an index that is neither; or None where an
    item reads ``v`` or ``r`` otherwise or something the loop writes."""
    out = []
    for it in ref.items:
        exprs = (it.at,) if isinstance(it, Index) else (it.start, it.size, it.step) if isinstance(it, Slice) else ()
        if isinstance(it, NewAxis) or any(x.ref.container in written - {v, r} for e in exprs for x in iter_reads(e)):
            return None
        if isinstance(it, Slice):
            if any(reads_var(e, u) for e in exprs for u in (v, r)):
                return None
            out.append(("s", None))
            continue
        base, shift = split_offset(it.at)
        var = base.ref.container if isinstance(base, Read) and not base.ref.items else None
        if var in (v, r):
            out.append(("v" if var is v else "r", shift))
        elif reads_var(it.at, v) or reads_var(it.at, r):
            return None
        else:
            out.append(None)
    return out


def _kinds(roles):
    return sorted(x[0] for x in roles if x is not None)


def _update(s, v, lo, hi, written):
    """Loop ``s`` of the body of the loop over ``v`` as an ``_Update``, or None."""
    if not (isinstance(s, For) and not s.reverse and const_value(s.step) == 1 and len(s.body) == 1):
        return None
    a, r = s.body[0], s.var
    if not (isinstance(a, Assign) and a.accumulate and a.dst.perm is None) or a.dst.container.dtype.kind != "f":
        return None
    x = a.dst.container
    dst = _roles(a.dst, None, r, written)
    if dst is None or _kinds(dst) != ["r", "s"] or ("r", 0) not in dst:
        return None
    extent = const_value(x.shape[dst.index(("r", 0))])
    moving = _moving(Slice(s.start, op("subtract", s.stop, s.start), 1), v, lo, hi, extent)
    if moving is None:
        return None
    u, ws, scales = [], [], []
    for f in _factors(a.expr):
        if not any(q.ref.container in written | {r} for q in iter_reads(f)) and f.shape == ():
            scales.append(f)
            continue
        if not isinstance(f, Read) or f.ref.perm is not None or f.ref.container in written | {x} \
                or f.ref.container.dtype != x.dtype:
            return None
        roles = _roles(f.ref, v, r, written)
        kinds = None if roles is None else _kinds(roles)
        if kinds == ["r", "v"]:
            u.append(f)
        elif kinds == ["s", "v"]:
            ws.append(f)
        else:
            return None
    if len(u) != 1 or not ws:
        return None
    return _Update(s, moving, u[0], ws, scales, a.dst.items[dst.index(("s", None))].size)


def _updates_apart(loop, upd, first, blocks, size, written):
    """Whether nothing in the loop but ``upd``'s own statement touches an element of the rows
    every iteration of a block adds to, so that their sums can wait until the block's end."""
    v, x = loop.var, upd.assign.dst.container
    fors = [s for s in walk(loop.body) if isinstance(s, For)]
    ranges = {s.var: loop_range(s) for s in fors}
    if any(r is None for r in ranges.values()):
        return False
    touches = [ref for s in walk(loop.body) if s is not upd.assign
               for ref in [w for w in stmt_writes(s)] + [e.ref for e in stmt_reads(s)] if ref.container is x]
    roles = _roles(upd.assign.dst, None, upd.loop.var, written)
    for n in range(blocks):
        b = first + n * size
        shared = Ref(x, [_shared(upd, Const(b), size) if role == ("r", 0) else it
                         for it, role in zip(upd.assign.dst.items, roles)])
        for i in range(b, b + size):
            at = {u: tuple((substitute(e, v, Const(i)), k) for e, k in bounds) for u, bounds in ranges.items()}
            if any(not apart(substitute(Read(ref), v, Const(i)).ref, shared, at) for ref in touches):
                return False
    return True


def _block_view(read, v, r, vb, size, rows, written):
    """``read`` over the block's iterations (its ``v`` index a slice of ``size``) and, where it
    reads ``r``, over ``rows``; with its axes as ``(v, other)``."""
    roles = _roles(read.ref, v, r, written)
    items = []
    for it, role in zip(read.ref.items, roles):
        if role is not None and role[0] == "v":
            it = Slice(op("add", vb, Const(role[1])), Const(size), 1)
        elif role is not None and role[0] == "r":
            it = Slice(op("add", rows.start, Const(role[1])), rows.size, 1)
        items.append(it)
    first = next(role for role in roles if role is not None)
    return Ref(read.ref.container, items, None if first[0] == "v" else (1, 0))


def _shared_sum(upd, v, vb, size, written, containers, namer):
    """The statements adding, after a block's iterations, what they added to the rows they all
    add to: ``t = matmul(U.T, W); X[rows, S] += t`` (``W`` a temporary where ``w`` has several
    factors or a scale)."""
    a, r = upd.assign, upd.loop.var
    rows = _shared(upd, vb, size)
    x = a.dst.container
    out = []
    ws = [Read(_block_view(w, v, r, vb, size, rows, written)) for w in upd.ws]
    if len(ws) == 1 and not upd.scales:
        w = ws[0]
    else:
        tmp = Container(namer("rows"), x.dtype, ws[0].ref.shape, "transient")
        containers[tmp.name] = tmp
        e = ws[0]
        for f in ws[1:] + list(upd.scales):
            e = op("multiply", e, f)
        out.append(Assign(Ref(tmp), e, False, a.loc))
        w = Read(Ref(tmp))
    u = _block_view(upd.u, v, r, vb, size, rows, written)
    roles = _roles(a.dst, None, r, written)
    dst = Ref(x, [rows if role == ("r", 0) else it for it, role in zip(a.dst.items, roles)])
    if [role for role in roles if role is not None][0][0] == "r":
        inputs, shape = [Read(Ref(u.container, u.items, (1, 0) if u.perm is None else None)), w], \
            (rows.size, upd.size)
    else:
        inputs, shape = [Read(Ref(w.ref.container, w.ref.items, (1, 0) if w.ref.perm is None else None)),
                         Read(u)], (upd.size, rows.size)
    t = Container(namer("rank"), x.dtype, shape, "transient")
    containers[t.name] = t
    return out + [Call("matmul", inputs, [t], None, a.loc), Assign(dst, Read(Ref(t)), True, a.loc)]


def strip_mine(loop, k, call, lo, hi, written, containers, namer):
    """The statements standing for ``loop`` cut into blocks (see the module), or None: with the
    product ``call`` at ``k`` in its body (None: a loop of row updates only) and the row updates
    (``_Update``) that block alike."""
    v = loop.var
    first = blocks = lead = None
    found = {kk: upd for kk, upd in ((kk, _update(s, v, lo, hi, written)) for kk, s in enumerate(loop.body))
             if upd is not None}
    if call is None and not found:
        return None
    size = _block_size(lo, hi, call.outputs[0].shape if call is not None else (next(iter(found.values())).size,))
    if call is not None:
        x, y = _side(call.inputs[0], v, lo, hi, written, "m"), _side(call.inputs[1], v, lo, hi, written, "n")
        if x is None or y is None or (x.shift is None) == (y.shift is None) or x.moves != y.moves:
            return None
        batched = x if x.shift is not None else y
        if sum(r in ("k", "m", "n") for r in batched.roles) != 1:
            return None                          # a batch of matrices: not one product
        first, blocks = _blocks(x, lo, hi, size)
        if (first, blocks) != _blocks(y, lo, hi, size) or blocks < 2 or \
                not _untouched(loop, (x, y), first, blocks, size):
            return None
        lead = x
    updates = {}
    for kk, upd in found.items():
        at = _blocks(upd, lo, hi, size)
        if at[1] < 2 or lead is not None and at != (first, blocks):
            continue
        if _updates_apart(loop, upd, *at, size, written):
            updates[kk] = upd
            if lead is None:
                lead = upd
                first, blocks = at
    if call is None and not updates:
        return None
    b = Container(namer("block"), I64, ())
    containers[b.name] = b
    vb = scalar(b)
    before, after, body = [], [], []
    for kk, s in enumerate(loop.body):
        if kk in updates:
            own = _own(updates[kk], scalar(v), vb, size)
            body.append(For(s.var, own.start, op("add", own.start, own.size), Const(1), s.body, False, s.loc))
            after += _shared_sum(updates[kk], v, vb, size, written, containers, namer)
        elif kk == k:
            product, own, add = _blocked_product(call, x, y, v, vb, size, containers, namer)
            before.append(product)
            body += [own, add]
        else:
            body.append(s)
    stop = first + blocks * size
    out = []
    if lead.moves == "stop" and first > lo:
        out.append(For(v, Const(lo), Const(first), Const(1), loop.body, False, loop.loc))
    out.append(For(b, Const(first), Const(stop), Const(size),
                   before + [For(v, vb, op("add", vb, Const(size)), Const(1), body, False, loop.loc)] + after,
                   False, loop.loc))
    if lead.moves == "start" and stop < hi:
        out.append(For(v, Const(stop), Const(hi), Const(1), loop.body, False, loop.loc))
    return out


def _blocked_product(call, x, y, v, vb, size, containers, namer):
    """A block's shared product of ``call`` (before its iterations), and what each iteration
    computes in its place: its own part of the product, plus its row of the shared one."""
    t = call.outputs[0]
    # The batch axis is the shared product's first: each iteration reads its row of it. Where
    # ``y`` is batched (a vector per iteration) and ``x`` a matrix, the product is taken
    # transposed, ``y_b.T @ x.T``, rather than read a column at a time (a strided read each
    # iteration, and a strided write in the adjoint).
    swap = y.shift is not None and len(t.shape) > 0
    reads = []
    for side in ((y, x) if swap else (x, y)):
        batch = Slice(op("add", vb, Const(side.shift)), Const(size), 1) if side.shift is not None else None
        items = side.items(batch, _shared(side, vb, size))
        if side.shift is not None:
            # the batch axis first, or last where ``y`` is batched and the product not swapped
            turn = (side.roles.index("b") > side.roles.index("k")) != (side is y and not swap)
            perm = (1, 0) if turn else side.ref.perm
        else:
            perm = side.ref.perm if not swap else None if side.ref.perm == (1, 0) else (1, 0)
        reads.append(Read(Ref(side.ref.container, items, perm)))
    first = x.shift is not None or swap
    shape = ((Const(size),) + tuple(t.shape)) if first else (tuple(t.shape) + (Const(size),))
    r = Container(namer(t.name), t.dtype, shape, "transient")
    containers[r.name] = r
    product = Call("matmul", reads, [r], call.attrs, call.loc)
    own = Call("matmul", [Read(Ref(side.ref.container, side.items(None, _own(side, scalar(v), vb, size)),
                                   side.ref.perm)) for side in (x, y)], [t], call.attrs, call.loc)
    row = Index(op("subtract", scalar(v), vb))
    whole = [Slice(Const(0), n, 1) for n in t.shape]
    add = Assign(Ref(t, whole), Read(Ref(r, [row] + whole if first else whole + [row])), True, call.loc)
    return product, own, add


__all__ = ["BLOCK", "SHORT_BLOCK", "strip_mine"]
