"""Loops unrolled at capture: ``for`` over Python sequences, and comprehensions.

``for W, b in params:`` over a list or tuple known at capture (also ``enumerate``, ``zip``,
``dict.items()``, and a ``range`` loop whose body grows a Python list) runs its body once per
item while capturing, each pass with the item bound to the target, as Python runs it.
``break``/``continue`` work as in a run-time loop: a break whose condition is known at
capture ends the unrolling; one known only at run time guards the later passes by its flag.
List and dict comprehensions (and generator expressions passed to a call, ``sum(x for x in xs)``,
evaluated at once into a list) are unrolled the same way, their targets local to the
comprehension as in Python 3.
"""
from __future__ import annotations

import ast

from ..errors import unsupported
from ..ir.core import Assign, Const, Expr, If, Ref, op, scalar
from .control import Escape, LoopCtx
from .pybuiltins import sequence
from .pyvalues import freeze, made


class UnrolledStatements:
    """Mixed into ``python.Frontend``."""

    def for_sequence(self, node, frame, items, loc):
        """Unroll ``for target in items`` (``items``: the Python values of the passes)."""
        ctx = LoopCtx()
        ctx.unrolled = True
        frame.loops.append(ctx)
        out = self.out[-1]
        start = len(out)
        ret = []
        try:
            for item in items:
                if ctx.brk is None:
                    esc = self.unrolled_pass(node, frame, ctx, item)
                else:                     # a pass runs only where no earlier one broke out
                    esc = self.guarded(op("logical_not", scalar(ctx.brk)), frame, loc,
                                       lambda it=item: self.unrolled_pass(node, frame, ctx, it))
                if frame.ret_flag is not None and frame.ret_flag in esc.flags and frame.ret_flag not in ret:
                    ret.append(frame.ret_flag)
                if esc.dead and not esc.flags:
                    return Escape(dead=True)             # returned, on every path
                if esc.dead and all(f is ctx.brk or f is frame.ret_flag for f in esc.flags):
                    break                                 # broke out (or returned), on every path
        finally:
            frame.loops.pop()
        if ctx.brk is not None:
            self.out[-1].insert(start, Assign(Ref(ctx.brk, ()), Const(False), loc=loc))
        return Escape(ret)

    def unrolled_pass(self, node, frame, ctx, item):
        out = self.out[-1]
        start = len(out)
        for n in ast.walk(node.target):
            if isinstance(n, ast.Name):
                frame.owned.pop(n.id, None)          # each pass binds its value afresh (a Python int stays one)
        self.assign(node.target, item, frame, node)
        esc = self.block(node.body, frame)
        if ctx.cont is not None:
            out.insert(start, Assign(Ref(ctx.cont, ()), Const(False), loc=frame.loc(node)))
        return esc

    def guarded(self, cond, frame, loc, fn):
        """Run ``fn`` (capturing statements) where run-time ``cond`` holds; names it rebinds meet
        their earlier values after it, as after an ``if`` without ``else``. Returns fn's Escape."""
        env0, owned0 = dict(frame.env), dict(frame.owned)
        opaque = self.facts.enter_opaque()          # may not run on every pass
        try:
            with self.rt_scope("branch", frame, loc):
                inner, esc = self.collect(fn)
        finally:
            self.facts.leave(opaque)
        skipped = []
        self.join_branches(frame, env0, (frame.env, frame.owned, inner, esc),
                           (dict(env0), dict(owned0), skipped, Escape()), loc)
        self.emit(If(cond, inner, skipped, loc=loc))
        return Escape(esc.flags)

    # ------------------------------------------------------------------ comprehensions

    def expr_ListComp(self, node, frame):
        out = made(self, [])
        self.comprehension(node, node.generators, frame,
                           lambda: out.append(freeze(self, self.eval(node.elt, frame), frame.loc(node))))
        return out

    def expr_GeneratorExp(self, node, frame):
        # a call's argument (``sum(x * x for x in xs)``) is evaluated at once (``call_arguments``)
        raise unsupported(frame.loc(node), "generator expression other than as a call's argument",
                          "use a list comprehension ([... for ...])")

    def expr_DictComp(self, node, frame):
        out = made(self, {})

        def item():
            k = self.eval(node.key, frame)
            if isinstance(k, Expr):
                raise unsupported(frame.loc(node.key), "a dict key known only at run time",
                                  "use keys known when the function is captured")
            out[k] = freeze(self, self.eval(node.value, frame), frame.loc(node))
        self.comprehension(node, node.generators, frame, item)
        return out

    def comprehension(self, node, generators, frame, emit):
        """Run ``emit`` once per item of the comprehension's ``for``/``if`` clauses, the targets
        bound in a scope of their own."""
        names = [n.id for g in generators for n in ast.walk(g.target) if isinstance(n, ast.Name)]
        saved = {n: (frame.env.pop(n, _UNBOUND), frame.owned.pop(n, _UNBOUND)) for n in dict.fromkeys(names)}
        try:
            self._generate(generators, frame, emit)
        finally:
            for n, (v, c) in saved.items():
                frame.env.pop(n, None)
                frame.owned.pop(n, None)
                if v is not _UNBOUND:
                    frame.env[n] = v
                if c is not _UNBOUND:
                    frame.owned[n] = c

    def _generate(self, generators, frame, emit):
        if not generators:
            emit()
            return
        g = generators[0]
        loc = frame.loc(g.iter)
        if g.is_async:
            raise unsupported(loc, "async comprehension", "call flowgrad on synchronous code")
        it = g.iter
        if isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and \
                any(isinstance(v, Expr) for v in (self.eval(a, frame) for a in it.args)):
            raise unsupported(loc, "a comprehension over range() of a value known only at run time (the list's "
                                   "length would be known only at run time)",
                              "preallocate an array (np.zeros(n)) and fill it in a for loop")
        items = sequence(self, self.eval(it, frame), loc, "a comprehension")
        for item in items:
            for n in [n.id for n in ast.walk(g.target) if isinstance(n, ast.Name)]:
                frame.owned.pop(n, None)            # each pass binds the target afresh
            self.assign(g.target, item, frame, g.target)
            keep = True
            for cond in g.ifs:
                t = self.truth(self.eval(cond, frame), frame.loc(cond))
                if isinstance(t, Expr):
                    raise unsupported(frame.loc(cond), "a comprehension condition known only at run time (the "
                                                       "number of items would depend on it)",
                                      "compute all items and combine them with np.where")
                if not t:
                    keep = False
                    break
            if keep:
                self._generate(generators[1:], frame, emit)


_UNBOUND = object()
__all__ = ["UnrolledStatements"]
