"""Gather late: a matrix product of gathered rows is computed as the gather of the product's rows.

Needs: a statement list and its containers, before the autodiff (so that the derivative program
is built from the cheaper form). Changes: ``t = gather(x, i)`` (rows ``i`` of a whole 2-D ``x``,
all columns) whose result is read only by a later ``m = matmul(t, b)`` of the same block, with
nothing in between writing ``x`` or ``i``, becomes ``p = matmul(x, b); m = gather(p, i)`` when
that moves less: ``len(i)`` rows against the ``x.shape[0]`` rows of ``x``. Row ``r`` of
``m`` is row ``i[r]`` of ``x`` times ``b`` either way, so the values are the same.

A message-passing layer's ``x[src] @ W`` (30000 edges over 3000 nodes) multiplies 3000 rows
instead of 30000, and its gradient follows: the weight gradient is ``x.T @ g_p`` over the nodes,
and the edge adjoints are summed into ``g_p`` before one product with ``W.T``, not after.
"""
from __future__ import annotations

from ..ir.core import Call, Container, Read, Ref, const_value, map_blocks, stmt_reads, stmt_writes, walk

_ALL = ("slice", None, None, None)


def gather_after_products(stmts, containers, namer):
    """``stmts`` with each row gather feeding only a matrix product moved after the product."""
    reads, writes = {}, {}
    for s in walk(stmts):
        for r in stmt_reads(s):
            reads[r.ref.container] = reads.get(r.ref.container, 0) + 1
        for w in stmt_writes(s):
            writes[w.container] = writes.get(w.container, 0) + 1

    def rebuild(block):
        block = [map_blocks(s, rebuild) for s in block]
        gone, swap = set(), {}
        for k, s in enumerate(block):
            rows = _row_gather(s)
            if rows is None or reads.get(s.outputs[0]) != 1 or writes.get(s.outputs[0]) != 1:
                continue
            t, x, index = rows
            for u in block[k + 1:]:
                if any(r.ref.container is t for v in walk([u]) for r in stmt_reads(v)):
                    moved = _moved(u, t, x, index, containers, namer)
                    if moved is not None:
                        gone.add(id(s))
                        swap[id(u)] = moved
                    break
                if any(w.container in (x.ref.container, index.ref.container)
                       for v in walk([u]) for w in stmt_writes(v)):
                    break
        out = []
        for s in block:
            if id(s) not in gone:
                out += swap.get(id(s), [s])
        return out

    return rebuild(list(stmts))


def _row_gather(s):
    """``(t, x, i)`` for ``t = gather(x, i)``: rows ``i`` of a whole 2-D ``x``, every column."""
    if not (isinstance(s, Call) and s.op == "gather" and len(s.outputs) == 1 and len(s.inputs) == 2):
        return None
    x, index = s.inputs
    t = s.outputs[0]
    if not (t.kind == "transient" and isinstance(x, Read) and x.ref.is_whole() and x.ref.container.ndim == 2
            and isinstance(index, Read) and index.ref.is_whole() and index.ref.container.ndim == 1
            and tuple(s.attrs["spec"]) == (("array",), _ALL)):
        return None
    return t, x, index


def _moved(u, t, x, index, containers, namer):
    """``[p = matmul(x, b), m = gather(p, i)]`` for ``u`` = ``m = matmul(t, b)``, when that moves less."""
    if not (isinstance(u, Call) and u.op == "matmul" and isinstance(u.inputs[0], Read)
            and u.inputs[0].ref.container is t and u.inputs[0].ref.is_whole()):
        return None
    b, m = u.inputs[1], u.outputs[0]
    if b.ref.container is t or len(b.shape) not in (1, 2):
        return None
    n, k = (const_value(d) for d in x.ref.container.shape)
    e = const_value(index.ref.container.shape[0])
    cols = const_value(b.shape[1]) if len(b.shape) == 2 else 1
    if None in (n, k, e, cols):
        return None
    # multiply-adds plus elements gathered, before and after
    if n * k * cols + e * cols >= e * k * cols + e * k:
        return None
    p = Container(namer("rows"), m.dtype, (n,) + tuple(b.shape[1:]), "transient")
    containers[p.name] = p
    spec = (("array",),) + (_ALL,) * (p.ndim - 1)
    return [Call("matmul", [x, b], [p], loc=u.loc),
            Call("gather", [Read(Ref(p)), index], [m], {"spec": spec}, loc=u.loc)]
