"""Comparisons, ``and``/``or`` and conditional expressions in captured code: Python's
evaluation order, each side of a choice known only at run time captured on its own path."""
from __future__ import annotations

import ast

from ..errors import FlowgradError, unsupported
from ..ir.core import BOOL, Assign, Const, Expr, If, Op, Read, Ref, Take, const_value, is_weak, op, result_dtype
from . import indexing, pybuiltins, pytrees
from .pybuiltins import PY_OPERATORS

_CMPOPS = {ast.Lt: "less", ast.LtE: "less_equal", ast.Gt: "greater", ast.GtE: "greater_equal",
           ast.Eq: "equal", ast.NotEq: "not_equal"}


class ConditionalExpressions:
    """Mixed into ``python.Frontend``."""

    def expr_Compare(self, node, frame):
        """``a < b < c`` is ``a < b and b < c`` with ``b`` evaluated once: each further
        comparison, and what its right side computes, runs only where the ones before hold."""
        left = self.eval(node.left, frame)
        return self.compare(node, frame, left, list(zip(node.ops, node.comparators)))

    def compare(self, node, frame, left, rest):
        loc = frame.loc(node)
        result = None
        for k, (cop, right_node) in enumerate(rest):
            if isinstance(result, Expr):
                tail = rest[k:]
                return self.choose(result, lambda: self.compare(node, frame, left, tail), lambda: result,
                                   right_node, frame)
            if result is False:
                return False
            (left,), right = self.then([left], lambda r=right_node: self.eval(r, frame))
            name = _CMPOPS.get(type(cop))
            if isinstance(cop, (ast.In, ast.NotIn)):
                r = pybuiltins.contains(self, left, right, loc) == isinstance(cop, ast.In)
            elif name is None:
                if isinstance(cop, (ast.Is, ast.IsNot)) and (not isinstance(left, Expr) and not isinstance(right, Expr)
                                                         or left is None or right is None):
                    # a value known only at run time is never None (that is part of the signature)
                    r = (left is right) if isinstance(cop, ast.Is) else (left is not right)
                elif isinstance(cop, (ast.Is, ast.IsNot)):
                    raise unsupported(loc, "identity comparison (is) of arrays or numbers known only at run "
                                           "time", "compare values (==, np.array_equal), or test for None")
                else:
                    raise unsupported(loc, f"comparison {type(cop).__name__}", "use <, <=, >, >=, ==, !=")
            elif isinstance(left, Expr) or isinstance(right, Expr):
                r = op(name, self.to_expr(left, loc), self.to_expr(right, loc))
            else:
                r = PY_OPERATORS[name](left, right)
            result = r if result is None else (result and r)
            left = right
        return result

    def expr_BoolOp(self, node, frame):
        """Python's ``and``/``or``: the value of the operand that decides, the right one evaluated
        only where it must be (``i < len(x) and x[i] > 0`` does not index past the end)."""
        loc = frame.loc(node)
        out = self.eval(node.values[0], frame)
        for right_node in node.values[1:]:
            t = self.truth(out, loc)
            left = out
            right = (lambda r: lambda: self.eval(r, frame))(right_node)
            if not isinstance(t, Expr):
                if t == isinstance(node.op, ast.And):
                    out = right()
                continue
            if isinstance(node.op, ast.And):
                out = self.choose(t, right, lambda: left, right_node, frame)
            else:
                out = self.choose(t, lambda: left, right, right_node, frame)
        return out

    def choose(self, test, then, orelse, node, frame):
        """``then() if test else orelse()`` for a run-time scalar ``test``: each side's statements
        run only on its own path, under the facts its path knows (``i < n`` where it holds), as in
        Python (``math.log(s) if s > 0 else 0.0`` takes no log of a negative ``s``). Two scalars that
        are values already (constants, reads that cannot raise) are picked by a ``where``; a side
        that is another array's memory makes the choice a copy standing for it (``StandIn``)."""
        loc = frame.loc(node)
        sides = []
        for what, fn, holds in (("then", then, True), ("else", orelse, False)):
            sides.append(self.under_facts(what, node, frame, lambda h=holds: self.facts.enter_branch(test, h),
                                          lambda f=fn: self.branch(frame, loc, lambda: self._side(f(), loc))))
        (s1, a), (s2, b) = sides
        if pytrees.is_container(a) or pytrees.is_container(b):
            if not (pytrees.is_container(a) and pytrees.is_container(b)):
                raise unsupported(loc, "a choice between a Python container and another kind of value",
                                  "give both sides the same kind of value")

            def join(k, ea, eb):
                ea, eb = self.to_expr(ea, loc), self.to_expr(eb, loc)
                if len(ea.shape) != len(eb.shape):
                    raise unsupported(loc, "a choice between arrays of different shapes (its shape would depend "
                                           "on the run-time test)", "give both sides the same shape")
                m = self.container("pick", result_dtype([ea, eb], "same"), ea.shape or eb.shape,
                                   weak=is_weak(ea) and is_weak(eb))
                ref = Ref(m) if m.ndim else Ref(m, ())
                s1.append(Assign(ref, ea, loc=loc))
                s2.append(Assign(ref, eb, loc=loc))
                return Read(ref)
            value = pytrees.merge(self, "a conditional expression", a, b, loc, join)
            self.emit(If(test, s1, s2, loc))
            return value
        if a.shape and b.shape and (len(a.shape) != len(b.shape) or any(
                const_value(p) is not None and const_value(q) is not None and const_value(p) != const_value(q)
                for p, q in zip(a.shape, b.shape))):
            raise unsupported(loc, "a choice between arrays of different shapes (its shape would depend on "
                                   "the run-time test)", "give both sides the same shape")
        if not s1 and not s2 and _picked(a) and _picked(b) and not (a.shape or b.shape):
            return op("where", test, a, b)
        m = self.container("pick", result_dtype([a, b], "same"), a.shape or b.shape,
                           weak=is_weak(a) and is_weak(b))
        ref = Ref(m) if m.ndim else Ref(m, ())
        self.emit(If(test, s1 + [Assign(ref, a, loc=loc)], s2 + [Assign(ref, b, loc=loc)], loc))
        for e in (a, b):
            if isinstance(e, Read) and e.ref.container.ndim and indexing.held(self, e.ref.container):
                # NumPy's value is that array itself (or a view of it) on this path
                indexing.stand_in(self, m, e.ref.container, "a conditional expression's value, another "
                                  "array's memory on one side", loc, "copy that side (np.copy(...))")
        return Read(ref)

    def _side(self, v, loc):
        return v if pytrees.is_container(v) else self.to_expr(v, loc)

    def truth(self, v, loc):
        """The truth value of ``v``: a Python bool, or a run-time scalar boolean expression."""
        if isinstance(v, Expr):
            if v.shape != ():
                raise FlowgradError(f"{loc}: the truth value of an array is ambiguous; use np.any/np.all "
                                    "or compare a scalar")
            return v if v.dtype == BOOL else op("not_equal", v, 0)
        return bool(v)

    def expr_IfExp(self, node, frame):
        c = self.truth(self.eval(node.test, frame), frame.loc(node))
        if not isinstance(c, Expr):
            return self.eval(node.body if c else node.orelse, frame)
        return self.choose(c, lambda: self.eval(node.body, frame), lambda: self.eval(node.orelse, frame), node, frame)


def _picked(e):
    """Whether ``e`` is a value already, which a ``where`` may pick without computing anything."""
    return isinstance(e, Const) or isinstance(e, Read) and not _may_raise(e)


def _may_raise(e):
    """Whether evaluating ``e`` may raise (a checked index, in it or in a view it reads)."""
    if isinstance(e, Op):
        return e.name == "checked_index" or any(_may_raise(a) for a in e.args)
    if isinstance(e, Read):
        return any(_may_raise(i) for i in e.ref.index_exprs())
    return isinstance(e, Take)
