"""Treat the maximum that a stable softmax or log-sum-exp subtracts as the constant it is.

Needs: a captured statement list, before the autodiff. Changes: ``m = max(x, axis)`` becomes
``m = max_const(x, axis)`` (same values, zero derivative) where the result cannot depend on ``m``:
every use of ``m`` (or of a copy ``mx = m``) is a shift ``e = exp(y - m)``, and every use of such
an ``e`` is a sum over some of ``m``'s axes (``s = sum(e, axis)``), a ratio ``e / s`` of a shifted
value and a sum of one, or ``m + log(s)``. Raising ``m`` by ``d`` scales every ``e`` and ``s`` by
``exp(-d)`` (``d`` is constant along the summed axes), which the ratio cancels and ``m + log(s)``
adds back: the program's value is the same function of ``x`` for every ``m``, so the derivative
with respect to ``m`` is exactly zero, at every order.

The gradient then skips the maximum's adjoint (which positions attain it, how many, a share for
each: three passes over ``x`` that add up to zero up to rounding), and the softmax's backward is
its usual two passes. The definitions and their uses must lie in one block, each written once, the
definitions before the uses (so no use mixes two iterations' values).
"""
from __future__ import annotations

from ..ir.core import Assign, Call, Op, Read, child_blocks, iter_reads, map_blocks, stmt_reads, stmt_writes, walk


def constant_shifts(stmts):
    """``stmts`` with the maxima of stable softmaxes and log-sum-exps taken as constants (see the
    module)."""
    writes, reads = {}, {}
    for s in walk(stmts):
        for w in stmt_writes(s):
            writes[w.container] = writes.get(w.container, 0) + 1
        for r in stmt_reads(s):
            reads[r.ref.container] = reads.get(r.ref.container, 0) + 1
    found = set()
    _visit(stmts, (writes, reads), found)
    return _rewrite(stmts, found) if found else stmts


def _visit(block, counts, found):
    for k, s in enumerate(block):
        if isinstance(s, Call) and s.op == "max" and _cancels(block, k, *counts):
            found.add(id(s))
        for body in child_blocks(s):
            _visit(body, counts, found)


def _axes(call, ndim):
    axis = call.attrs.get("axis")
    if axis is None:
        return frozenset(range(ndim))
    return frozenset(a % ndim for a in (axis if isinstance(axis, tuple) else (axis,)))


def _cancels(block, k, writes, reads):
    """Whether the maximum ``block[k]`` makes is only a shift its uses cancel (``writes`` and
    ``reads``: how often the program writes and reads each container)."""
    call = block[k]
    m = call.outputs[0]
    x = call.inputs[0]
    if writes.get(m) != 1:
        return False
    axes, keep = _axes(call, len(x.shape)), call.attrs.get("keepdims", False)
    shift = {m}               # the maximum and its copies
    scaled = set()            # e = exp(y - m): scaled by exp(-d) when m rises by d
    logged = set()            # s = sum(e) over all of m's axes, shaped as m: m + log(s) cancels
    divisors = set()          # s = sum(e) lined up with the values it divides: e / s cancels
    seen = {m}                # everything the proof tracks: each defined once, here, before its uses
    uses = []                 # statements reading what is tracked
    for s in block[k + 1:]:
        reading = [r for r in stmt_reads(s) if r.ref.container in seen]
        if any(r.ref.container in seen for b in child_blocks(s) for t in walk(b) for r in stmt_reads(t)):
            return False      # read in a nested block: its order against the definitions is unclear
        if not reading:
            continue
        if isinstance(s, Assign) and not s.accumulate and s.dst.is_whole() and writes.get(s.dst.container) == 1:
            c, e = s.dst.container, s.expr
            if isinstance(e, Read) and e.ref.container in shift and e.ref.is_whole():
                shift.add(c)
                seen.add(c)
                continue
            if _is_shift(e, shift):
                scaled.add(c)
                seen.add(c)
                continue
        if isinstance(s, Call) and s.op == "sum" and writes.get(s.outputs[0]) == 1 and \
                (_whole_of(s.inputs[0], scaled) or _is_shift(s.inputs[0], shift)) and \
                _axes(s, len(s.inputs[0].shape)) <= axes:
            c = s.outputs[0]
            seen.add(c)
            if _axes(s, len(s.inputs[0].shape)) == axes and s.attrs.get("keepdims", False) == keep:
                logged.add(c)
            if s.attrs.get("keepdims", False) or not m.shape:
                divisors.add(c)
            continue
        uses.append(s)
    local = {}
    for s in block[k + 1:]:
        for r in stmt_reads(s):
            local[r.ref.container] = local.get(r.ref.container, 0) + 1
    if any(local.get(c, 0) != reads.get(c, 0) for c in seen):
        return False          # read elsewhere: before its definition in a loop, or after the block
    # what is left must read the tracked values only through ratios and log-sum-exps
    for s in uses:
        exprs = [s.expr] if isinstance(s, Assign) else list(s.inputs) if isinstance(s, Call) else None
        if exprs is None or (isinstance(s, Assign) and any(r.ref.container in seen for ie in s.dst.index_exprs()
                                                           for r in iter_reads(ie))):
            return False
        if isinstance(s, Assign) and s.accumulate and s.dst.container in seen:
            return False
        if not all(_invariant(e, seen, shift, scaled, logged, divisors) for e in exprs):
            return False
    return True


def _whole_of(e, cs):
    return isinstance(e, Read) and e.ref.container in cs and e.ref.is_whole()


def _is_shift(e, shift):
    """``exp(y - m)`` with ``y`` not reading the shift."""
    if not (isinstance(e, Op) and e.name == "exp" and isinstance(e.args[0], Op) and e.args[0].name == "subtract"):
        return False
    y, m = e.args[0].args
    return _whole_of(m, shift) and not any(r.ref.container in shift for r in iter_reads(y))


def _invariant(e, tracked, shift, scaled, logged, divisors):
    """Whether expression ``e`` reads the ``tracked`` values only as ``e / s`` and ``m + log(s)``."""
    if not any(r.ref.container in tracked for r in iter_reads(e)):
        return True
    if isinstance(e, Op) and e.name == "divide" and (_whole_of(e.args[0], scaled) or _is_shift(e.args[0], shift)) and \
            _whole_of(e.args[1], divisors):
        return True
    if isinstance(e, Op) and e.name == "add":
        for a, b in (e.args, e.args[::-1]):
            if _whole_of(a, shift) and isinstance(b, Op) and b.name == "log" and _whole_of(b.args[0], logged):
                return True
    if isinstance(e, Op):
        return all(_invariant(a, tracked, shift, scaled, logged, divisors) for a in e.args)
    return False


def _rewrite(stmts, found):
    out = []
    for s in stmts:
        if id(s) in found:
            s = Call("max_const", s.inputs, s.outputs, s.attrs, s.loc)
        elif child_blocks(s):
            s = map_blocks(s, lambda b: _rewrite(b, found))
        out.append(s)
    return out


__all__ = ["constant_shifts"]
