"""Forward mode on the IR: the tangent program of a captured Program.

Every active container ``x`` (a float container that depends on the ``wrt`` inputs and
influences the result) gets a tangent container ``t_x`` of its shape and dtype. Each statement
writing an active container is paired with a statement writing its tangent, built from the same
rule table as the adjoint (``rules.PARTIALS`` for elementwise primitives, ``CallRule.jvp`` for
the others). Control flow is kept as it is: a ``for`` stays a ``for``, a ``while`` a ``while``,
a branch a branch; forward mode needs no tape and no reversal. Integer and boolean values never
get tangents.

Order. A statement ``x[s] = f(...)`` whose right side reads ``x`` (``x[1:] = x[:-1] * y``,
``x[s] += g(x)``) has its tangent statement placed *before* it: the tangent reads the primal
values as the statement found them, and the tangent statement, like any statement, evaluates its
right side before it writes ``t_x`` (NumPy's right-side-first rule). Any other statement goes
first and its tangent follows, reading the value it wrote where the partial is cheaper in the
result (``exp``, ``tanh``, ``sqrt``). In-place calls (``np.add.at``, ``y[idx] = v``) likewise
have their tangents before them; other calls write fresh outputs, so theirs follow.

The elementwise rule: ``PARTIALS[op](g, out, *args)`` gives one adjoint per operand, linear in
``g``; with ``g`` the operand's tangent it is that operand's share of the result's tangent. For
complex values (JAX's convention, ``dL/dx - i dL/dy``) this holds for holomorphic primitives and
``conj``; a real result of a complex operand (``abs``, ``real``, ``imag``, ``angle``) takes the
real part of the sum, as the adjoint does.
"""
from __future__ import annotations

from ..errors import UnsupportedError
from ..ir.core import (Assign, Call, Const, Container, For, If, Op, Pop, Program, Push, Read, Ref, While,
                       child_blocks, is_inexact, iter_reads, map_blocks, op, stmt_reads, stmt_writes, walk)
from .reverse import activity
from .rules import CALLS, PARTIALS, ZERO_DERIVATIVE


class TangentBuilder:
    """Builds the tangent statements of a program; the ``ctx`` of ``CallRule.jvp``."""

    def __init__(self, prog: Program, wrt, namer):
        self.prog, self.namer = prog, namer
        self.active_set = set().union(*(activity(prog, wrt, r) for r in prog.results)) | \
            {w for w in wrt if is_inexact(w.dtype)}
        self.tangents = {}
        for c in sorted(self.active_set, key=lambda c: c.name):
            self.tangents[c] = Container(namer("t_" + c.name), c.dtype, c.shape, "arg" if c in wrt else "transient")
        self.temps = []
        self.tape_tangents = {}
        self.local = set()          # temporaries of formulas written out by rules (``derive``)

    # --- services for the rules ---

    def temp(self, shape, dtype, hint="t"):
        c = Container(self.namer(hint), dtype, shape, "transient")
        self.temps.append(c)
        return c

    def derive(self, stmts):
        """``stmts`` (a rule's formula written out in primitives, writing fresh temporaries made
        with ``temp``) interleaved with their tangents: the tangent of an op whose rule is a formula
        of other ops (an adjoint call, under forward over reverse) follows from theirs. Returns the
        statements; ``tangent(Read(Ref(temp)))`` then reads a temporary's tangent."""
        for st in walk(stmts):
            for w in stmt_writes(st):
                c = w.container
                if c not in self.tangents and is_inexact(c.dtype):
                    self.tangents[c] = self.temp(c.shape, c.dtype, "t_" + c.name)
                    self.local.add(c)
        return self.tangent_block(stmts)

    def tangent(self, e, out=None):
        """The tangent of expression ``e`` as an expression, or None where it is zero (``e`` reads
        nothing active). ``out``: a read of ``e``'s value, for partials cheaper in the result."""
        if isinstance(e, Const):
            return None
        if isinstance(e, Read):
            t = self.tangents.get(e.ref.container)
            return None if t is None else Read(e.ref.with_container(t))
        if not isinstance(e, Op) or e.name in ZERO_DERIVATIVE:
            return None
        ts = [self.tangent(a) for a in e.args]
        if all(t is None for t in ts):
            return None
        if e.name not in PARTIALS:
            raise UnsupportedError(f"unsupported forward-mode differentiation of {e.name}: it has no derivative "
                                   "rule; compute it outside the differentiated function")
        total = None
        for k, t in enumerate(ts):
            if t is None:
                continue
            part = PARTIALS[e.name](t, e if out is None else out, *e.args)[k]
            if part is None:
                continue
            total = part if total is None else total + part
        if total is not None and total.dtype.kind == "c" and e.dtype.kind != "c":
            total = op("real", total)
        return total

    # --- statements ---

    def tangent_block(self, stmts):
        out = []
        for s in stmts:
            out += self.tangent_stmt(s)
        return out

    def tangent_stmt(self, s):
        if isinstance(s, Assign):
            return self.tangent_assign(s)
        if isinstance(s, Call):
            return self.tangent_call(s)
        if isinstance(s, (For, While, If)):
            return [map_blocks(s, self.tangent_block)]
        if isinstance(s, (Push, Pop)):
            t = self.tangents.get(s.ref.container)
            if t is None:
                return [s]
            tape = self.tape_tangents.get(s.tape)
            if tape is None:
                tape = self.tape_tangents[s.tape] = Container(self.namer("t_" + s.tape.name), s.tape.dtype,
                                                              (), "tape")
            if isinstance(s, Push):
                return [s, Push(tape, s.ref.with_container(t), s.loc, s.copy)]
            return [s, Pop(tape, s.ref.with_container(t), s.loc)]
        raise TypeError(f"cannot differentiate {s!r} in forward mode")

    def tangent_assign(self, s: Assign):
        x = s.dst.container
        t = self.tangents.get(x)
        if t is None:
            return [s]
        tdst = s.dst.with_container(t)
        reads_self = any(r.ref.container is x for r in iter_reads(s.expr))
        out = Read(s.dst) if not (reads_self or s.accumulate) and isinstance(s.expr, Op) else None
        try:
            te = self.tangent(s.expr, out)
        except UnsupportedError as exc:
            raise _located(exc, s.loc) from None
        if s.accumulate and te is None:
            return [s]
        if te is not None and te.dtype.kind == "c" and x.dtype.kind != "c":
            te = op("real", te)
        tstmt = Assign(tdst, Const(0.0) if te is None else te, accumulate=s.accumulate, loc=s.loc)
        return [tstmt, s] if reads_self else [s, tstmt]

    def tangent_call(self, s: Call):
        if all(c not in self.tangents for c in s.outputs):
            return [s]
        try:
            return self._tangent_call(s)
        except UnsupportedError as exc:
            raise _located(exc, s.loc) from None

    def _tangent_call(self, s: Call):
        rule = CALLS[s.op]
        touts = [self.tangents.get(c) for c in s.outputs]
        if not rule.inplace and all(self.tangent(e) is None for e in s.inputs):
            # made from nothing active (``C = np.eye(n)``, later written with active values)
            return [s] + [Assign(Ref(t), Const(0.0), loc=s.loc) for t in touts if t is not None]
        if rule.jvp is None:
            raise UnsupportedError(f"unsupported forward-mode differentiation of {s.op}: it has no "
                                   "tangent rule; compute it outside the differentiated function, or use "
                                   "reverse mode (flowgrad.grad, flowgrad.vjp)")
        stmts = rule.jvp(self, s, touts)
        for st in stmts:
            if getattr(st, "loc", None) is None and hasattr(st, "loc"):
                st.loc = s.loc
        return stmts + [s] if rule.inplace else [s] + stmts


def _located(exc, loc):
    """``exc`` naming the user's line ``loc`` (once)."""
    if loc is None or str(exc).startswith(f"{loc}:"):
        return exc
    return UnsupportedError(f"{loc}: {exc}")


def _first_access(stmts, conditional=False, first=None):
    """For each container, ``(statement, conditional)``: the first statement (program order)
    that reads or writes it, and whether that statement is on a path a branch or a ``while``
    may skip."""
    first = {} if first is None else first
    for s in stmts:
        for r in stmt_reads(s):
            first.setdefault(r.ref.container, (s, conditional))
        for w in stmt_writes(s):
            first.setdefault(w.container, (s, conditional))
        for body in child_blocks(s):
            _first_access(body, conditional or isinstance(s, (If, While)), first)
    return first


def _overwrites(s, c):
    """Whether ``s`` writes all of ``c`` without reading it."""
    if isinstance(s, Assign):
        return s.dst.container is c and s.dst.is_whole() and not s.accumulate and \
            not any(r.ref.container is c for r in iter_reads(s.expr))
    return isinstance(s, Call) and c in s.outputs and not CALLS[s.op].inplace


def build_tangent(prog: Program, wrt, namer) -> Program:
    """The tangent program of ``prog``: parameters ``prog.params`` then one tangent per ``wrt``
    container (the seed), results ``prog.results`` then the tangent of each.

    Args:
      prog: a captured program (the forward program, or a gradient program with tapes).
      wrt: the argument containers the tangent seeds are given for.
      namer: the capture's name generator.

    Returns:
      A Program whose body runs the original statements interleaved with their tangents.
    """
    b = TangentBuilder(prog, list(wrt), namer)
    body = b.tangent_block(prog.body)
    # a tangent starts at zero unless the first statement touching its value writes it whole on
    # every path: an argument updated in place (``y[0] = x[0]``) or read before a loop rebinds it
    # (``A = f(A)`` with A not differentiated), an array filled part by part
    first = _first_access(prog.body)
    params = set(prog.params)
    init = []
    for c, t in sorted(b.tangents.items(), key=lambda kv: kv[0].name):
        if c in wrt or c in b.local:
            continue
        s, conditional = first.get(c, (None, False))
        if s is not None and not conditional and _overwrites(s, c):
            continue
        if all(r.ref.container in params for d in c.shape for r in iter_reads(d)):
            init.append(Assign(Ref(t), Const(0.0)))
    body = init + body
    t_results = []
    for r in prog.results:
        t = b.tangents.get(r)
        if t is None:
            t = Container(namer("t_" + r.name), r.dtype, r.shape, "transient")
            body.append(Assign(Ref(t) if t.ndim else Ref(t, ()), Const(0.0)))
        t_results.append(t)
    containers = dict(prog.containers)
    for c in list(b.tangents.values()) + b.temps + list(b.tape_tangents.values()) + t_results:
        containers[c.name] = c
    for s in walk(body):
        if isinstance(s, For):
            containers.setdefault(s.var.name, s.var)
    seeds = [b.tangents[w] for w in wrt]
    return Program(prog.name + "_jvp", list(prog.params) + seeds, body, list(prog.results) + t_results, containers)


__all__ = ["build_tangent", "TangentBuilder"]
