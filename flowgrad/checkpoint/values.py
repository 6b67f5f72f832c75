"""Store or recompute, per value: a forward array the backward sweep reads is either kept alive
from its definition to its last backward use, or let go after its last forward use and
evaluated again, from the same inputs, just before the backward sweep first reads it.

``candidates`` lists the values that can be (defined once, whole, by a top-level statement whose
inputs nothing writes afterwards); the planner (``plan``) decides; ``recompute`` rewrites a
compiled gradient program for its decision.
"""
from __future__ import annotations

from ..ir.core import Assign, Call, Container, rename, stmt_containers, stmt_reads, stmt_writes, walk

# smaller values are not worth a decision
MIN_BYTES = 64 * 1024


def candidates(gp, size, flops, depth=4):
    """``(key, container, chain, FLOPs to evaluate it again)`` for each value the backward sweep
    reads that could be recomputed there; ``chain``: the indices in ``gp.forward`` of the
    definitions to run again, in order (the value's own last): with it, those of what it reads
    that the backward sweep does not read from there on (and so lets go), up to ``depth``."""
    fwd, bwd = gp.forward, gp.backward
    writers = {}
    for t in walk(fwd + bwd):
        for w in stmt_writes(t):
            writers[w.container] = writers.get(w.container, 0) + 1
    read_back = {r.ref.container for t in walk(bwd) for r in stmt_reads(t)}
    defs = {}
    for di, s in enumerate(fwd):
        c = _defined(s)
        if c is not None and c.kind == "transient" and c.ndim and writers.get(c) == 1:
            inputs = {r.ref.container for r in stmt_reads(s)} - {c}
            if not inputs & {w.container for t in walk(fwd[di + 1:] + bwd) for w in stmt_writes(t)}:
                defs[c] = (di, inputs)
    out = []
    for c in defs:
        nbytes = size(c)
        if c not in read_back or nbytes is None or nbytes < MIN_BYTES:
            continue
        at = next(k for k, s in enumerate(bwd) if any(c in stmt_containers(t) for t in walk([s])))
        later = {x for s in bwd[at:] for t in walk([s]) for x in stmt_containers(t)}
        chain = _chain(c, defs, later, depth)
        if chain is not None:
            out.append((c.name, c, chain, sum(flops(fwd[k]) for k in chain)))
    return out


def _defined(s):
    """The array a top-level statement defines whole (and nothing else), else None."""
    from ..autodiff.rules import CALLS
    if isinstance(s, Assign) and not s.accumulate and s.dst.is_whole():
        c = s.dst.container
    elif isinstance(s, Call) and len(s.outputs) == 1 and not CALLS[s.op].inplace and not CALLS[s.op].exempt:
        c = s.outputs[0]
    else:
        return None
    try:
        rename([s], {})
    except ValueError:                 # a call holding statements (a fixed point): not evaluated again
        return None
    return c


def _chain(c, defs, later, depth):
    """The definitions to run again for ``c``, or None: each transient input the backward sweep
    does not read from there on must be recomputable itself."""
    di, inputs = defs[c]
    chain = []
    for x in sorted(inputs, key=lambda x: x.name):
        if x.kind == "transient" and x.ndim and x not in later:
            if x not in defs or depth == 0:
                return None
            sub = _chain(x, defs, later, depth - 1)
            if sub is None:
                return None
            chain += [k for k in sub if k not in chain]
    return sorted(chain) + [di]


def recompute(gp, names, namer):
    """Rewrite ``gp`` (after its passes) so that each value in ``names`` is evaluated again, into
    containers of its own, just before the backward sweep first uses it (with what it needs that
    was let go: ``candidates``' chain): the forward's arrays then go after their last forward use.
    A name the program does not have (or no longer can recompute) is left as it is."""
    found = {key: chain for key, _, chain, _ in candidates(gp, lambda c: MIN_BYTES, lambda s: 0)}
    first = {}
    for name in names:
        c = gp.containers.get(name)
        at = next((k for k, s in enumerate(gp.backward) if any(c in stmt_containers(t) for t in walk([s]))), None)
        if name in found and at is not None:
            first[name] = (at, c)
    # the latest first: a value evaluated again earlier then renames what a later one reads of it
    for name, (at, c) in sorted(first.items(), key=lambda item: -item[1][0]):
        stmts = [gp.forward[k] for k in found[name]]
        fresh = {}
        for s in stmts:
            x = _defined(s)
            fresh[x] = Container(namer(x.name + "_again"), x.dtype, x.shape, "transient")
            gp.containers[fresh[x].name] = fresh[x]
        gp.backward = gp.backward[:at] + rename(stmts, fresh) + rename(gp.backward[at:], {c: fresh[c]})


__all__ = ["candidates", "recompute", "MIN_BYTES"]
