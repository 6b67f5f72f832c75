"""Python/NumPy frontend: captures a function's source into the IR for one call signature.

The frontend interprets the function's AST abstractly. Python values that are known when
the program is captured (shapes, literals, modules, helper functions) are folded away;
array and scalar values that exist only at run time become IR containers and expressions.
A name bound to a NumPy view is a Ref into its base container, so writing through the view
writes the base. Control flow stays structured: ``break``/``continue``/``return`` become
guarded flags, loops stay loops.
"""
from __future__ import annotations

import ast
import builtins
import contextlib
import inspect

import numpy as np

from ..errors import FlowgradError, InputError, UnsupportedError, unsupported
from ..ir.core import (BOOL, F64, I64, Assign, Call, ComplexOperandError, Const, Container, Expr, If, Op, Read, Ref,
                       broadcast_shapes, const_value, is_weak, iter_reads, op, result_dtype, scalar, stmt_writes, walk)
from ..ir.ranges import Facts
from .. import pytree
from . import Captured, closures, indexing, objects, pybuiltins, pytrees, pyvalues
from .calls import CallExpressions, _call_name, _is_print, _warn_print
from .conditionals import ConditionalExpressions
from .control import Escape, Restart, Scope, same_binding
from .loops import LoopStatements
from .numpy_api import call_function, get_attribute
from .pybuiltins import PY_OPERATORS
from .pyvalues import ObjectValue, Registry, freeze, made
from .unrolled import UnrolledStatements


_RESERVED = set(dir(builtins)) | {"np", "_rt", "pullback", "cotangent"} | set(__import__("keyword").kwlist)


class Namer:
    """Unique, deterministic container names that never shadow what generated code uses."""

    def __init__(self):
        self.used = {name: 1 for name in _RESERVED}

    def __call__(self, hint: str) -> str:
        base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in hint) or "t"
        if base[0].isdigit():
            base = "_" + base
        n = self.used.get(base, 0)
        name = base if n == 0 else f"{base}_{n}"
        while name in self.used and name != base:       # ``linear_1`` asked for after ``linear`` twice
            n += 1
            name = f"{base}_{n}"
        self.used[base] = n + 1
        self.used.setdefault(name, 1)
        return name


class Frontend(CallExpressions, ConditionalExpressions, LoopStatements, UnrolledStatements):
    """Captures one function for one call signature."""

    def __init__(self, fn, hints=None, object_args=()):
        self.fn = fn
        self.hints = hints if hints is not None else {}
        self.facts = Facts()     # ranges of the enclosing loops' variables (``indexing``)
        self.stand_ins = {}      # copy standing where NumPy has a view -> indexing.StandIn
        self.stale = {}          # such a copy whose source was written since -> where
        self.namer = Namer()
        self.containers = {}
        self.params = []
        self.consts = {}         # id(global array) -> (container, value)
        self.arg_containers = {}  # argument name -> its container
        self.out = [[]]          # stack of statement lists being filled
        self.frames = []
        self.global_reads = []   # (module dict or closure cell, name, value) the capture folded in
        self.depth = 0
        self.reads_log = None    # (frame, {name: binding}) while compiling a loop body
        self.loop_reads = []     # per loop being captured: the containers names read in its body
        self.widen = {}          # loop-carried name -> the wider dtype its storage needs (``reconcile``)
        self.pyobjs = Registry()  # the Python containers the capture made or built (``pyvalues``)
        self.rt_scopes = []      # the run-time loops and branches around the point being captured
        self.suspended_logs = []  # ``reads_log``s of the callers of an inlined function
        self.attr_sources = {}   # id(object) -> its ``objects.AttrSource``
        self.outside_seen = {}   # id -> a mutable container from outside whose contents are recorded
        self.constructing = None  # the object whose __init__ is being inlined
        self.object_args = set(object_args)   # arguments whose plain objects are pytrees (``wrt``)
        self.arg_leaves = {}     # pytree argument name -> (TreeDef, container per run-time leaf)
        self.param_sources = []  # per entry of params: (argument name, leaf index or None)
        self.result_layout = None  # a pytree result's ``pytrees.ResultLayout``
        self.carry_storage = set()  # containers made to carry a Python container's leaves across a loop

    # ----------------------------------------------------------- containers and statements

    def container(self, hint, dtype, shape, kind="transient", weak=False):
        c = Container(self.namer(hint), dtype, shape, kind, weak)
        self.containers[c.name] = c
        return c

    def alloc(self, hint, dtype, shape, loc=None, covered=False) -> Container:
        """A new array container for code that fills it piece by piece: zero-filled, unless the
        pieces cover it (``covered``) and its shape is known at entry, where the backends create
        it before the program runs (a fill would be overwritten at once, and a time loop would
        save it on the tape for nothing)."""
        c = self.container(hint, dtype, shape)
        known = all(r.ref.container in self.params for d in c.shape for r in iter_reads(d))
        if not (covered and known and c.ndim):
            self.emit(Assign(Ref(c) if c.ndim else Ref(c, ()), Const(0, c.dtype), loc=loc))
        return c

    def emit(self, stmt):
        self.out[-1].append(stmt)
        self.facts.written(w.container for w in stmt_writes(stmt))
        return stmt

    def then(self, held, rest):
        """``rest()``, evaluated after the values ``held`` (a list) that an expression computed
        before it, as Python does: where ``rest`` writes what one of those computed values reads
        (a helper updating its argument in place: ``0.8 * z + h(z)``, ``z[0] + h(z)``), that value
        is computed into a container of its own ahead of the writes. (An array itself, or a view,
        is NumPy's same object and shows the write.) Returns ``(held, rest's value)``."""
        block = self.out[-1]
        mark = len(block)
        value = rest()
        if len(block) > mark and any(_computed(v) for v in held):
            written = {w.container for s in block[mark:] for t in walk([s]) for w in stmt_writes(t)}
            for k, v in enumerate(held):
                if _computed(v) and written & {r.ref.container for r in iter_reads(v)}:
                    c = self.container("held", v.dtype, v.shape, weak=is_weak(v))
                    ref = Ref(c) if c.ndim else Ref(c, ())
                    block.insert(mark, Assign(ref, v))
                    held[k] = Read(ref)
        return held, value

    def collect(self, fn, *args):
        """Run ``fn`` collecting the statements it emits; returns (statements, fn's result)."""
        self.out.append([])
        try:
            value = fn(*args)
        finally:
            stmts = self.out.pop()
        return stmts, value

    def materialize(self, value, hint="t", loc=None) -> Read:
        """A fresh container holding ``value`` (NumPy semantics: a new array)."""
        e = self.to_expr(value, loc)
        c = self.container(hint, e.dtype, e.shape, weak=is_weak(e))
        self.emit(Assign(Ref(c) if c.ndim else Ref(c, ()), e, loc=loc))
        return Read(Ref(c) if c.ndim else Ref(c, ()))

    def to_expr(self, value, loc=None) -> Expr:
        if isinstance(value, Expr):
            return value
        if isinstance(value, (bool, int, float, complex, np.bool_, np.integer, np.floating, np.complexfloating)):
            return Const(value)
        if isinstance(value, np.ndarray):
            return self.const_array(value)
        if isinstance(value, (tuple, list)):
            from .numpy_api import stack_values
            return stack_values(self, list(value), 0, loc)
        raise unsupported(loc, f"value of type {type(value).__name__}",
                          "only arrays, numbers and tuples of them can be used as data")

    def const_array(self, value: np.ndarray) -> Read:
        """A module-level NumPy array used by the function: passed in as a hidden parameter."""
        key = id(value)
        if key not in self.consts:
            if value.dtype.kind not in "biufc":
                raise UnsupportedError(f"unsupported constant array of dtype {value.dtype}")
            c = self.container("const", value.dtype, value.shape, "arg")
            self.consts[key] = (c, value)
        return Read(Ref(self.consts[key][0]))

    # ----------------------------------------------------------- capture

    def capture_top(self, args):
        frame, fdef = self.new_frame(self.fn)
        sig = inspect.signature(self.fn)
        try:
            bound = sig.bind(*args)
        except TypeError as exc:
            raise InputError(f"calling {self.fn.__name__}: {exc}") from None
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            frame.env[name] = self.param(name, value, frame)
        self.frames.append(frame)
        body, esc = self.collect(self._frame_block, fdef, frame)
        value = self.finish_frame(frame, fdef, body)
        self.frames.pop()
        if value is None:
            raise FlowgradError(f"{frame.loc(fdef)}: {self.fn.__name__} returns nothing: "
                                "return the value to differentiate")
        where = frame.loc(frame.ret_node or fdef)
        if pytrees.is_tree(value):
            self.out.append(body)
            try:
                e, self.result_layout = pytrees.pack_result(self, value, where)
            finally:
                self.out.pop()
        else:
            e = self.to_expr(value, where)
        res = self.container("result", e.dtype, e.shape)
        body.append(Assign(Ref(res) if res.ndim else Ref(res, ()), e, loc=where))
        params = self.params + [c for c, _ in self.consts.values()]
        return params, body, res

    def param(self, name, value, frame):
        """The captured value of argument ``name``: a container's read for an array or a number,
        a structure of them for a pytree, ``value`` itself for anything else (folded)."""
        if pytree.is_node(value, objects=name in self.object_args):
            return pytrees.argument(self, name, value, name in self.object_args)
        if not pytree.is_leaf_value(value):
            return bool(value) if isinstance(value, (bool, np.bool_)) else self.outside(value)
        c, v = self.leaf_param(name, value, (name, None))
        self.arg_containers[name] = c
        if c.ndim == 0 and not isinstance(value, np.ndarray):
            frame.owned[name] = c
        return v

    def leaf_param(self, hint, value, source):
        """``(container, read)`` of a new argument container for run-time leaf ``value``
        (``source``: the argument and leaf it is, for ``inputs``)."""
        python = not isinstance(value, np.generic)          # a Python scalar: weak (NEP 50)
        if isinstance(value, np.ndarray):
            c = self.container(hint, _data_dtype(value.dtype, hint), value.shape, "arg")
        elif isinstance(value, (int, np.integer)):
            c = self.container(hint, I64, (), "arg", weak=python)
        elif isinstance(value, (float, np.floating, complex, np.complexfloating)):
            dt = np.dtype(type(value)) if isinstance(value, np.generic) else np.dtype(type(value).__name__)
            c = self.container(hint, _data_dtype(dt, hint), (), "arg", weak=python)
        else:
            raise InputError(f"argument {hint!r} is {type(value).__name__}; flowgrad computes with numbers and arrays")
        self.params.append(c)
        self.param_sources.append(source)
        return c, Read(Ref(c)) if isinstance(value, np.ndarray) else scalar(c)

    def outside(self, value):
        """``value``, read from outside the function (a global, a closure variable, an attribute of
        an outside object): a list or dict's contents are recorded (``Captured.global_reads``), so
        that a later call finding them changed captures again."""
        if isinstance(value, (list, dict)) and self.pyobjs.get(value) is None and id(value) not in self.outside_seen:
            self.outside_seen[id(value)] = value
            self.global_reads.append((_Contents(value), None, _Contents.snapshot(value)))
        return value


    def finish_frame(self, frame, fdef, body):
        """The frame's return value; writes the unconditional return into the result container
        when some return happened under runtime control flow."""
        if frame.ret is None:
            return frame.ret_value
        if frame.ret_value is not None:
            body.append(self.store_result(frame, frame.ret_value, fdef))
        return Read(Ref(frame.ret) if frame.ret.ndim else Ref(frame.ret, ()))

    def store_result(self, frame, value, node):
        e = self.to_expr(value, frame.loc(node))
        if frame.ret is None:
            dt = e.dtype
            key = (frame.fn, "<return>")
            dt = np.dtype(self.hints.get(key, dt))
            frame.ret = self.container("ret", dt, e.shape)
        elif result_dtype([Read(Ref(frame.ret, ()) if not frame.ret.ndim else Ref(frame.ret)), e],
                          "same") != frame.ret.dtype:
            self.hints[(frame.fn, "<return>")] = result_dtype([Const(0, frame.ret.dtype, False), e], "same")
            raise Restart()
        if isinstance(e, Read) and e.ref.container.ndim and indexing.held(self, e.ref.container):
            # NumPy's result is that very array (or a view of it) on this path
            indexing.stand_in(self, frame.ret, e.ref.container, f"the result of {frame.fn.__name__}(), another "
                              "array's memory on some paths", frame.loc(node),
                              "return a copy (return np.copy(...)) where it returns an argument or a view")
        return Assign(Ref(frame.ret) if frame.ret.ndim else Ref(frame.ret, ()), e, loc=frame.loc(node))

    # ----------------------------------------------------------- statements

    def block(self, stmts, frame) -> Escape:
        """Compile a statement list; statements after a possible jump are guarded by its flags."""
        for k, node in enumerate(stmts):
            esc = self.statement(node, frame)
            if esc.dead:
                return esc
            if esc.flags:
                rest = stmts[k + 1:]
                if not rest:
                    return esc
                # like an ``if`` without ``else``: names the rest rebinds meet their earlier values
                esc2 = self.guarded(self.none_set(esc.flags), frame, frame.loc(rest[0]),
                                    lambda r=rest: self.block(r, frame))
                return Escape(_union(esc.flags, esc2.flags))
        return Escape()

    @contextlib.contextmanager
    def rt_scope(self, kind, frame, loc, **facts):
        """Code captured inside runs a number of times, or on a path, known only at run time
        (``control.Scope``); its statement goes into the current statement list."""
        self.rt_scopes.append(Scope(self.out[-1], frame, kind, loc, **facts))
        try:
            yield
        finally:
            self.rt_scopes.pop()

    @staticmethod
    def none_set(flags):
        cond = op("logical_not", scalar(flags[0]))
        for f in flags[1:]:
            cond = op("logical_and", cond, op("logical_not", scalar(f)))
        return cond

    def statement(self, node, frame) -> Escape:
        loc = frame.loc(node)
        try:
            method = getattr(self, "stmt_" + type(node).__name__, None)
            if method is None:
                raise unsupported(loc, f"{type(node).__name__} statement", "rewrite with supported constructs")
            return method(node, frame) or Escape()
        except (FlowgradError, Restart):
            raise
        except ComplexOperandError as exc:
            raise unsupported(loc, *exc.args) from None
        except (ValueError, TypeError, IndexError, KeyError, AttributeError, NotImplementedError) as exc:
            raise FlowgradError(f"{loc}: {exc}") from exc

    def stmt_Pass(self, node, frame):
        return None

    def stmt_Expr(self, node, frame):
        if isinstance(node.value, ast.Constant):
            return None  # docstring
        if _is_print(node) and self.lookup("print", frame, node.value) is builtins.print:
            _warn_print(frame.loc(node))
            return None
        self.eval(node.value, frame)
        return None

    def stmt_FunctionDef(self, node, frame):
        self.bind(node.name, closures.define(self, node, frame), frame, frame.loc(node))

    def stmt_Assert(self, node, frame):
        test = self.eval(node.test, frame)
        if isinstance(test, Expr):
            raise unsupported(frame.loc(node), "assert on run-time values",
                              "check inputs before calling the differentiated function")
        if not test:
            raise FlowgradError(f"{frame.loc(node)}: assertion failed while capturing")
        return None

    def stmt_Assign(self, node, frame):
        value = self.eval(node.value, frame)
        for target in node.targets:
            self.assign(target, value, frame, node)

    def stmt_AnnAssign(self, node, frame):
        if node.value is not None:
            self.assign(node.target, self.eval(node.value, frame), frame, node)

    def stmt_AugAssign(self, node, frame):
        loc = frame.loc(node)
        opname = _BINOPS.get(type(node.op))
        if opname is None:
            raise unsupported(loc, f"augmented assignment {type(node.op).__name__}", "write x = x <op> y")
        target = node.target
        if isinstance(target, ast.Subscript):
            # Python reads ``base[index]`` before it evaluates the right side
            base = self.eval(target.value, frame)
            index = self.eval_index(target.slice, frame)
            if isinstance(base, (list, dict, tuple)):
                cur = self.eval(target, frame)
                rhs = self.eval(node.value, frame)
                pybuiltins.setitem(self, base, index, self.binop(opname, cur, rhs, loc), loc, _call_name(target))
                return
            _check_not_outside(base, target, loc)
            element = indexing.element(self, base, index, loc)
            held, rhs = self.then([element], lambda: self.eval(node.value, frame))
            if held[0] is not element:       # the right side wrote it (``A[4] += h(A)``): the value before
                indexing.setitem(self, base, index, self.binop(opname, held[0], rhs, loc), loc)
                return
            indexing.augmented_setitem(self, base, index, opname, rhs, loc)
            return
        rhs = self.eval(node.value, frame)
        if isinstance(target, ast.Name):
            cur = self.lookup(target.id, frame, target)
            if isinstance(cur, Read) and cur.ref.container.ndim and cur.shape != ():
                self.write_ref(cur.ref, self.binop(opname, cur, rhs, loc), loc, accumulate=False,
                               rhs=rhs, opname=opname)
                return
            if isinstance(cur, list) and opname in ("add", "multiply"):     # list += ...: in place
                pyvalues.check_mutable(self, cur, loc, f"{target.id} {'+' if opname == 'add' else '*'}=")
                new = self.binop(opname, cur, rhs, loc)
                cur[:] = new
                return
            self.assign(target, self.binop(opname, cur, rhs, loc), frame, node)
            return
        if isinstance(target, ast.Attribute):
            obj = self.eval(target.value, frame)
            cur = self.eval(target, frame)
            if isinstance(cur, Read) and cur.ref.container.ndim and cur.shape != ():
                self.write_ref(cur.ref, self.binop(opname, cur, rhs, loc), loc, rhs=rhs, opname=opname)
                return                                  # self.u += ... on an array: in place
            objects.set_attr(self, obj, target.attr, self.binop(opname, cur, rhs, loc), loc, _call_name(target))
            return
        raise unsupported(loc, "augmented assignment target", "assign to a name or a subscript")

    def assign(self, target, value, frame, node):
        loc = frame.loc(node)
        if isinstance(target, ast.Name):
            self.bind(target.id, value, frame, loc)
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(value, len(target.elts), loc)
            # Python evaluates the whole right side first: freeze values an earlier target may change
            # (a scalar a display already copied into a container of its own stays as it is)
            owned = {c for f in self.frames for c in f.owned.values()}
            items = [self.materialize(v, "tmp", loc) if isinstance(v, Expr) and
                     (v.shape == () or isinstance(v, Op)) and not _own_copy(v, owned) else v for v in items]
            for t, v in zip(target.elts, items):
                self.assign(t, v, frame, node)
        elif isinstance(target, ast.Subscript):
            base = self.eval(target.value, frame)
            index = self.eval_index(target.slice, frame)
            if isinstance(base, (list, dict, tuple)):
                if isinstance(base, tuple):
                    raise unsupported(loc, "assignment into a tuple", "tuples cannot change: build a new one")
                pybuiltins.setitem(self, base, index, value, loc, _call_name(target))
                return
            _check_not_outside(base, target, loc)
            indexing.setitem(self, base, index, value, loc)
        elif isinstance(target, ast.Attribute):
            objects.set_attr(self, self.eval(target.value, frame), target.attr, value, loc, _call_name(target))
        else:
            raise unsupported(loc, f"assignment target {type(target).__name__}", "assign to names or subscripts")

    def unpack(self, value, n, loc):
        if isinstance(value, dict):
            value = list(value)
        if isinstance(value, (tuple, list)):
            if len(value) != n:
                raise FlowgradError(f"{loc}: cannot unpack {len(value)} values into {n} names")
            return list(value)
        if isinstance(value, Expr) and value.shape and const_value(value.shape[0]) == n:
            return [indexing.getitem(self, value, (k,), loc) for k in range(n)]
        raise unsupported(loc, "unpacking of this value", "unpack tuples or arrays of known length")

    def bind(self, name, value, frame, loc):
        """``name = value`` with Python semantics: arrays alias, scalars copy."""
        owned = frame.owned.get(name)
        if isinstance(value, Expr) and value.shape == ():
            self.write_scalar(name, value, frame, loc)
            return
        if owned is not None and isinstance(value, (bool, int, float, complex, np.number, np.bool_)):
            self.write_scalar(name, Const(value), frame, loc)
            return
        if isinstance(value, Op) or (isinstance(value, Read) and not value.ref.container.ndim):
            value = self.materialize(value, name, loc)
        frame.owned.pop(name, None)
        frame.env[name] = value

    def write_scalar(self, name, e, frame, loc):
        c = frame.owned.get(name)
        key, strong = (frame.fn, name), (frame.fn, name, "strong")
        want = e.dtype
        if key in self.hints:
            want = np.result_type(want, self.hints[key])
        if c is None:
            # a name given a NumPy scalar later (``acc = 0.0``, then ``acc += x32[i]``) holds that
            # dtype from the start, as Python's name does from then on
            want = self.hints.get(strong, want)
            c = self.container(name, want, (), weak=is_weak(e) and strong not in self.hints)
            frame.owned[name] = c
        elif result_dtype([scalar(c), e], "same") != c.dtype and not (c.dtype.kind == "f" and e.dtype.kind == "f"):
            self.hints[key] = result_dtype([scalar(c), e], "same")
            raise Restart()
        elif c.weak and not is_weak(e) and e.dtype.kind == "f" and e.dtype != c.dtype:
            self.hints[strong] = e.dtype
            raise Restart()
        elif c.weak and not is_weak(e):
            c.weak = False                        # a NumPy scalar from here on
        pyvalues.protect(self, c, loc)       # values made with c keep the value it has now
        self.emit(Assign(Ref(c, ()), e, loc=loc))
        self.facts.define(c, e)
        frame.env[name] = scalar(c)

    def write_ref(self, ref, value, loc, accumulate=False, rhs=None, opname=None):
        """Write ``value`` into a view; ``x += y`` on arrays is an in-place accumulation."""
        indexing.check_writable(self, ref.container, loc)
        if opname == "add" and rhs is not None:
            e = self.to_expr(rhs, loc)
            indexing.check_value_dtype(e, ref.container, loc)
            _check_broadcast(e.shape, ref.shape, loc)
            self.emit(Assign(ref, e, accumulate=True, loc=loc))
            return
        e = self.to_expr(value, loc)
        indexing.check_value_dtype(e, ref.container, loc)
        _check_broadcast(e.shape, ref.shape, loc)
        self.emit(Assign(ref, e, accumulate=accumulate, loc=loc))

    # ----------------------------------------------------------- control flow

    def stmt_If(self, node, frame):
        loc = frame.loc(node)
        cond = self.truth(self.eval(node.test, frame), loc)
        if not isinstance(cond, Expr):
            return self.block(node.body if cond else node.orelse, frame)
        test, cond = cond, self.hold_scalar(cond, "cond", loc)
        env0, owned0 = dict(frame.env), dict(frame.owned)
        then, esc1 = self.under_facts("then", node, frame, lambda: self.facts.enter_branch(test, True),
                                      lambda: self.branch(frame, loc, self.block, node.body, frame))
        env1, owned1 = frame.env, frame.owned
        frame.env, frame.owned = dict(env0), dict(owned0)
        orelse, esc2 = self.under_facts("else", node, frame, lambda: self.facts.enter_branch(test, False),
                                        lambda: self.branch(frame, loc, self.block, node.orelse, frame))
        env2, owned2 = frame.env, frame.owned
        self.join_branches(frame, env0, (env1, owned1, then, esc1), (env2, owned2, orelse, esc2), loc)
        self.emit(If(cond, then, orelse, loc))
        flags = _union(esc1.flags, esc2.flags)
        if esc1.dead and esc2.dead:
            return Escape(flags, dead=True)
        return Escape(flags)

    def branch(self, frame, loc, fn, *args):
        """``collect(fn, *args)`` for code on a path taken at run time."""
        with self.rt_scope("branch", frame, loc):
            return self.collect(fn, *args)

    def join_branches(self, frame, env0, a, b, loc):
        """Bind the names after two branches (``merge``), from ``env0`` before them."""
        if self.reads_log is not None and self.reads_log[0] is frame:
            # a branch that leaves a name alone passes its value on: in a loop, that is a read
            # (``f = x * 2`` only when t == 3 keeps the value of the passes before)
            for name, v in env0.items():
                kept = [e.get(name) is v for e in (a[0], b[0])]
                if any(kept) and not all(kept):
                    self.reads_log[1].setdefault(name, v)
        frame.env, frame.owned, joined = self.merge(frame, a, b, loc)
        for name, m, values in joined:
            # bound to (a view of) an array another name holds on one path only: NumPy's name
            # shares that memory on that path, the joined copy does not
            # (``t3, t1 = t1, t3`` in a loop); so does one bound on some path to a copy that itself
            # stands for another array's memory: the joined copy stands for it too
            for e in values:
                if not (isinstance(e, Read) and e.ref.container.ndim):
                    continue
                c = e.ref.container
                if indexing.held(self, c, name) or c in getattr(self, "stand_ins", {}):
                    indexing.stand_in(self, m, c, f"{name!r}, which shares another "
                                      "array's memory on one path of the branch only", loc, f"copy it where a branch binds it to another "
                                      f"array ({name} = np.copy(...)), so that it is its own array on every path")

    def hold_scalar(self, e, hint, loc):
        """A run-time scalar expression as a fresh container read (evaluated once, here)."""
        if isinstance(e, Read) and e.ref.container.ndim == 0 and e.ref.container.kind != "arg":
            return e
        return self.materialize(e, hint, loc)

    def merge(self, frame, a, b, loc):
        """Join the name bindings of two branches; differing ones meet in a shared container.
        Returns the new bindings and the names that got one: ``(name, container, branch values)``."""
        env_a, owned_a, stmts_a, esc_a = a
        env_b, owned_b, stmts_b, esc_b = b
        env, owned, joined = {}, {}, []
        for name in list(dict.fromkeys(list(env_a) + list(env_b))):
            va, vb = env_a.get(name), env_b.get(name)
            if esc_a.dead:
                va = vb
            if esc_b.dead:
                vb = va
            ca, cb = owned_a.get(name), owned_b.get(name)
            if same_binding(va, vb) and ca is cb:
                env[name] = va
                if ca is not None:
                    owned[name] = ca
                continue
            if pytrees.is_container(va) and pytrees.is_container(vb):
                def join(k, ea, eb, name=name):
                    ea, eb = self.to_expr(ea, loc), self.to_expr(eb, loc)
                    if len(ea.shape) != len(eb.shape):
                        raise unsupported(loc, f"name {name!r} holding arrays of different shapes in the branches",
                                          "give the variable the same shape on every path")
                    m = self.container(name, result_dtype([ea, eb], "same"), ea.shape,
                                       weak=is_weak(ea) and is_weak(eb))
                    mref = Ref(m) if m.ndim else Ref(m, ())
                    for e, stmts, esc in ((ea, stmts_a, esc_a), (eb, stmts_b, esc_b)):
                        if not esc.dead:
                            stmts.append(Assign(mref, e, loc=loc))
                    return Read(mref)
                env[name] = pytrees.merge(self, name, va, vb, loc, join)
                continue
            if va is None or vb is None:
                v = va if va is not None else vb
                if isinstance(v, Expr) and not (isinstance(v, Read) and v.ref.container.ndim == 0):
                    env[name] = v
                    continue
                if v is None or not isinstance(v, Expr):
                    env[name] = v
                    continue
            if pytrees.is_container(va) or pytrees.is_container(vb):
                raise unsupported(loc, f"name {name!r} bound to a Python container on one path and to another "
                                       "kind of value on the other", "give it the same kind of value on every path")
            ea = None if va is None else self.to_expr(va, loc)
            eb = None if vb is None else self.to_expr(vb, loc)
            ref_e = ea if ea is not None else eb
            dt = result_dtype([x for x in (ea, eb) if x is not None], "same")
            if ea is not None and eb is not None and len(ea.shape) != len(eb.shape):
                raise unsupported(loc, f"name {name!r} bound to arrays of different shapes in the branches",
                                  "give the variable the same shape on every path")
            m = self.container(name, dt, ref_e.shape, weak=all(is_weak(e) for e in (ea, eb) if e is not None))
            mref = Ref(m) if m.ndim else Ref(m, ())
            if ea is not None and not esc_a.dead:
                stmts_a.append(Assign(mref, ea, loc=loc))
            if eb is not None and not esc_b.dead:
                stmts_b.append(Assign(mref, eb, loc=loc))
            env[name] = Read(mref)
            if m.ndim == 0:
                owned[name] = m
            else:
                joined.append((name, m, [e for e, esc in ((ea, esc_a), (eb, esc_b)) if e is not None and not esc.dead]))
        return env, owned, joined

    def stmt_Return(self, node, frame):
        loc = frame.loc(node)
        value = self.eval(node.value, frame) if node.value is not None else None
        if all(c.unrolled for c in frame.loops) and self.out_depth_is_frame_top(frame):
            frame.ret_value, frame.ret_node = value, node
            return Escape(dead=True)
        if value is None:
            raise unsupported(loc, "bare return under run-time control flow", "return a value")
        self.emit(self.store_result(frame, value, node))
        if frame.ret_flag is None:
            frame.ret_flag = self.flag("returned")
            frame_top = self.frame_body_start[frame]
            frame_top.insert(0, Assign(Ref(frame.ret_flag, ()), Const(False), loc=loc))
        self.emit(Assign(Ref(frame.ret_flag, ()), Const(True), loc=loc))
        for ctx in frame.loops:
            if ctx.brk is None:
                ctx.brk = self.flag("brk")
            self.emit(Assign(Ref(ctx.brk, ()), Const(True), loc=loc))
        return Escape([frame.ret_flag], dead=True)

    def out_depth_is_frame_top(self, frame):
        return self.out[-1] is self.frame_body_start.get(frame)

    # ----------------------------------------------------------- expressions

    def lookup(self, name, frame, node):
        if name in frame.env:
            v = frame.env[name]
            if self.reads_log is not None and self.reads_log[0] is frame:
                self.reads_log[1].setdefault(name, v)
            indexing.check_fresh(self, name, v, frame.loc(node))
            if isinstance(v, Read):
                for seen in self.loop_reads:
                    seen.add(v.ref.container)
            return v
        found, v = closures.closure_lookup(self, name, frame)
        if found:
            indexing.check_fresh(self, name, v, frame.loc(node))
            if isinstance(v, Read):
                for seen in self.loop_reads:
                    seen.add(v.ref.container)
            return v
        if name in frame.globals:
            v = frame.globals[name]
            self.global_reads.append((frame.sources.get(name, frame.fn.__globals__), name, v))
            return self.outside(v)
        if hasattr(builtins, name):
            return getattr(builtins, name)
        raise FlowgradError(f"{frame.loc(node)}: name {name!r} is not defined")

    def eval(self, node, frame):
        method = getattr(self, "expr_" + type(node).__name__, None)
        if method is None:
            raise unsupported(frame.loc(node), f"{type(node).__name__} expression",
                              "rewrite with supported constructs")
        return method(node, frame)

    def expr_Constant(self, node, frame):
        return node.value

    def expr_Name(self, node, frame):
        return self.lookup(node.id, frame, node)

    def expr_Tuple(self, node, frame):
        return made(self, tuple(self.elements(node.elts, frame)))

    def expr_List(self, node, frame):
        # a list, not a tuple: ``A[[0, 2]]`` picks rows, ``A[(0, 2)]`` one element
        return made(self, self.elements(node.elts, frame))

    def elements(self, nodes, frame):
        """The values of a display's or a call's items, ``*xs`` unpacked, each as a container holds it."""
        out = []
        for e in nodes:
            if isinstance(e, ast.Starred):
                out += pybuiltins.sequence(self, self.eval(e.value, frame), frame.loc(e), "unpacking with *")
            else:
                out.append(freeze(self, self.eval(e, frame), frame.loc(e)))
        return out

    def expr_Dict(self, node, frame):
        out = {}
        for k, v in zip(node.keys, node.values):
            if k is None:                    # {**other, ...}
                other = self.eval(v, frame)
                if not isinstance(other, dict):
                    raise unsupported(frame.loc(v), "** of a value that is not a dict", "unpack a dict")
                out.update(other)
                continue
            key = self.eval(k, frame)
            if isinstance(key, Expr):
                raise unsupported(frame.loc(k), "a dict key known only at run time",
                                  "use keys known when the function is captured")
            out[key] = freeze(self, self.eval(v, frame), frame.loc(v))
        return made(self, out)

    def expr_Lambda(self, node, frame):
        return closures.define(self, node, frame)

    def expr_Attribute(self, node, frame):
        obj = self.eval(node.value, frame)
        handled, value = objects.get_attr(self, obj, node.attr, frame.loc(node))
        if handled:
            return value
        return get_attribute(self, obj, node.attr, frame.loc(node))

    def expr_Subscript(self, node, frame):
        base = self.eval(node.value, frame)
        index = self.eval_index(node.slice, frame)
        if isinstance(base, (tuple, list, str, dict, ObjectValue)):
            loc = frame.loc(node)
            if isinstance(base, ObjectValue):
                raise unsupported(loc, f"indexing a {base.cls.__name__} object", "index arrays, lists or dicts")
            if isinstance(index, Expr):
                self.index_by_loop(index, loc)
            if isinstance(base, dict) and index not in base:
                raise FlowgradError(f"{loc}: KeyError: {index!r}")
            value = base[index]
            if isinstance(index, slice) and isinstance(base, (list, tuple)):
                return made(self, value)
            return value if self.pyobjs.get(base) is not None else self.outside(value)
        return indexing.getitem(self, base, index, frame.loc(node))

    def index_by_loop(self, index, loc):
        """A Python list indexed by a value known only at run time: where it is a loop's
        variable and the loop's trip count is known, capture again with the loop unrolled."""
        reads = {r.ref.container for r in iter_reads(index)}
        for scope in reversed(self.rt_scopes):
            if scope.kind == "for" and reads & set(scope.vars):
                pyvalues.unroll(self, scope, loc, "indexing a Python list or tuple with a loop's variable")
        raise unsupported(loc, "indexing a Python list, tuple or dict with a value known only at run time",
                          "use an array (np.stack the items), or index with a value known at capture")

    def eval_index(self, node, frame):
        if isinstance(node, ast.Tuple):
            return tuple(self.eval_index(e, frame) for e in node.elts)
        if isinstance(node, ast.Slice):
            return slice(*(None if p is None else self.eval(p, frame) for p in (node.lower, node.upper, node.step)))
        return self.eval(node, frame)

    def expr_BinOp(self, node, frame):
        loc = frame.loc(node)
        (a,), b = self.then([self.eval(node.left, frame)], lambda: self.eval(node.right, frame))
        if isinstance(node.op, ast.MatMult):
            return call_function(self, np.matmul, [a, b], {}, loc)
        opname = _BINOPS.get(type(node.op))
        if opname is None:
            raise unsupported(loc, f"operator {type(node.op).__name__}", "use arithmetic operators")
        return self.binop(opname, a, b, loc)

    def binop(self, opname, a, b, loc):
        if not isinstance(a, Expr) and not isinstance(b, Expr) and not isinstance(a, np.ndarray) \
                and not isinstance(b, np.ndarray):
            out = PY_OPERATORS[opname](a, b)
            return made(self, out) if isinstance(out, (tuple, list)) else out
        if opname == "multiply" and any(isinstance(x, (list, tuple)) and isinstance(y, Expr) and y.shape == ()
                                        and y.dtype.kind in "iu" for x, y in ((a, b), (b, a))):
            raise unsupported(loc, "repeating a Python list a number of times known only at run time",
                              "make an array (np.zeros(n), np.full(n, value))")
        ea, eb = self.to_expr(a, loc), self.to_expr(b, loc)
        if opname in _BOOL_BITWISE:
            if ea.dtype != BOOL or eb.dtype != BOOL:
                raise unsupported(loc, f"{opname.replace('_', ' ')} of {ea.dtype} and {eb.dtype} values",
                                  "flowgrad's &, | and ^ combine boolean masks; compare first ((x > 0) & (y < 1))")
            return op(_BOOL_BITWISE[opname], ea, eb)
        if opname == "power" and isinstance(eb, Const) and eb.value == 2 and not ea.dtype.kind == "b":
            return op("multiply", ea, ea) if isinstance(ea, Read) else op("square", ea)
        int_power = opname == "power" and ea.shape == () == eb.shape and ea.dtype.kind in "iu" \
            and eb.dtype.kind in "iu"
        if int_power and (const_value(eb) or 0) < 0:
            ea = op("float64", ea)                    # Python's n ** -1 is a float
        elif int_power and not self.facts.nonneg(eb):
            # Python's int ** int is a float where the exponent is negative; flowgrad's is an int,
            # so a negative exponent raises (as NumPy's integer power does) rather than round to 0
            self.emit(Call("check_sizes", [eb, op("maximum", eb, 0)], [self.container("exponent_ok", BOOL, ())],
                           {"message": f"{loc}: integer ** negative integer ({{}}): flowgrad's integer power "
                                       "is an integer; write float(n) ** m for Python's float result"}, loc=loc))
        return op(opname, ea, eb)

    def expr_UnaryOp(self, node, frame):
        v = self.eval(node.operand, frame)
        if isinstance(node.op, ast.Not):
            t = self.truth(v, frame.loc(node))
            return op("logical_not", t) if isinstance(t, Expr) else (not t)
        if isinstance(node.op, ast.USub):
            return -v if not isinstance(v, Expr) else op("negative", v)
        if isinstance(node.op, ast.UAdd):      # +x of an array is a new array
            return self.materialize(v, "positive", frame.loc(node)) if isinstance(v, Read) and v.shape else v
        if not isinstance(v, Expr):
            return ~v
        if v.dtype != BOOL:
            raise unsupported(frame.loc(node), f"bitwise invert of {v.dtype} values",
                              "~ inverts boolean masks; use np.logical_not or -x - 1")
        return op("logical_not", v)


class _Contents:
    """A mutable container from outside the function, whose contents a capture read."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    @staticmethod
    def snapshot(obj):
        return tuple(obj.items()) if isinstance(obj, dict) else tuple(obj)

    def get(self, name, default=None):
        return self.snapshot(self.obj)


def _check_not_outside(base, target, loc):
    if isinstance(base, np.ndarray):
        raise unsupported(loc, f"assignment into {_call_name(target.value)}, an array from outside the captured "
                               "function (a global, or an attribute of an object)",
                          "flowgrad does not change the caller's arrays: copy it first (a = np.copy(...)) and "
                          "change the copy, or pass the array in as an argument")


def _own_copy(v, owned):
    """Whether scalar ``v`` reads a transient container no name owns (a copy made for a value)."""
    return isinstance(v, Read) and v.ref.container.ndim == 0 and v.ref.container.kind == "transient" and \
        v.ref.container not in owned


def _computed(v):
    """Whether ``v`` is a value computed from what it reads (an expression, an element read from
    an array), not an array object itself (a Read of a view, which NumPy shares)."""
    return isinstance(v, Expr) and not isinstance(v, Const) and not (isinstance(v, Read) and v.shape)


def _union(a, b):
    out = list(a)
    for f in b:
        if all(f is not g for g in out):
            out.append(f)
    return out


def _check_broadcast(src, dst, loc):
    if len(src) > len(dst):
        raise FlowgradError(f"{loc}: cannot assign a value of rank {len(src)} into a view of rank {len(dst)}")
    try:
        out = broadcast_shapes(src, dst)
    except ValueError as exc:
        raise FlowgradError(f"{loc}: {exc}") from None
    for a, b in zip(out, dst):
        if const_value(a) is not None and const_value(b) is not None and const_value(a) != const_value(b):
            raise FlowgradError(f"{loc}: cannot broadcast a value into a view of shape "
                                f"{tuple(const_value(d) for d in dst)}")


def _data_dtype(dt, name):
    """``dt`` when flowgrad computes in it (bool, integers, float32, float64, complex64, complex128),
    else an InputError."""
    if dt.kind in "biu" or dt in (np.float32, np.float64, np.complex64, np.complex128):
        return dt
    raise InputError(f"argument {name!r} has dtype {dt}, which flowgrad does not compute in: convert it "
                     f"(np.asarray({name}, dtype=np.float64), or float32, complex128)")


_BINOPS = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide",
           ast.FloorDiv: "floor_divide", ast.Mod: "mod", ast.Pow: "power",
           ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor"}
# ``&``, ``|``, ``^`` of boolean arrays (masks) are their logical operations
_BOOL_BITWISE = {"bitwise_and": "logical_and", "bitwise_or": "logical_or", "bitwise_xor": "not_equal"}


def capture(fn, args, object_args=()) -> Captured:
    """Capture ``fn`` for the call ``fn(*args)`` (``object_args``: the arguments whose plain
    objects are pytrees, those ``wrt`` names)."""
    hints = {}
    for _ in range(64):
        fe = Frontend(fn, hints, object_args)
        fe.frame_body_start = {}
        try:
            params, body, result = fe.capture_top(args)
            break
        except Restart:
            continue
    else:
        raise FlowgradError(f"could not settle the types of the scalars in {fn.__name__}")
    const_values = [v for _, v in fe.consts.values()]
    sources = list(fe.param_sources)
    trees = {n: fe.object_args.__contains__(n) for n in fe.arg_leaves}
    signature = inspect.signature(fn)
    names = list(signature.parameters)
    positional = all(p.kind == p.POSITIONAL_OR_KEYWORD for p in signature.parameters.values())

    # without pytree arguments, the inputs are arguments picked by position (and the constants)
    plain = positional and not trees and all(k is None and n in names for n, k in sources)
    picks = [names.index(n) for n, _ in sources] if plain else None

    def inputs(call_args):
        if picks is not None and len(call_args) == len(names):
            return [call_args[j] for j in picks] + const_values
        if positional and len(call_args) == len(names):
            arguments = dict(zip(names, call_args))     # what binding gives, without its cost per call
        else:
            bound = signature.bind(*call_args)
            bound.apply_defaults()
            arguments = bound.arguments
        leaves = {n: pytree.flatten(arguments[n], objects=objs)[0] for n, objs in trees.items()}
        return [arguments[n] if k is None else leaves[n][k] for n, k in sources] + const_values

    name = "".join(ch for ch in fn.__name__ if ch.isalnum() or ch == "_") or "fn"
    if name in _RESERVED:             # ``lambda``: the generated function needs a name Python allows
        name += "_fn"
    cap = Captured(name, params, body, result, fe.containers, fe.namer, fe.arg_containers, inputs)
    cap.arg_leaves = fe.arg_leaves
    cap.result_layout = fe.result_layout
    cap.global_reads = list({(id(w), n): (w, n, v) for w, n, v in fe.global_reads}.values())
    return cap
