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
import inspect
import textwrap
import types

import numpy as np

from ..errors import FlowgradError, InputError, Loc, UnsupportedError, unsupported
from ..ir.core import (BOOL, F64, I64, Assign, Call, Const, Container, Expr, If, Op, Read, Ref, Take, broadcast_shapes,
                       const_value, is_weak, iter_reads, op, result_dtype, scalar, stmt_writes, substitute)
from ..ir.ranges import Facts
from . import Captured, indexing
from .loops import Escape, LoopStatements, Restart, _same_binding
from .numpy_api import call_function, call_method, get_attribute

_UNSUPPORTED_NODES = {
    ast.ListComp: ("list comprehension", "write an explicit for loop that fills a preallocated array"),
    ast.SetComp: ("set comprehension", "use arrays and loops"),
    ast.DictComp: ("dict comprehension", "use arrays and loops"),
    ast.GeneratorExp: ("generator expression", "write an explicit for loop"),
    ast.Lambda: ("lambda", "define a module-level helper function with def"),
    ast.Try: ("try statement", "move error handling outside the differentiated function"),
    ast.With: ("with statement", "move context managers outside the differentiated function"),
    ast.ClassDef: ("class definition", "define classes outside the differentiated function"),
    ast.Global: ("global statement", "pass the value as an argument and return results"),
    ast.Nonlocal: ("nonlocal statement", "pass the value as an argument and return results"),
    ast.Yield: ("yield", "return arrays instead of generating values"),
    ast.YieldFrom: ("yield", "return arrays instead of generating values"),
    ast.Await: ("await", "call flowgrad on synchronous code"),
    ast.AsyncFunctionDef: ("async function", "call flowgrad on synchronous code"),
    ast.Raise: ("raise statement", "check inputs before calling the differentiated function"),
    ast.Import: ("import statement", "import modules at module level"),
    ast.ImportFrom: ("import statement", "import modules at module level"),
    ast.Delete: ("del statement", "let names go out of scope instead"),
    ast.JoinedStr: ("f-string", "format strings outside the differentiated function"),
    ast.Starred: ("starred expression", "pass arguments explicitly"),
    ast.FunctionDef: ("nested function definition", "define helper functions at module level"),
}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED_NODES[ast.TryStar] = _UNSUPPORTED_NODES[ast.Try]


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


class Frame:
    """One function activation being inlined: its names, its return state, its loops."""

    def __init__(self, fn, filename, first_line, globals_):
        self.fn = fn
        self.filename, self.first_line = filename, first_line
        self.globals = globals_
        self.env = {}
        self.owned = {}          # name -> scalar container owned by the name
        self.loops = []
        self.ret = None          # result container, for returns under runtime control flow
        self.ret_flag = None     # bool container: "has returned"
        self.ret_value = None    # the value of an unconditional top-level return
        self.ret_node = None     # that return statement
        self.sources = {}        # closure name -> its cell (other outside names: fn.__globals__)

    def loc(self, node):
        return Loc(self.filename, self.first_line + getattr(node, "lineno", 1) - 1)


class Frontend(LoopStatements):
    """Captures one function for one call signature."""

    def __init__(self, fn, hints=None):
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
        if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
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
            if value.dtype.kind not in "biuf":
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
        if isinstance(value, (tuple, list)):
            raise unsupported(frame.loc(fdef), "tuple result",
                              "return one array or scalar (combine results, e.g. a weighted sum)")
        where = frame.loc(frame.ret_node or fdef)
        e = self.to_expr(value, where)
        res = self.container("result", e.dtype, e.shape)
        body.append(Assign(Ref(res) if res.ndim else Ref(res, ()), e, loc=where))
        params = self.params + [c for c, _ in self.consts.values()]
        return params, body, res

    def param(self, name, value, frame):
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        python = not isinstance(value, np.generic)          # a Python scalar: weak (NEP 50)
        if isinstance(value, (int, np.integer)):
            c = self.container(name, I64, (), "arg", weak=python)
        elif isinstance(value, (float, np.floating)):
            c = self.container(name, _data_dtype(np.dtype(type(value)) if isinstance(value, np.floating) else F64,
                                                 name), (), "arg", weak=python)
        elif isinstance(value, np.ndarray):
            c = self.container(name, _data_dtype(value.dtype, name), value.shape, "arg")
            self.params.append(c)
            self.arg_containers[name] = c
            return Read(Ref(c))
        else:
            return value     # a Python object: part of the signature, folded at capture
        self.params.append(c)
        self.arg_containers[name] = c
        frame.owned[name] = c
        return scalar(c)

    def new_frame(self, fn):
        try:
            lines, first = inspect.getsourcelines(fn)
            filename = inspect.getsourcefile(fn) or "<unknown>"
        except (OSError, TypeError):
            raise UnsupportedError(f"unsupported function {getattr(fn, '__name__', fn)!r}: its Python source "
                                   "is not available (flowgrad captures functions from source)") from None
        fdef = _function_node(fn, lines, first)
        if fdef is None:
            raise UnsupportedError(f"{Loc(filename, first)}: unsupported callable {fn.__name__!r}: "
                                   "define it with def (or as a single lambda on its line)")
        globals_ = dict(fn.__globals__)
        sources = {}                      # where each outside name lives, for ``global_reads``
        if fn.__closure__:
            for name, cell in zip(fn.__code__.co_freevars, fn.__closure__):
                globals_[name] = cell.cell_contents
                sources[name] = cell
        frame = Frame(fn, filename, first, globals_)
        frame.sources = sources
        for node in ast.walk(fdef):
            if node is not fdef and type(node) in _UNSUPPORTED_NODES:
                what, hint = _UNSUPPORTED_NODES[type(node)]
                raise unsupported(frame.loc(node), what, hint)
        return frame, fdef

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
                cond = self.none_set(esc.flags)
                loc = frame.loc(rest[0])
                env0, owned0 = dict(frame.env), dict(frame.owned)
                guarded = self.facts.enter_opaque()          # may not run on every pass
                try:
                    inner, esc2 = self.collect(self.block, rest, frame)
                finally:
                    self.facts.leave(guarded)
                # like an ``if`` without ``else``: names the rest rebinds meet their earlier values
                skipped = []
                self.join_branches(frame, env0, (frame.env, frame.owned, inner, esc2),
                                   (dict(env0), dict(owned0), skipped, Escape()), loc)
                self.emit(If(cond, inner, skipped, loc=loc))
                return Escape(_union(esc.flags, esc2.flags))
        return Escape()

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
        except (ValueError, TypeError, IndexError, KeyError, AttributeError, NotImplementedError) as exc:
            raise FlowgradError(f"{loc}: {exc}") from exc

    def stmt_Pass(self, node, frame):
        return None

    def stmt_Expr(self, node, frame):
        if isinstance(node.value, ast.Constant):
            return None  # docstring
        self.eval(node.value, frame)
        return None

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
        rhs = self.eval(node.value, frame)
        target = node.target
        if isinstance(target, ast.Name):
            cur = self.lookup(target.id, frame, target)
            if isinstance(cur, Read) and cur.ref.container.ndim and cur.shape != ():
                self.write_ref(cur.ref, self.binop(opname, cur, rhs, loc), loc, accumulate=False,
                               rhs=rhs, opname=opname)
                return
            self.assign(target, self.binop(opname, cur, rhs, loc), frame, node)
            return
        if isinstance(target, ast.Subscript):
            base = self.eval(target.value, frame)
            index = self.eval_index(target.slice, frame)
            indexing.augmented_setitem(self, base, index, opname, rhs, loc)
            return
        if isinstance(target, ast.Attribute):
            raise unsupported(loc, "assignment to an attribute", "assign to arrays or names")
        raise unsupported(loc, "augmented assignment target", "assign to a name or a subscript")

    def assign(self, target, value, frame, node):
        loc = frame.loc(node)
        if isinstance(target, ast.Name):
            self.bind(target.id, value, frame, loc)
        elif isinstance(target, (ast.Tuple, ast.List)):
            items = self.unpack(value, len(target.elts), loc)
            # Python evaluates the whole right side first: freeze values an earlier target may change
            items = [self.materialize(v, "tmp", loc) if isinstance(v, Expr) and
                     (v.shape == () or isinstance(v, Op)) else v for v in items]
            for t, v in zip(target.elts, items):
                self.assign(t, v, frame, node)
        elif isinstance(target, ast.Subscript):
            base = self.eval(target.value, frame)
            index = self.eval_index(target.slice, frame)
            indexing.setitem(self, base, index, value, loc)
        elif isinstance(target, ast.Attribute):
            raise unsupported(loc, "assignment to an attribute", "assign to arrays or names")
        else:
            raise unsupported(loc, f"assignment target {type(target).__name__}", "assign to names or subscripts")

    def unpack(self, value, n, loc):
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
        if owned is not None and isinstance(value, (bool, int, float, np.number, np.bool_)):
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
        self.keep_views_of(c, loc)
        self.emit(Assign(Ref(c, ()), e, loc=loc))
        self.facts.define(c, e)
        frame.env[name] = scalar(c)

    def keep_views_of(self, c, loc):
        """Before scalar ``c`` is written: names bound to views whose bounds read it
        (``y = x[k:k + 3]; k = k + 2``), or to arrays whose size does, keep the value it has
        now, as in Python, where the view or array was made with it. ``c`` is copied into a
        scalar of its own that those bindings read instead (an array of such a size is copied
        into one sized by it)."""
        users = [(f, name, v) for f in self.frames for name, v in f.env.items()
                 if isinstance(v, Read) and c in _reads_deep(v)]
        if not users:
            return
        was = self.container(c.name + "_was", c.dtype, ())
        self.emit(Assign(Ref(was, ()), scalar(c), loc=loc))
        copies = {}
        for f, name, v in users:
            source = v.ref.container
            if any(c in {r.ref.container for r in iter_reads(d)} for d in source.shape):
                if source not in copies:          # its size reads c: a copy sized by the kept value
                    copy = self.container(source.name, source.dtype,
                                          tuple(substitute(d, c, scalar(was)) for d in source.shape))
                    self.emit(Assign(Ref(copy), Read(Ref(source)), loc=loc))
                    copies[source] = copy
                v = Read(Ref(copies[source], v.ref.items, v.ref.perm))
            f.env[name] = substitute(v, c, scalar(was))

    def write_ref(self, ref, value, loc, accumulate=False, rhs=None, opname=None):
        """Write ``value`` into a view; ``x += y`` on arrays is an in-place accumulation."""
        indexing.check_writable(self, ref.container, loc)
        if opname == "add" and rhs is not None:
            e = self.to_expr(rhs, loc)
            _check_broadcast(e.shape, ref.shape, loc)
            self.emit(Assign(ref, e, accumulate=True, loc=loc))
            return
        e = self.to_expr(value, loc)
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
                                      lambda: self.collect(self.block, node.body, frame))
        env1, owned1 = frame.env, frame.owned
        frame.env, frame.owned = dict(env0), dict(owned0)
        orelse, esc2 = self.under_facts("else", node, frame, lambda: self.facts.enter_branch(test, False),
                                        lambda: self.collect(self.block, node.orelse, frame))
        env2, owned2 = frame.env, frame.owned
        self.join_branches(frame, env0, (env1, owned1, then, esc1), (env2, owned2, orelse, esc2), loc)
        self.emit(If(cond, then, orelse, loc))
        flags = _union(esc1.flags, esc2.flags)
        if esc1.dead and esc2.dead:
            return Escape(flags, dead=True)
        return Escape(flags)

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
            for e in values:
                if isinstance(e, Read) and e.ref.container.ndim and indexing.held(self, e.ref.container, name):
                    indexing.stand_in(self, m, e.ref.container, f"{name!r}, which shares another "
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
            if _same_binding(va, vb) and ca is cb:
                env[name] = va
                if ca is not None:
                    owned[name] = ca
                continue
            if va is None or vb is None:
                v = va if va is not None else vb
                if isinstance(v, Expr) and not (isinstance(v, Read) and v.ref.container.ndim == 0):
                    env[name] = v
                    continue
                if v is None or not isinstance(v, Expr):
                    env[name] = v
                    continue
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
        if not frame.loops and self.out_depth_is_frame_top(frame):
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
        if name in frame.globals:
            v = frame.globals[name]
            self.global_reads.append((frame.sources.get(name, frame.fn.__globals__), name, v))
            return v
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
        return tuple(self.eval(e, frame) for e in node.elts)

    def expr_List(self, node, frame):
        # a list, not a tuple: ``A[[0, 2]]`` picks rows, ``A[(0, 2)]`` one element
        return [self.eval(e, frame) for e in node.elts]

    def expr_Attribute(self, node, frame):
        return get_attribute(self, self.eval(node.value, frame), node.attr, frame.loc(node))

    def expr_Subscript(self, node, frame):
        base = self.eval(node.value, frame)
        index = self.eval_index(node.slice, frame)
        if isinstance(base, (tuple, list, str, dict)):
            if isinstance(index, Expr):
                raise unsupported(frame.loc(node), "indexing a Python sequence with a run-time value",
                                  "use arrays")
            return base[index]
        return indexing.getitem(self, base, index, frame.loc(node))

    def eval_index(self, node, frame):
        if isinstance(node, ast.Tuple):
            return tuple(self.eval_index(e, frame) for e in node.elts)
        if isinstance(node, ast.Slice):
            return slice(*(None if p is None else self.eval(p, frame) for p in (node.lower, node.upper, node.step)))
        return self.eval(node, frame)

    def expr_BinOp(self, node, frame):
        loc = frame.loc(node)
        a, b = self.eval(node.left, frame), self.eval(node.right, frame)
        if isinstance(node.op, ast.MatMult):
            return call_function(self, np.matmul, [a, b], {}, loc)
        opname = _BINOPS.get(type(node.op))
        if opname is None:
            raise unsupported(loc, f"operator {type(node.op).__name__}", "use arithmetic operators")
        return self.binop(opname, a, b, loc)

    def binop(self, opname, a, b, loc):
        if not isinstance(a, Expr) and not isinstance(b, Expr) and not isinstance(a, np.ndarray) \
                and not isinstance(b, np.ndarray):
            if isinstance(a, (tuple, list)) or isinstance(b, (tuple, list)) or isinstance(a, str):
                return _PY_BINOPS[opname](a, b)
            return _PY_BINOPS[opname](a, b)
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
        if isinstance(node.op, ast.UAdd):
            return v
        if not isinstance(v, Expr):
            return ~v
        if v.dtype != BOOL:
            raise unsupported(frame.loc(node), f"bitwise invert of {v.dtype} values",
                              "~ inverts boolean masks; use np.logical_not or -x - 1")
        return op("logical_not", v)

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
            right = self.eval(right_node, frame)
            name = _CMPOPS.get(type(cop))
            if name is None:
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
                r = _PY_BINOPS[name](left, right)
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
                                          lambda f=fn: self.collect(lambda: self.to_expr(f(), loc))))
        (s1, a), (s2, b) = sides
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

    def expr_Call(self, node, frame):
        loc = frame.loc(node)
        for a in node.args:
            if isinstance(a, ast.Starred):
                raise unsupported(frame.loc(a), "starred argument", "pass arguments explicitly")
        if isinstance(node.func, ast.Attribute):
            obj = self.eval(node.func.value, frame)
            args = [self.eval(a, frame) for a in node.args]
            kwargs = {k.arg: self.eval(k.value, frame) for k in node.keywords}
            if isinstance(obj, Expr):
                return call_method(self, obj, node.func.attr, args, kwargs, loc)
            fn = get_attribute(self, obj, node.func.attr, loc)
        else:
            fn = self.eval(node.func, frame)
            args = [self.eval(a, frame) for a in node.args]
            kwargs = {k.arg: self.eval(k.value, frame) for k in node.keywords}
        if any(k is None for k in kwargs):
            raise unsupported(loc, "**kwargs in a call", "pass keyword arguments explicitly")
        return self.call(fn, args, kwargs, loc, _call_name(node.func))

    def call(self, fn, args, kwargs, loc, name):
        if isinstance(fn, types.FunctionType) and not _is_library(fn):
            return self.inline(fn, args, kwargs, loc)
        if hasattr(fn, "_flowgrad_inline"):     # a program object (from_fortran) lowers itself here
            return fn._flowgrad_inline(self, args, kwargs, loc)
        return call_function(self, fn, args, kwargs, loc, name)

    def inline(self, fn, args, kwargs, loc):
        """Compile a call to a plain Python function in place (its body is inlined)."""
        self.depth += 1
        if self.depth > 32:
            raise unsupported(loc, f"recursion in {fn.__name__}", "write the recursion as a loop")
        frame, fdef = self.new_frame(fn)
        try:
            bound = inspect.signature(fn).bind(*args, **kwargs)
        except TypeError as exc:
            raise FlowgradError(f"{loc}: calling {fn.__name__}: {exc}") from None
        bound.apply_defaults()
        for name, value in bound.arguments.items():
            if isinstance(value, Expr) and value.shape == ():
                c = self.container(name, value.dtype, ())
                self.emit(Assign(Ref(c, ()), value, loc=loc))
                frame.owned[name] = c
                value = scalar(c)
            elif isinstance(value, Op):
                value = self.materialize(value, name, loc)
            frame.env[name] = value
        self.frames.append(frame)
        saved_log = self.reads_log
        self.reads_log = None
        try:
            body, esc = self.collect(self._frame_block, fdef, frame)
            for s in body:
                self.emit(s)
            return self.finish_frame(frame, fdef, self.out[-1])
        finally:
            self.reads_log = saved_log
            self.frames.pop()
            self.depth -= 1

    def _frame_block(self, fdef, frame):
        self.frame_body_start[frame] = self.out[-1]
        return self.block(fdef.body, frame)

    frame_body_start = None


def _function_node(fn, lines, first):
    """The FunctionDef of ``fn`` (a lambda becomes ``def lambda_fn(args): return body``)."""
    src = textwrap.dedent("".join(lines))
    if fn.__name__ != "<lambda>":
        try:
            node = ast.parse(src).body[0]
        except (SyntaxError, IndexError):
            return None
        return node if isinstance(node, ast.FunctionDef) else None
    argnames = list(fn.__code__.co_varnames[:fn.__code__.co_argcount])
    found = []
    for start in [k for k in range(len(src)) if src.startswith("lambda", k)]:
        for end in range(len(src), start, -1):
            try:
                lam = ast.parse(src[start:end], mode="eval").body
            except SyntaxError:
                continue
            if not isinstance(lam, ast.Lambda):
                continue
            line = src.count("\n", 0, start)
            if [a.arg for a in lam.args.args] == argnames and first + line == fn.__code__.co_firstlineno:
                lam.lineno += line
                found.append(lam)
            break
    if len(found) != 1:
        return None
    lam = found[0]
    ret = ast.Return(value=lam.body, lineno=lam.lineno, col_offset=0)
    fdef = ast.FunctionDef(name="lambda_fn", args=lam.args, body=[ret], decorator_list=[], returns=None,
                           type_params=[], lineno=lam.lineno, col_offset=0)
    return ast.fix_missing_locations(fdef)


def _call_name(func):
    try:
        return ast.unparse(func)
    except Exception:  # noqa: BLE001
        return "?"


def _is_library(fn):
    mod = getattr(fn, "__module__", "") or ""
    return mod.split(".")[0] in ("numpy", "scipy", "math", "builtins", "jax", "torch", "flowgrad")


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


def _picked(e):
    """Whether ``e`` is a value already, which a ``where`` may pick without computing anything."""
    return isinstance(e, Const) or isinstance(e, Read) and not _may_raise(e)


def _data_dtype(dt, name):
    """``dt`` when flowgrad computes in it (bool, integers, float32, float64), else an InputError."""
    if dt.kind in "biu" or dt in (np.float32, np.float64):
        return dt
    raise InputError(f"argument {name!r} has dtype {dt}, which flowgrad does not compute in: convert it "
                     f"(np.asarray({name}, dtype=np.float64), or float32)")


def _may_raise(e):
    """Whether evaluating ``e`` may raise (a checked index, in it or in a view it reads)."""
    if isinstance(e, Op):
        return e.name == "checked_index" or any(_may_raise(a) for a in e.args)
    if isinstance(e, Read):
        return any(_may_raise(i) for i in e.ref.index_exprs())
    return isinstance(e, Take)


def _reads_deep(e):
    """The containers an expression reads, with those its operands' sizes read."""
    out = set()
    for r in iter_reads(e):
        out.add(r.ref.container)
        for d in r.ref.container.shape:
            out |= {x.ref.container for x in iter_reads(d)}
    return out


_BINOPS = {ast.Add: "add", ast.Sub: "subtract", ast.Mult: "multiply", ast.Div: "divide",
           ast.FloorDiv: "floor_divide", ast.Mod: "mod", ast.Pow: "power",
           ast.BitAnd: "bitwise_and", ast.BitOr: "bitwise_or", ast.BitXor: "bitwise_xor"}
# ``&``, ``|``, ``^`` of boolean arrays (masks) are their logical operations
_BOOL_BITWISE = {"bitwise_and": "logical_and", "bitwise_or": "logical_or", "bitwise_xor": "not_equal"}
_CMPOPS = {ast.Lt: "less", ast.LtE: "less_equal", ast.Gt: "greater", ast.GtE: "greater_equal",
           ast.Eq: "equal", ast.NotEq: "not_equal"}
_PY_BINOPS = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b, "floor_divide": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "power": lambda a, b: a ** b, "less": lambda a, b: a < b, "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b, "greater_equal": lambda a, b: a >= b,
    "equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b,
    "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b, "bitwise_xor": lambda a, b: a ^ b,
}


def capture(fn, args) -> Captured:
    """Capture ``fn`` for the call ``fn(*args)``."""
    hints = {}
    for _ in range(16):
        fe = Frontend(fn, hints)
        fe.frame_body_start = {}
        try:
            params, body, result = fe.capture_top(args)
            break
        except Restart:
            continue
    else:
        raise FlowgradError(f"could not settle the types of the scalars in {fn.__name__}")
    const_values = [v for _, v in fe.consts.values()]
    names = list(fe.arg_containers)
    signature = inspect.signature(fn)

    def inputs(call_args):
        bound = signature.bind(*call_args)
        bound.apply_defaults()
        return [bound.arguments[n] for n in names] + const_values

    name = "".join(ch for ch in fn.__name__ if ch.isalnum() or ch == "_") or "fn"
    cap = Captured(name, params, body, result, fe.containers, fe.namer, fe.arg_containers, inputs)
    cap.global_reads = list({(id(w), n): (w, n, v) for w, n, v in fe.global_reads}.values())
    return cap
