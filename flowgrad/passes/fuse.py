"""Fuse single-use temporaries into the statement that uses them.

Needs: a captured forward program. Changes: an array ``T = e`` written once (whole, not
accumulated) and read exactly once, as a whole, by a later statement ``U`` of the same block is
removed and ``e`` is substituted into ``U`` — provided nothing between them writes what ``e``
reads, and ``U`` visits each element of ``T`` once (an elementwise assignment of T's shape, or
a reduction, or the values of a scatter-add). NumPy would materialise ``T``; the native backend
then evaluates ``e`` inside ``U``'s loop nest instead, so one array and one pass over memory
disappear. When a statement between them writes what ``e`` reads (an adjoint's ``g_s = 0``
after ``T = g_s * a``) and touches nothing else ``U`` reads or writes, ``U`` moves up to ``T``'s place.

Runs on the captured forward program, and on the backward sweep after dead-code removal.
"""
from __future__ import annotations

from ..ir.core import (Assign, Call, Container, Op, Read, Ref, is_cheap, iter_reads, map_blocks, op, same_expr,
                       stmt_reads, stmt_writes, walk)

_ELEMENT_ONCE = {"sum", "prod", "max", "min", "sum_to", "add_at"}


def fuse_temporaries(body, protected=(), kept_ops=frozenset()):
    """Return a new body with single-use temporaries inlined (``protected`` containers are kept,
    and so are the results of the operations in ``kept_ops``: a function whose derivative is
    its own value, ``tanh`` or ``exp``, keeps that value for a gradient's backward to read)."""
    reads, readers, writes = {}, {}, {}
    for s in walk(body):
        for r in stmt_reads(s):
            reads[r.ref.container] = reads.get(r.ref.container, 0) + 1
        for c in {r.ref.container for r in stmt_reads(s)}:
            readers[c] = readers.get(c, 0) + 1
        for w in stmt_writes(s):
            writes[w.container] = writes.get(w.container, 0) + 1
    protected = set(protected)

    def candidate(s):
        if not (isinstance(s, Assign) and not s.accumulate and s.dst.is_whole()):
            return None
        c = s.dst.container
        if c.kind != "transient" or c.ndim == 0 or c in protected:
            return None
        if writes.get(c) != 1 or readers.get(c) != 1 or (reads.get(c) != 1 and not is_cheap(s.expr)):
            return None
        if any(r.ref.container is c for r in iter_reads(s.expr)):
            return None
        return c

    def kept(s, user):
        """A value of ``kept_ops`` read by anything but a whole copy would not be kept."""
        return isinstance(s.expr, Op) and s.expr.name in kept_ops and not (
            isinstance(user, Assign) and not user.accumulate and isinstance(user.expr, Read)
            and user.expr.ref.is_whole() and user.expr.ref.container is s.dst.container)

    def block(stmts):
        out = [map_blocks(s, block) for s in stmts]
        k = 0
        while k < len(out):
            c = candidate(out[k])
            if c is None:
                k += 1
                continue
            deps = {r.ref.container for r in iter_reads(out[k].expr)}
            use, moved = None, False
            for j in range(k + 1, len(out)):
                t = out[j]
                if any(r.ref.container is c for u in walk([t]) for r in stmt_reads(u)):
                    use = j
                    break
                if any(w.container in deps for u in walk([t]) for w in stmt_writes(u)):
                    moved = True
            fused = None if use is None or kept(out[k], out[use]) else _substitute(out[use], c, out[k].expr)
            if fused is None or moved and not all(_passes(out[use], c, out[j]) for j in range(k + 1, use)):
                k += 1
                continue
            if moved:
                # what lies between changes what ``e`` reads but not what the user touches: the
                # user runs where ``T`` was computed (an adjoint's ``g_s = 0`` after ``T = g_s * a``)
                out[k] = fused
                del out[use]
            else:
                out[use] = fused
                del out[k]
        return out

    return block(body)


def _passes(u, c, t):
    """Whether user ``u`` may run before statement ``t`` once it computes ``c``'s value itself:
    ``t`` writes nothing else ``u`` reads and touches nothing ``u`` writes."""
    u_reads = {r.ref.container for v in walk([u]) for r in stmt_reads(v)} - {c}
    u_writes = {w.container for v in walk([u]) for w in stmt_writes(v)}
    t_reads = {r.ref.container for v in walk([t]) for r in stmt_reads(v)}
    t_writes = {w.container for v in walk([t]) for w in stmt_writes(v)}
    return not (t_writes & (u_reads | u_writes) or t_reads & u_writes)


def _substitute(u, c, e):
    """``u`` with its single whole read of ``c`` replaced by ``e``, or None if not element-once."""
    if isinstance(u, Assign):
        if not (len(u.dst.shape) == len(c.shape) and all(same_expr(a, b) for a, b in zip(u.dst.shape, c.shape))):
            return None
        if any(r.ref.container is c for ie in u.dst.index_exprs() for r in iter_reads(ie)):
            return None
        new = replace_reads(u.expr, c, e)
        return None if new is None else Assign(u.dst, new, u.accumulate, u.loc)
    if isinstance(u, Call) and u.op in _ELEMENT_ONCE and len(e.shape) == len(c.shape) and \
            all(same_expr(a, b) for a, b in zip(e.shape, c.shape)) and \
            not any(r.ref.container in u.outputs for r in iter_reads(e)):
        # (``np.add.at(x, i, sin(x[:2]))``: ``e`` evaluated inside the call would read what the
        # call has already written; its temporary keeps the values from before)
        inputs = [replace_reads(x, c, e) for x in u.inputs]
        if any(x is None for x in inputs):
            return None
        return Call(u.op, inputs, u.outputs, u.attrs, u.loc)
    return None


def replace_reads(x, c, e):
    """Expression ``x`` with its whole reads of ``c`` replaced by ``e``; None where ``x`` reads
    ``c`` otherwise (part of it, or in an index)."""
    if isinstance(x, Read):
        if x.ref.container is c:
            return e if x.ref.is_whole() else None
        if any(r.ref.container is c for ie in x.ref.index_exprs() for r in iter_reads(ie)):
            return None
        return x
    if isinstance(x, Op):
        args = [replace_reads(a, c, e) for a in x.args]
        if any(a is None for a in args):
            return None
        return op(x.name, *args)
    return x


def split_kept(body, kept_ops, containers, namer):
    """``body`` with each operation of ``kept_ops`` inside a larger expression computed into a
    transient of its own just before its reader: ``k = tanh(W @ y) - c * y`` becomes
    ``t = tanh(W @ y); k = t - c * y``. A gradient's backward then reads ``t`` where it would
    evaluate ``tanh`` again, as it does when the program names that value itself; the native
    forward evaluates such a vector-math operation into an array of its own either way."""
    def split(e, out, loc, whole=False):
        """``e`` with its ``kept_ops`` operations read from statements added to ``out``; with
        ``whole``, ``e`` is a statement's whole value, which stays that statement's own."""
        if not isinstance(e, Op):
            return e
        args = [split(a, out, loc) for a in e.args]
        e = e if all(a is b for a, b in zip(args, e.args)) else op(e.name, *args)
        if e.name not in kept_ops or whole:
            return e
        t = Container(namer(e.name), e.dtype, e.shape, "transient")
        containers[t.name] = t
        out.append(Assign(Ref(t), e, loc=loc))
        return Read(Ref(t))

    def block(stmts):
        out = []
        for s in stmts:
            s = map_blocks(s, block)
            if isinstance(s, Assign):
                expr = split(s.expr, out, s.loc, whole=not s.accumulate)
                s = s if expr is s.expr else Assign(s.dst, expr, s.accumulate, s.loc)
            elif isinstance(s, Call):
                inputs = [split(x, out, s.loc) for x in s.inputs]
                if any(a is not b for a, b in zip(inputs, s.inputs)):
                    s = Call(s.op, inputs, s.outputs, s.attrs, s.loc)
            out.append(s)
        return out

    return block(body)
