"""Remove statements whose results nothing reads.

Needs: a statement list and the containers that must hold their values after it (the result, the
gradients). Changes: an ``Assign`` or ``Call`` is removed when no statement that can run after it
reads anything it writes: a value the program computes but never uses (a loss term built twice by
a frontend), an adjoint cleared after its last read. Inside a loop, what the next iteration reads
before writing it in full counts as read after each of its statements (a fixed point over the
body), so a buffer the body clears for nothing is found too. Loops, branches, tape pushes and
pops, and the run-time checks (``EFFECTS``) are kept; an ``Assign`` of a whole container ends the liveness of the value
it overwrites.
"""
from __future__ import annotations

from ..ir.core import Assign, Call, For, If, While, stmt_reads, stmt_writes, walk


EFFECTS = frozenset({"check_sizes", "check_index"})      # Calls kept for what they do, not what they write


def eliminate_dead(stmts, live_out):
    """``(kept statements, containers live before them)`` given those live after them."""
    live = set(live_out)
    out = []
    for s in reversed(stmts):
        if isinstance(s, (Assign, Call)):
            if not {w.container for w in stmt_writes(s)} & live and not (isinstance(s, Call) and s.op in EFFECTS):
                continue
            if isinstance(s, Assign) and not s.accumulate and s.dst.is_whole():
                live.discard(s.dst.container)
            live |= _reads([s])
            out.append(s)
        elif isinstance(s, (For, While)):
            # live at the end of an iteration: live after the loop, read by the loop's condition,
            # or read by the next iteration before it writes it
            inside = live | _reads_own(s)
            while True:
                body, live_in = eliminate_dead(s.body, inside)
                if live_in <= inside:
                    break
                inside |= live_in
            if isinstance(s, For):
                s = For(s.var, s.start, s.stop, s.step, body, s.reverse, s.loc)
            else:
                s = While(s.cond, body, s.loc)
            live |= _reads_own(s) | inside
            out.append(s)
        elif isinstance(s, If):
            then, live_then = eliminate_dead(s.then, live)
            orelse, live_else = eliminate_dead(s.orelse, live)
            s = If(s.cond, then, orelse, s.loc)
            live = live_then | live_else | _reads_own(s)
            out.append(s)
        else:
            live |= _reads_own(s)
            out.append(s)
    out.reverse()
    return out, live


def _reads(stmts):
    """Containers read anywhere in ``stmts`` (nested blocks included)."""
    return {r.ref.container for s in walk(stmts) for r in stmt_reads(s)}


def _reads_own(s):
    return {r.ref.container for r in stmt_reads(s)}
