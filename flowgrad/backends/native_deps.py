"""What the native lowering asks of IR statements: the views a loop-nest member reads and writes
(assignments, pushes and pops alike), whether two statements may swap, whether two views of one
array meet within a nest, which pops may bind a vector to the tape, and which products become
BLAS sums into their destination."""
from __future__ import annotations

import math
from collections import Counter

from ..ir.core import (DISJOINT, F64, Assign, Call, NewAxis, Op, Pop, Push, Read, Slice, Take, apart, child_blocks,
                       const_value, iter_reads, reads_besides_sum, same_expr, same_ref, stmt_reads, stmt_writes,
                       view_offsets, walk)


def _view(s):
    """The view an element-wise statement of a loop nest runs over: what it writes or, for a push, reads."""
    return s.ref if isinstance(s, (Push, Pop)) else s.dst


def _element_parts(s):
    """``(destination or None, expression or None, accumulates)`` of an element-wise member of a
    loop nest: an assignment; a push, reading its view (its tape's elements are its own); or a
    pop, writing its view from the tape."""
    if isinstance(s, Push):
        return None, Read(s.ref), False
    if isinstance(s, Pop):
        return s.ref, None, False
    return s.dst, s.expr, s.accumulate


def _arrays(s, shape):
    """The arrays a member of a loop nest over ``shape`` reads or writes at every element of the
    nest, its tape included: not a vector or a row broadcast along an axis of the nest, nor a
    reduction's output, nor an array of a page or less (``_small``), which stay in cache while the
    nest streams the others."""
    refs = [r.ref for r in stmt_reads(s)] + ([] if isinstance(s, Call) else list(stmt_writes(s)))
    return {r.container for r in refs if r.container.ndim and _spans(r.shape, shape) and not _small(r.container)} | \
        ({s.tape} if isinstance(s, (Push, Pop)) else set())


def _small(c):
    """Whether all of array ``c`` takes a page (4 KiB) or less: the state vectors a loop's
    steps read and write whole (deriche's adjoint steps, eight rows of 400 or columns of 500
    elements beside the rows of its images) stay in cache from one step to the next."""
    sizes = [const_value(d) for d in c.shape]
    return None not in sizes and math.prod(sizes) * c.dtype.itemsize <= 4096


def _spans(view, shape):
    return len(view) == len(shape) and all(const_value(a) != 1 or const_value(b) == 1 for a, b in zip(view, shape))


def _reads(e):
    return iter_reads(e) if e is not None else ()


def _placed_reads(e):
    """``(read, placed)`` for every read in ``e``: ``placed`` when the element it loads is the one
    at the nest's position within its view, not where a gather (``Take``) sends it, whose
    source is read at positions taken from index arrays."""
    if isinstance(e, Take):
        yield Read(e.source), False
        for a in e.index:
            yield from _placed_reads(a)
    elif isinstance(e, Read):
        yield e, True
        for ie in e.ref.index_exprs():
            yield from ((r, True) for r in iter_reads(ie))
    elif isinstance(e, Op):
        for a in e.args:
            yield from _placed_reads(a)


def _reads_off(e, view):
    """Whether ``e`` reads the container of ``view`` at another element than the one a nest over
    ``view`` is at: through another view of it, or through a gather; not where the view it reads
    shares no element with ``view`` (``g_x[i]`` beside ``g_x[0:i]``)."""
    return any(r.ref.container is view.container and not (placed and same_ref(r.ref, view)) and
               not apart(r.ref, view) for r, placed in _placed_reads(e))


def _tape_views(body):
    """The vectors whose pops can bind them to the popped part of the tape instead of copying it
    there: each pop restores the whole vector (of the tape's dtype, a length fixed when the
    function is built), and nothing writes the vector but its pops, nor pushes onto its tape,
    from the top-level statement holding the tape's first pop on. The popped memory then stays
    as it was while the vector is read: deriche's adjoint reads four state vectors per step
    where they lie on the tape (measured 12.8 -> 9.7 ms). Not matrices: vadv's adjoint, reading
    two 128 x 128 planes bound this way, ran 1.6x slower (cause not found)."""
    first_pop, pops = {}, {}
    for k, top in enumerate(body):
        for s in walk([top]):
            if isinstance(s, Pop):
                first_pop.setdefault(s.tape, k)
                pops.setdefault(s.ref.container, set()).add((s.tape, s.ref.is_whole()))
    views = set()
    for c, found in pops.items():
        if len(found) != 1:
            continue
        [(tape, whole)] = found
        if not (whole and c.kind == "transient" and c.ndim == 1 and c.dtype == tape.dtype
                and all(const_value(d) is not None for d in c.shape)):
            continue
        after = [s for top in body[first_pop[tape]:] for s in walk([top])]
        if not any(isinstance(s, Push) and s.tape is tape or not isinstance(s, Pop) and
                   any(w.container is c for w in stmt_writes(s)) for s in after):
            views.add(c)
    return views


def _renamed(forward, backward, returned):
    """The vectors whose pushes can bind them to fresh memory on the tape instead of copying
    their values there, each with its tape: the old memory then keeps the old values, and a pop
    binds the vector back to it, the part of the tape below the top (its memory before the first
    push is the tape's first part). Each push of its tape saves the whole vector, of a fixed
    length, before a write of all of it that reads none of it (``den = a * x[:, j - 1] + b`` in
    a loop); every push is in the forward sweep and every pop in the backward one (no
    checkpointed loop replays pushes there), and the vector is not handed to the caller.
    deriche's gradient, fourteen such vectors, measured 8.45 -> 8.05 ms. Not matrices: vadv's
    gradient, with its seventeen 128 x 128 planes bound this way, ran 2x slower, a third of
    its time then in Numba's reference counting (``NRT_incref``, ``NRT_decref``) called from
    its loops; with ten of them it ran as fast as before."""
    pushes, pops, mixed = {}, {}, set()
    for sweep, own, other in ((forward, pushes, Pop), (backward, pops, Push)):
        for s in walk(sweep):
            if isinstance(s, other):
                mixed.add(s.tape)
            elif isinstance(s, (Push, Pop)):
                own.setdefault(s.tape, []).append(s)
    out = {}
    for tape, saves in pushes.items():
        c = saves[0].ref.container
        if tape in mixed or tape not in pops or c in returned or c.ndim != 1 or c.dtype != tape.dtype or \
                any(const_value(d) is None for d in c.shape) or \
                not all(s.ref.container is c and s.ref.is_whole() and not s.copy for s in saves) or \
                not all(s.ref.container is c and s.ref.is_whole() for s in pops[tape]):
            continue
        out[c] = tape
    for block in [forward] + [b for s in walk(forward) for b in child_blocks(s)]:
        for k, s in enumerate(block):
            if isinstance(s, Push) and out.get(s.ref.container) is s.tape and \
                    not _overwritten(block[k + 1:], s.ref.container):
                del out[s.ref.container]
    return out


def _overwritten(stmts, c):
    """Whether the first of ``stmts`` to touch container ``c`` writes all of it reading none of it."""
    for s in stmts:
        if any(r.ref.container is c for t in walk([s]) for r in stmt_reads(t)) or \
                any(w.container is c for t in walk([s]) for w in stmt_writes(t)):
            return isinstance(s, Assign) and s.dst.container is c and s.dst.is_whole() and not s.accumulate \
                and not any(r.ref.container is c for r in iter_reads(s.expr))
    return False


def _product_sums(body):
    """The products of ``body`` read only by sums into float64 matrices right after them
    (``t = matmul_tn_flat(a, g); w += t``, ``t = matmul(a, b); w[:, lo:hi] += t``), by ``id``: a
    ``matmul_tn_flat``, or a ``matmul`` of two matrices, whose sum's destination has contiguous
    rows and is not one of its operands."""
    reads = Counter(r.ref.container for s in walk(body) for r in stmt_reads(s))
    found = {}
    for block in [body] + [b for s in walk(body) for b in child_blocks(s)]:
        for s, t in zip(block, block[1:]):
            if not (isinstance(s, Call) and isinstance(t, Assign) and t.accumulate and isinstance(t.expr, Read)
                    and (s.op == "matmul_tn_flat" or s.op == "matmul" and all(len(e.shape) == 2 for e in s.inputs))):
                continue
            product, w = s.outputs[0], t.dst.container
            if t.expr.ref.container is product and t.expr.ref.is_whole() and _rows_contiguous(t.dst) \
                    and w.dtype == product.dtype == F64 and all(e.dtype == F64 for e in s.inputs) \
                    and not any(r.ref.container is w for e in s.inputs for r in iter_reads(e)):
                found.setdefault(product, []).append(id(s))
    return {k for product, calls in found.items() if len(calls) == reads[product] for k in calls}


def _rows_contiguous(r):
    """Whether view ``r`` is a matrix whose rows are contiguous (BLAS writes it with its row stride):
    two slices, the second one along the container's last axis with step 1."""
    slices = [k for k, it in enumerate(r.items) if isinstance(it, Slice)]
    return (r.perm is None and len(r.items) == r.container.ndim and len(slices) == 2
            and slices[1] == r.container.ndim - 1 and const_value(r.items[-1].step) == 1
            and (const_value(r.items[slices[0]].step) or 0) >= 1)     # not reversed rows (Z[::-1, :])


def _reads_ahead(w, r):
    """Whether view ``r`` of the container that view ``w`` writes holds, at each position of the
    nest over ``w``, an element the nest writes at that position or later, or never."""
    offsets = view_offsets(w, r)
    if offsets is DISJOINT:
        return True
    if offsets is None or any(const_value(w.items[p].step) != 1 for p in offsets):
        return False
    distance = tuple(offsets[p] for p in sorted(offsets))
    return distance >= (0,) * len(distance)


def _one_further(a, b):
    """Whether view ``b`` is view ``a`` of the same container one element further along their
    last axis (``g[1:n + 1]`` against ``g[0:n]``), every other index the same."""
    if a.container is not b.container or any(isinstance(it, NewAxis) for it in a.items + b.items):
        return False
    offsets = view_offsets(a, b)
    if not isinstance(offsets, dict) or not offsets:
        return False
    last = max(offsets)
    return offsets[last] == 1 and const_value(a.items[last].step) == 1 and \
        not any(d for p, d in offsets.items() if p != last)


def _read_further(e, w):
    """Whether ``e`` reads the container of view ``w`` one element further along the last axis
    (``_one_further``), and otherwise only at ``w``'s element, both in place."""
    reads = [(r, placed) for r, placed in _placed_reads(e) if r.ref.container is w.container]
    return any(placed and _one_further(w, r.ref) for r, placed in reads) and \
        all(placed and (same_ref(r.ref, w) or _one_further(w, r.ref)) for r, placed in reads)


def _apart_in_inner_loop(a, b):
    """Whether views ``a`` and ``b`` of one container never share an element within one run of
    the innermost loop of a nest over their (equal) shape: they differ by a constant offset that
    is zero along the innermost axis or nonzero along an outer one (or they never overlap)."""
    offsets = view_offsets(a, b)
    if offsets is DISJOINT:
        return True
    if offsets is None:
        return False
    distance = [offsets[p] for p in sorted(offsets)]
    return not distance or distance[-1] == 0 or any(distance[:-1])


def _conflict(a, b):
    """Whether statements ``a`` and ``b`` may not swap: one writes what the other reads or writes.
    Two sums into one container swap when neither reads it otherwise (``g[i, k] += s`` and
    ``g[:, k] += v``, an adjoint's scalar and vector parts): only the order of the additions
    changes, as it does where the functions reassociate."""
    if isinstance(a, (Push, Pop)) and isinstance(b, (Push, Pop)) and a.tape is b.tape:
        return True
    wa = {w.container for w in stmt_writes(a)}
    wb = {w.container for w in stmt_writes(b)}
    ra = {r.ref.container for r in reads_besides_sum(a)}
    rb = {r.ref.container for r in reads_besides_sum(b)}
    if wa & wb and not all(isinstance(s, Assign) and s.accumulate for s in (a, b)):
        return True
    return bool(wa & rb or ra & wb)


def _much_smaller(view, space):
    """Whether a nest over ``view`` runs a small part of the elements of one over ``space``: a
    quarter or less of them where both sizes are known, else fewer axes of more than one
    element, each one of ``space``'s."""
    sizes = [const_value(d) for d in view], [const_value(d) for d in space]
    if None not in sizes[0] and None not in sizes[1]:
        return 4 * math.prod(sizes[0]) <= math.prod(sizes[1])
    rest = list(space)
    for d in view:
        if const_value(d) == 1:
            continue
        k = next((k for k, e in enumerate(rest) if same_expr(d, e)), None)
        if k is None:
            return False
        del rest[k]
    return any(const_value(d) != 1 for d in rest)
