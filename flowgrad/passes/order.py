"""Run a reversed loop forwards when the order of its iterations does not matter.

Needs: the backward sweep of a gradient. Changes: a loop ``for v in reversed(range(...))`` becomes
``for v in range(...)`` when its iterations are independent but for sums, that is when each
container the body writes is

- written only in part ``v`` of one axis, and read there only (``g_B[k, :] += ...``, ``g_A[i, k]``):
  iterations touch disjoint parts;
- only summed into, and read by nothing else in the body (``g_alpha += s``): the sums commute, as
  they do where the compiled functions reassociate; or
- written whole at the top of the body before anything in it reads it, read nowhere outside the
  loop, and not a result (``gsum = ...``): a value private to one iteration;

and the body neither pushes nor pops a tape (whose entries come back in reverse order).

Why: the reversed loop walks the rows it touches from the last to the first. A loop nest whose
rows are in L2 ran 2.5-3x slower that way than in ascending order in a measurement of gemm's
adjoint (``g_B[k, :] += g_C[i, :] * a``, ``s = g_C[i, :] @ B[k, :]`` over ``k``): the hardware
prefetchers follow ascending addresses.
"""
from __future__ import annotations

from collections import Counter

from ..ir.core import (Assign, Call, Const, For, Index, NewAxis, Op, Pop, Push, Read, While, map_blocks,
                       reads_besides_sum, same_expr, stmt_reads, stmt_writes, walk)


def forward_independent_loops(stmts, results):
    """``stmts`` with its reversed loops whose iterations commute run forwards (see the module);
    ``results``: the containers handed to the caller."""
    reads = Counter(r.ref.container for s in walk(stmts) for r in stmt_reads(s))
    for c in results:
        reads[c] += 1                     # read after the program
    return _block(stmts, reads)


def _block(stmts, reads):
    out = []
    for s in stmts:
        s = map_blocks(s, lambda b: _block(b, reads))
        if isinstance(s, For) and s.reverse and _independent(s, reads):
            s = For(s.var, s.start, s.stop, s.step, s.body, False, s.loc)
        out.append(s)
    return out


def _independent(loop, reads):
    body = list(walk(loop.body))
    if any(isinstance(s, (Push, Pop, While)) for s in body):
        return False
    written = {w.container for s in body for w in stmt_writes(s)}
    inside = Counter(r.ref.container for s in walk([loop]) for r in stmt_reads(s))
    if loop.var in written or reads[loop.var] != inside[loop.var]:
        return False                      # the value it is left with changes
    private = _private(loop.body)
    for c in written:
        if c in private and reads[c] == inside[c]:
            continue
        if not (_summed_only(c, body) or _own_part(c, body, loop.var)):
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


def _own_part(c, body, var):
    """Every access of ``c`` indexes one axis at the same position, ``var`` plus a constant."""
    refs = [w for s in body for w in stmt_writes(s) if w.container is c] + \
           [r.ref for s in body for r in stmt_reads(s) if r.ref.container is c]
    axis = at = None
    for ref in refs:
        if ref.perm is not None or any(isinstance(it, NewAxis) for it in ref.items):
            return False
        if at is None:
            axis = next((k for k, it in enumerate(ref.items) if isinstance(it, Index) and _shifted(it.at, var)),
                        None)
            if axis is None:
                return False
            at = ref.items[axis].at
        elif not (len(ref.items) > axis and isinstance(ref.items[axis], Index) and same_expr(ref.items[axis].at, at)):
            return False
    return True


def _shifted(e, var):
    """Whether ``e`` is ``var``, ``var + k`` or ``var - k`` for a constant ``k``."""
    if isinstance(e, Read):
        return e.ref.container is var
    return isinstance(e, Op) and e.name in ("add", "subtract") and len(e.args) == 2 and \
        _shifted(e.args[0], var) and isinstance(e.args[1], Const)


__all__ = ["forward_independent_loops"]
