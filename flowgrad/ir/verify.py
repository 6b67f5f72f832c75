"""The IR's executable spec: ``verify(body, containers)`` checks the invariants every pass keeps."""
from __future__ import annotations

from .core import (ELEMENTWISE, Assign, Call, Const, For, If, Index, NewAxis, Op, Pop, Push, Read,
                   Slice, Take, While, broadcast_shapes, const_value, walk)


class IRError(AssertionError):
    """An IR invariant does not hold (a flowgrad bug, never a user error)."""


def verify(body, containers) -> None:
    """Raise IRError unless every statement in ``body`` is well formed.

    - every Ref names a known container and has one Index/Slice per container dimension;
    - index expressions are integer scalars; Op nodes are known elementwise primitives;
    - an Assign's value broadcasts to its destination, and is not complex for a real one;
    - loop variables are integer scalars; If/While conditions are boolean scalars;
    - Call inputs are expressions and outputs are containers of the program.
    """
    known = {id(c) for c in containers.values()}

    def ref(r, where):
        if id(r.container) not in known:
            raise IRError(f"{where}: unknown container {r.container.name}")
        dims = [it for it in r.items if not isinstance(it, NewAxis)]
        if len(dims) != r.container.ndim:
            raise IRError(f"{where}: {r.container.name} has {r.container.ndim} dims, reference has {len(dims)}")
        for it in dims:
            parts = (it.at,) if isinstance(it, Index) else (it.start, it.size, it.step)
            for p in parts:
                expr(p, where)
                if p.shape != () or p.dtype.kind not in "iu":
                    raise IRError(f"{where}: index of {r.container.name} is not an integer scalar")
            if isinstance(it, Slice) and const_value(it.step) == 0:
                raise IRError(f"{where}: zero slice step")
        if r.perm is not None and sorted(r.perm) != list(range(len(r.perm))):
            raise IRError(f"{where}: bad permutation {r.perm}")

    def expr(e, where):
        if isinstance(e, Read):
            ref(e.ref, where)
        elif isinstance(e, Op):
            if e.name not in ELEMENTWISE:
                raise IRError(f"{where}: unknown primitive {e.name}")
            for a in e.args:
                expr(a, where)
        elif isinstance(e, Take):
            ref(e.source, where)
            if not e.source.is_whole() or len(e.index) != e.source.container.ndim:
                raise IRError(f"{where}: take from {e.source.container.name} needs the whole container "
                              "and one index per dimension")
            for i in e.index:
                expr(i, where)
                if i.dtype.kind not in "iu":
                    raise IRError(f"{where}: take from {e.source.container.name} with a non-integer index")
        elif not isinstance(e, Const):
            raise IRError(f"{where}: not an expression: {e!r}")

    for s in walk(body):
        where = type(s).__name__ + (f" at {s.loc}" if getattr(s, "loc", None) else "")
        if isinstance(s, Assign):
            ref(s.dst, where)
            expr(s.expr, where)
            try:
                out = broadcast_shapes(s.expr.shape, s.dst.shape)
            except ValueError as exc:
                raise IRError(f"{where}: {exc}") from None
            if len(out) != len(s.dst.shape):
                raise IRError(f"{where}: value of rank {len(s.expr.shape)} into rank {len(s.dst.shape)}")
            if s.expr.dtype.kind == "c" and s.dst.container.dtype.kind != "c":
                raise IRError(f"{where}: complex value into {s.dst.container.dtype} {s.dst.container.name}")
        elif isinstance(s, Call):
            for e in s.inputs:
                expr(e, where)
            for c in s.outputs:
                if id(c) not in known:
                    raise IRError(f"{where}: unknown output container {c.name}")
        elif isinstance(s, For):
            if s.var.ndim or s.var.dtype.kind not in "iu":
                raise IRError(f"{where}: loop variable {s.var.name} is not an integer scalar")
            for e in (s.start, s.stop, s.step):
                expr(e, where)
        elif isinstance(s, (If, While)):
            expr(s.cond, where)
            if s.cond.shape != () or s.cond.dtype.kind != "b":
                raise IRError(f"{where}: condition is not a boolean scalar")
        elif isinstance(s, (Push, Pop)):
            ref(s.ref, where)
