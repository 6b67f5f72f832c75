"""What the Python frontend's capture keeps about control flow: the ``Restart`` signal, the
``Escape`` of a statement (break/continue/return), a loop's flags, and the run-time ``Scope``s
(loops and branches) open at the point being captured."""
from __future__ import annotations

from ..ir.core import Expr, Read, same_ref


class Restart(Exception):
    """Capture must start again (a scalar's dtype widened, facts a proof relied on do not hold,
    or a loop is to be unrolled)."""


class Escape:
    """What a compiled statement may do to the rest of its block: break/continue/return."""

    def __init__(self, flags=(), dead=False):
        self.flags = list(flags)   # containers that, when set, skip the rest of the block
        self.dead = dead           # the rest of the block can never run


class LoopCtx:
    def __init__(self):
        self.brk = None      # bool container, created on the first break/return inside
        self.cont = None
        self.unrolled = False    # a loop unrolled at capture (``unrolled.for_sequence``)


class Scope:
    """Code being captured that runs a number of times, or on a path, known only at run time: a
    loop's body ('for', 'while') or a branch ('branch'). ``out``: the statement list its loop or
    ``If`` goes into; ``env``: its frame's names on entry; for a ``for`` loop, ``key`` (for the
    hint that unrolls it), ``trips`` (its trip count where known at capture), ``vars`` (the
    scalars its variable lives in), ``step`` (its step, an expression) and ``reverse``."""

    __slots__ = ("out", "frame", "env", "kind", "loc", "key", "trips", "vars", "step", "reverse")

    def __init__(self, out, frame, kind, loc, key=None, trips=None, vars=(), step=None, reverse=False):
        self.out, self.frame, self.env = out, frame, dict(frame.env)
        self.kind, self.loc, self.key, self.trips, self.vars = kind, loc, key, trips, tuple(vars)
        self.step, self.reverse = step, reverse


def same_binding(a, b):
    """Whether two bindings of a name are the same value (the same view, or equal Python values)."""
    if a is b:
        return True
    if isinstance(a, Read) and isinstance(b, Read):
        return same_ref(a.ref, b.ref)
    if isinstance(a, Expr) or isinstance(b, Expr):
        return False
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # noqa: BLE001 - arrays and odd objects compare badly
        return False
