"""Arrays swept along their last axis are stored with that axis first.

Needs: a captured statement list, before the autodiff (so that the gradient program is built on
the new layout too); the native backend. Changes: an array ``x``, say of shape ``(I, J, K)``, of
three or more megabytes or swept inside two or more loops (a time loop around a column sweep,
Gram-Schmidt's triangular loops), that the program reads and writes only at one position of its
last axis at a time (``x[:, :, k]``, ``x[1:, :, k + 1]``, an element ``x[i, j, k]``), apart from filling it
whole with a constant (``np.zeros``) and reading it whole in a sum, maximum or minimum of all its
elements, is replaced by ``x_t`` of shape ``(K, I, J)``: each of those views is then one
contiguous block, ``x_t[k, :, :]``. A parameter is copied into its new layout once, at the start.

A loop over ``k`` (COSMO's vertical advection and horizontal diffusion, a column-by-column
sweep) otherwise walks ``x[:, :, k]`` one element per cache line: the line's other elements,
the next levels, are evicted before the next pass of the loop reads them when the arrays do not
fit in the cache, so the loop moves a cache line for every element it touches. In the cache
too, a strided view is not read in vector registers: swept again and again, a small array pays
its copy back (adi at 150 x 150, 180 kB: forward 0.7 against 1.5 ms, gradient 2.5 against 4.6;
gramschmidt's gradient 7.7 against 18.8). Swept once (a loop over the columns inside no other),
it may not: a 40 x 40 array's gradient took twice as long moved, a 1000 x 300 recurrence's 18%
longer. A full sum reads the new layout in its own order (the terms are added in another order,
as the compiled code's sums may be anyway).
"""
from __future__ import annotations

import numpy as np

from ..ir.core import (Assign, Call, Const, Container, For, Index, NewAxis, Op, Read, Ref, Slice, While,
                       broadcast_shapes, child_blocks, const_value, map_blocks, map_refs, stmt_reads, stmt_writes,
                       walk)

MIN_BYTES = 3 << 20           # below this the array's swept lines stay in the cache between passes
MIN_EXTENT = 8                # last axes shorter than a cache line of float64 waste less of each line
_ORDERLESS = frozenset(("sum", "max", "min"))


def permute_swept_arrays(stmts, containers, namer, outputs):
    """``stmts`` with the arrays swept along their last axis stored with it first (see the module)."""
    # in name order: a set of containers iterates in the order of their addresses, and the
    # generated source (the compiled-code cache's key) must not change from process to process
    chosen = sorted(_chosen(stmts, set(outputs)), key=lambda c: c.name)
    if not chosen:
        return stmts
    moved = {}
    for c in chosen:
        moved[c] = Container(namer(c.name + "_t"), c.dtype, (c.shape[-1],) + tuple(c.shape[:-1]))
        containers[moved[c].name] = moved[c]
    body = map_refs(_whole_uses(stmts, moved), lambda r: _moved_ref(r, moved[r.container]) if r.container in moved
                    else r)
    copies = [Assign(Ref(moved[c]), Read(Ref(c, perm=(c.ndim - 1, *range(c.ndim - 1)))))
              for c in chosen if c.kind == "arg"]
    return copies + body


def _last_item(ref):
    """The position in ``ref.items`` of the item for the container's last axis."""
    return max(k for k, it in enumerate(ref.items) if not isinstance(it, NewAxis))


def _swept(ref):
    return isinstance(ref.items[_last_item(ref)], Index) and ref.perm is None


def _orderless(s):
    return isinstance(s, Call) and s.op in _ORDERLESS and s.attrs.get("axis") is None


def _chosen(stmts, outputs):
    """The arrays to store with their last axis first: large, never an output, every access as
    the module says, and at least one of them a view along other axes at a position of the last
    the program computes (an element ``x[i, i]`` touches one cache line in either layout)."""
    ok, moving, groups = {}, set(), []
    repeated = _swept_in_nested_loops(stmts)

    def candidate(c):
        if c not in ok:
            shape = [const_value(d) for d in c.shape]
            ok[c] = (c.ndim >= 2 and c.kind in ("arg", "transient") and c not in outputs
                     and None not in shape and shape[-1] >= MIN_EXTENT
                     and (int(np.prod(shape)) * c.dtype.itemsize >= MIN_BYTES or c in repeated))
        return ok[c]

    def use(ref, allowed=False):
        c = ref.container
        if c.ndim >= 2 and candidate(c):
            if _swept(ref):
                if _moving(ref):
                    moving.add(c)       # a view along other axes, at a position the program computes
            elif not (allowed and ref.is_whole()):
                ok[c] = False

    for s in walk(stmts):
        if isinstance(s, Assign):
            use(s.dst, allowed=isinstance(s.expr, Const))
            for r in stmt_reads(s):
                if r.ref is not s.dst:
                    use(r.ref)
        elif isinstance(s, Call):
            for c in s.outputs:
                ok[c] = False
            whole = {r.ref.container for r in stmt_reads(s) if r.ref.is_whole() and r.ref.container.ndim >= 2}
            for r in stmt_reads(s):
                use(r.ref, allowed=_orderless(s))
            if _orderless(s) and whole:
                groups.append(whole)
        else:
            for r in stmt_reads(s):
                use(r.ref)
            for w in stmt_writes(s):
                if not child_blocks(s):
                    ok[w.container] = False
    chosen = {c for c in moving if ok.get(c)}
    changed = True
    while changed:              # a whole sum reads all of its operands in the new layout, or none
        changed = False
        for g in groups:
            if g & chosen and not (g <= chosen and len({tuple(map(const_value, c.shape)) for c in g}) == 1):
                chosen -= g
                changed = True
    return chosen


def _moving(ref):
    """Whether swept ``ref`` is a view along other axes at a position of the last axis that the
    program computes."""
    return const_value(ref.items[_last_item(ref)].at) is None and any(
        isinstance(it, Slice) and const_value(it.size) != 1 for it in ref.items)


def _swept_in_nested_loops(stmts, depth=0, found=None):
    """The arrays of at least two axes read or written inside two or more loops through a view
    along other axes at a computed position of the last (``_moving``): each of their columns is
    swept again and again."""
    found = set() if found is None else found
    for s in stmts:
        blocks = child_blocks(s)
        for b in blocks:
            _swept_in_nested_loops(b, depth + isinstance(s, (For, While)), found)
        if depth >= 2 and not blocks:
            for ref in list(stmt_writes(s)) + [r.ref for r in stmt_reads(s)]:
                if ref.container.ndim >= 2 and _swept(ref) and _moving(ref):
                    found.add(ref.container)
    return found


def _moved_ref(ref, new):
    """``ref`` (one position of the last axis) as a view of ``new``: that item first."""
    items = list(ref.items)
    last = items.pop(_last_item(ref))
    return Ref(new, [last] + items)


def _whole_uses(stmts, moved):
    """``stmts`` with the whole fills and whole sums of the moved arrays made on the new ones."""
    out = []
    for s in stmts:
        s = map_blocks(s, lambda b: _whole_uses(b, moved))
        if isinstance(s, Assign) and s.dst.container in moved and s.dst.is_whole():
            s = Assign(Ref(moved[s.dst.container]), s.expr, accumulate=s.accumulate, loc=s.loc)
        elif _orderless(s) and any(r.ref.container in moved for r in stmt_reads(s)):
            s = Call(s.op, [_on_moved(e, moved) for e in s.inputs], s.outputs, s.attrs, s.loc)
        out.append(s)
    return out


def _on_moved(e, moved):
    """Expression ``e`` (of a whole sum) reading the moved arrays whole in their new layout."""
    if isinstance(e, Read) and e.ref.container in moved and e.ref.is_whole():
        return Read(Ref(moved[e.ref.container]))
    if isinstance(e, Op):
        args = [_on_moved(a, moved) for a in e.args]
        return Op(e.name, args, e.dtype, broadcast_shapes(*(a.shape for a in args)))
    return e
