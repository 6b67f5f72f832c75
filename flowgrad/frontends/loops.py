"""The Python frontend's loops: ``for`` and ``while`` statements, ``break`` and ``continue``.

A loop stays a loop in the IR. Its body is captured once, so every pass must run the same
code: a name the body reads and then rebinds is loop-carried, its new value copied back into
the storage it had on entry (``reconcile``); a name rebound without being read keeps its
earlier value when the loop makes no pass (``keep_if_no_pass``). What the range facts of
``ir.ranges`` know inside the body (the loop variable's range, that the body runs at all)
holds only if the body writes nothing they read; where it does, capture restarts without
them (``under_facts``).
"""
from __future__ import annotations

import ast
import builtins

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import (BOOL, CASTS, I64, Assign, Call, Const, Expr, For, If, Read, Ref, While, apart, const_value,
                       iter_reads, op, same_expr, same_ref, scalar, stmt_reads, stmt_writes, substitute, walk)
from . import indexing, pytrees, pyvalues
from .control import Escape, LoopCtx, Restart, Scope, same_binding
from .pybuiltins import FUNCTIONS as BUILTINS, sequence


class LoopStatements:
    """The frontend's loop statements (mixed into ``python.Frontend``)."""

    def loop_depth(self):
        """How many loops enclose the code being captured, across inlined calls."""
        return sum(len(f.loops) for f in self.frames)

    def stmt_For(self, node, frame):
        loc = frame.loc(node)
        if node.orelse:
            raise unsupported(loc, "for-else", "use a flag variable")
        key = (frame.fn, node.lineno, node.col_offset)
        plan = self.loop_plan(node.iter, frame, loc)
        if plan[0] == "items":
            return self.for_sequence(node, frame, plan[1], loc)
        if ("unroll",) + key in self.hints:        # its body grows a Python list: one pass at a time
            return self.for_sequence(node, frame, _passes(plan), loc)
        if plan[0] == "range":
            _, start, stop, step, reverse = plan
            element = None
        else:
            _, length, element = plan
            start, stop, step, reverse = 0, length, 1, False
        if element is None and not isinstance(node.target, ast.Name):
            raise unsupported(loc, "unpacking an integer of range() in a for statement", "loop over range(...)")
        name = node.target.id if isinstance(node.target, ast.Name) else None
        var = self.container(name if element is None else "i_" + (name or "item"), I64, ())
        prev, prev_owned = frame.env.get(name), frame.owned.get(name)
        # Python's name is not the loop's counter: where the body rebinds it, or a break leaves
        # it at the value it had then, it lives in a scalar of its own, which keeps its earlier
        # value when the loop does not run
        held = None
        if element is None and (name in _assigned_names(node.body) or _breaks(node.body)):
            held = self.container(name, I64, ())
            if _is_int_value(prev):
                self.emit(Assign(Ref(held, ()), self.to_expr(prev, loc), loc=loc))

        def body_setup():
            if held is not None:
                self.emit(Assign(Ref(held, ()), scalar(var), loc=loc))
                self.facts.define(held, scalar(var))
                frame.owned[name], frame.env[name] = held, scalar(held)
            elif element is None:
                self.bind_loop_var(name, var, frame)
            else:
                self.assign(node.target, element(scalar(var)), frame, node)
        bounds = [self.to_expr(b, loc) for b in (start, stop, step)]
        before = dict(frame.env)
        entry = []
        hoist = ("hoisted checks", frame.fn, node.lineno, node.col_offset)
        scope = dict(kind="for", key=key, trips=_trip_count(*bounds), vars=[v for v in (var, held) if v is not None],
                     step=bounds[2], reverse=reverse)

        def enter():
            entry.append(self.facts.enter_loop(var, *bounds, hoist=hoist not in self.hints))
            return entry[-1]
        stmts, esc, ctx = self.under_facts("loop", node, frame, enter,
                                           lambda: self.loop_body(node, frame, body_setup, scope=scope))
        checks = entry[-1].get("checks", []) if entry else []
        if checks:
            # moved ahead of the loop: right only if every pass runs the code that indexes, with
            # what the checks read unchanged
            written = {w.container for t in walk(stmts) for w in stmt_writes(t)}
            if ctx.brk is not None or ctx.cont is not None or esc.flags or written & entry[-1]["check_reads"]:
                self.hints[hoist] = True
                raise Restart()
        bounds = self.hoist_bounds(bounds, stmts, loc)
        self.emit_loop_prologue(ctx, loc)
        if ctx.brk is not None:
            stmts = [If(op("logical_not", scalar(ctx.brk)), stmts, loc=loc)]
        if checks:
            flag = self.container("indices_ok", BOOL, ())
            self.emit(If(entry[-1]["runs"], [Call("check_index", [x for c in checks for x in c], [flag],
                                                         loc=loc)], loc=loc))
        self.emit(For(var, *bounds, stmts, reverse=reverse, loc=loc))
        begin, end, by = bounds
        k = const_value(by)
        sign = op("sign", by) if k is None else (1 if k > 0 else -1)
        trips = op("maximum", 0, op("floor_divide", end - begin + by - sign, by))
        self.keep_if_no_pass(frame, before, op("greater", trips, 0), loc)
        if element is None and held is None:
            # after the loop the name holds the last value it took, or its earlier one
            last = begin if reverse else begin + (trips - 1) * by
            if _is_int_value(prev):
                last = op("where", op("greater", trips, 0), last, self.to_expr(prev, loc))
            frame.owned.pop(name, None)
            if prev_owned is not None:
                frame.owned[name] = prev_owned
            self.write_scalar(name, last, frame, loc)
        return Escape([frame.ret_flag] if esc.flags and frame.ret_flag in esc.flags else [])

    def keep_if_no_pass(self, frame, before, ran, loc):
        """After a loop: a name it rebinds without reading (``f = x * 2.0`` in the body) holds,
        where the loop made no pass (``ran`` false), the value it had before, as in Python."""
        fixes, joined, skipped = [], [], op("logical_not", ran)
        if const_value(skipped) is False:
            return
        for name, v0 in before.items():
            v1 = frame.env.get(name)
            if v1 is v0 or not isinstance(v1, Read) or not isinstance(v0, Expr) or name in frame.owned:
                continue
            c = v1.ref.container
            e0 = self.to_expr(v0, loc)
            if c.ndim == 0 or len(e0.shape) != len(v1.shape):
                continue
            if not all(same_expr(a, b) for a, b in zip(e0.shape, v1.shape)):
                raise unsupported(loc, f"name {name!r} bound to arrays of different shapes depending on "
                                       "whether the loop runs", "give the variable the same shape on every path")
            # names bound alike on both paths (``z = y`` before the loop and in it) stay one array
            m = next((m for a, b, m in joined if isinstance(e0, Read) and same_ref(a.ref, e0.ref)
                      and same_ref(b.ref, v1.ref)), None)
            if m is not None:
                frame.env[name] = Read(Ref(m))
                continue
            if c.kind == "transient" and v1.ref.is_whole() and not indexing.held(self, c, name):
                fixes.append(Assign(Ref(c), e0, loc=loc))
                continue
            # a view or another name's array after the loop, ``v0`` if it made no pass: held in
            # a copy, which stands for the memory NumPy's name shares on either path
            m = self.container(name, v1.dtype, v1.shape)
            joined.append((e0, v1, m))
            self.emit(If(skipped, [Assign(Ref(m), e0, loc=loc)], [Assign(Ref(m), v1, loc=loc)], loc=loc))
            frame.env[name] = Read(Ref(m))
            for e in (e0, v1):
                if isinstance(e, Read) and indexing.held(self, e.ref.container, name):
                    indexing.stand_in(self, m, e.ref.container, f"{name!r}, which shares another array's memory "
                                      "depending on whether the loop runs", loc,
                                      f"copy it where it is bound ({name} = np.copy(...))")
        if fixes:
            self.emit(If(skipped, fixes, loc=loc))

    def under_facts(self, what, node, frame, enter, trace):
        """``trace()`` (returning the statements it captured first) with the facts ``enter()``
        records about the code it captures (``what``: a loop's body, a branch of ``node``) known
        to the indexing, and the scalar definitions (``Facts.define``) valid in it. They hold only if that code writes nothing they read; where it does and
        a proof relied on them, capture starts again without them."""
        key = ("facts", what, frame.fn, node.lineno, node.col_offset)
        entry = (enter if enter is not None and key not in self.hints else self.facts.enter_opaque)()
        saved = self.facts.open_scope(loop=what == "loop")
        try:
            out = trace()
        finally:
            if entry is not None:
                self.facts.leave(entry)
        written = {w.container for t in walk(out[0]) for w in stmt_writes(t)}
        self.facts.close_scope(saved, written)
        if entry is not None and entry["used"] and written & entry["reads"]:
            self.hints[key] = True
            raise Restart()
        return out

    def bind_loop_var(self, name, var, frame):
        frame.owned[name] = var
        frame.env[name] = scalar(var)

    def loop_plan(self, it, frame, loc):
        """What a ``for`` statement iterates over: ``("range", start, stop, step, reverse)``,
        ``("elements", length, element)`` (run-time: ``element(k)`` is pass ``k``'s value, for arrays
        and ``enumerate``/``zip`` of arrays and ranges) or ``("items", values)`` (a Python sequence
        known at capture, unrolled)."""
        reverse = False
        if _is_builtin_call(self, it, frame, "reversed"):
            inner = it.args[0] if len(it.args) == 1 else None
            if inner is not None and _is_builtin_call(self, inner, frame, "range"):
                return ("range",) + self.range_bounds(inner, frame, loc).bounds + (True,)
        if _is_builtin_call(self, it, frame, "range"):
            return ("range",) + self.range_bounds(it, frame, loc).bounds + (reverse,)
        for word in ("enumerate", "zip"):
            if _is_builtin_call(self, it, frame, word) and not any(isinstance(a, ast.Starred) for a in it.args):
                parts = [self.range_bounds(a, frame, loc) if _is_builtin_call(self, a, frame, "range")
                         else self.eval(a, frame) for a in it.args]
                kwargs = {k.arg: self.eval(k.value, frame) for k in it.keywords}
                runtime = all(isinstance(p, _Range) or isinstance(p, Expr) and p.shape
                              for p in parts[:1 if word == "enumerate" else None])
                if runtime and parts:
                    return self.runtime_elements(word, parts, kwargs, loc)
                values = [p.python(loc) if isinstance(p, _Range) else p for p in parts]
                return ("items", BUILTINS[getattr(builtins, word)](self, loc, *values, **kwargs))
        seq = self.eval(it, frame)
        if isinstance(seq, Expr) and seq.shape:
            return ("elements", seq.shape[0], lambda k: indexing.getitem(self, seq, (k,), loc))
        return ("items", sequence(self, seq, loc, "a for loop"))

    def range_bounds(self, it, frame, loc):
        """The bounds of a ``range(...)`` call (Python ints or run-time scalars), as a ``_Range``."""
        if it.keywords or not 1 <= len(it.args) <= 3:
            raise unsupported(loc, "range() form", "use range(stop), range(start, stop[, step])")
        vals = [self.eval(a, frame) for a in it.args]
        for v in vals:
            if not (isinstance(v, (int, np.integer)) or isinstance(v, Expr) and v.shape == ()
                    and v.dtype.kind in "iu"):
                raise unsupported(loc, "range() with a non-integer bound", "pass integers to range")
        if len(vals) == 1:
            vals = [0] + vals
        if len(vals) == 2:
            vals.append(1)
        if const_value(self.to_expr(vals[2])) == 0:
            raise FlowgradError(f"{loc}: range() step must not be zero")
        return _Range(*vals)

    def runtime_elements(self, word, parts, kwargs, loc):
        """The ``("elements", ...)`` plan of ``enumerate``/``zip`` over arrays and ranges."""
        start = kwargs.get("start", 0)
        if word == "enumerate" and (len(parts) != 1 or isinstance(start, Expr)):
            raise unsupported(loc, "this enumerate() form", "use enumerate(x) or enumerate(x, start) with a constant")
        lengths, pickers = [], []
        for p in parts:
            if isinstance(p, _Range):
                a, b, by = (self.to_expr(x, loc) for x in p.bounds)
                lengths.append(_trips(a, b, by))
                pickers.append(lambda k, a=a, by=by: a + k * by)
            else:
                lengths.append(p.shape[0])
                pickers.append(lambda k, p=p: indexing.getitem(self, p, (k,), loc))
        length = lengths[0]
        for n in lengths[1:]:
            length = op("minimum", length, n)
        if word == "enumerate":
            return ("elements", length, lambda k: (op("add", k, start) if start else k, pickers[0](k)))
        return ("elements", length, lambda k: tuple(pick(k) for pick in pickers))

    def hoist_bounds(self, bounds, body, loc):
        """Loop bounds are evaluated once, before the loop: copy any the body may change."""
        written = {r.container for s in walk(body) for r in stmt_writes(s)}
        out = []
        for b in bounds:
            e = self.to_expr(b, loc)
            if any(r.ref.container in written for r in iter_reads(e)):
                e = self.materialize(e, "bound", loc)
            out.append(e)
        return out

    def loop_body(self, node, frame, setup, extra_tail=None, scope=None):
        """Compile a loop body, reconciling names it rebinds so every iteration runs the same code.

        A name the body reads and then rebinds (``x = f(x)``, ``u, v = v, u``) is loop-carried:
        its new value is copied back into the container it had on entry at the end of each
        iteration. Names first assigned inside the body are bound to their last value after it.
        """
        assigned = _assigned_names(node.body)
        for name in assigned:
            v = frame.env.get(name)
            if isinstance(v, (bool, int, float, complex, np.number)) and not isinstance(v, bool) or \
                    isinstance(v, (np.bool_,)) or isinstance(v, bool) and name in frame.owned:
                self.write_scalar(name, Const(v), frame, frame.loc(node))
        for attempt in range(4):
            env0, owned0 = dict(frame.env), dict(frame.owned)
            ctx = LoopCtx()
            frame.loops.append(ctx)
            outer_log = self.reads_log
            self.reads_log = (frame, {})
            self.loop_reads.append(set())
            here = Scope(self.out[-1], frame, loc=frame.loc(node), **(scope or {"kind": "while"}))
            self.rt_scopes.append(here)
            try:
                def run():
                    setup()
                    esc = self.block(node.body, frame)
                    if extra_tail is not None:
                        extra_tail()
                    return esc
                stmts, esc = self.collect(run)
            finally:
                self.rt_scopes.pop()
                frame.loops.pop()
                self.loop_reads.pop()
                log = self.reads_log[1]
                self.reads_log = outer_log
            if outer_log is not None and outer_log[0] is frame:
                for k, v in log.items():
                    if env0.get(k) is v:
                        outer_log[1].setdefault(k, v)
            fix = self.reconcile(frame, env0, owned0, log, stmts, frame.loc(node), here)
            if not fix:
                if ctx.cont is not None:
                    stmts.insert(0, Assign(Ref(ctx.cont, ()), Const(False), loc=frame.loc(node)))
                return stmts, esc, ctx
            frame.env, frame.owned = env0, owned0
            for name in fix:
                v = frame.env[name]
                if pytrees.is_container(v):
                    frame.env[name] = self.tree_storage(name, v, frame.loc(node))
                    continue
                wider = self.widen.pop(name, None)
                frame.env[name] = self.materialize(v if wider is None else op(wider.name, self.to_expr(v)), name,
                                                   frame.loc(node))
                if isinstance(v, Read) and v.ref.container.ndim and indexing.held(self, v.ref.container, name):
                    # NumPy's name shares that memory until the loop rebinds it
                    indexing.stand_in(self, frame.env[name].ref.container, v.ref.container,
                                      f"{name!r}, which shares another array's memory until the loop rebinds it",
                                      frame.loc(node), f"give it its own array before the loop ({name} = np.copy(...))")
        raise unsupported(frame.loc(node), f"loop whose variable{'s' if len(fix) > 1 else ''} "
                          f"{', '.join(map(repr, fix))} cannot be given fixed storage",
                          "give each name one kind of value across iterations: the same shape "
                          "(a scalar stays a scalar: start from np.zeros(shape) to accumulate arrays), "
                          "and a whole array rather than a view")

    def pass_stand_ins(self, carried, loc):
        """After a loop whose names take turns holding each other's arrays (``u, v = v, u``), a
        name may hold the values of one that stood for another array's memory on entry: its
        storage stands for that memory too, so writing it and then reading that array is refused
        as for the name it came from (``check_writable``)."""
        stand_ins = self.stand_ins
        reached = {v0.ref.container for _, v0, _ in carried if v0.ref.container in stand_ins}
        grew = True
        while grew:
            grew = False
            for name, v0, e1 in carried:
                c = v0.ref.container
                # (through a branch's joined copy, itself a stand-in, when the swap is on one path)
                src = next((r.ref.container for r in _reads(e1)
                            if r.ref.container in reached or r.ref.container in stand_ins), None)
                if c in reached or src is None:
                    continue
                label = name if isinstance(name, str) else name[0]
                indexing.stand_in(self, c, src, f"{label!r}, which a loop gives the values of a name "
                                  "sharing another array's memory", loc,
                                  f"give the names the loop passes between their own arrays before it "
                                  f"({label} = np.copy(...))")
                reached.add(c)
                grew = True

    def reconcile(self, frame, env0, owned0, log, stmts, loc, loop=None):
        """Copy loop-carried rebinds back to their entry containers; returns names needing storage."""
        carried, trees = [], {}
        for name, v0 in env0.items():
            v1 = frame.env.get(name)
            if same_binding(v0, v1) and owned0.get(name) is frame.owned.get(name):
                continue
            if pytrees.is_container(v0) or pytrees.is_container(v1):
                leaves = self.carry_tree(name, v0, v1, loc, loop)
                if leaves is None:
                    return [name]
                carried += leaves
                trees[name] = v0
                continue
            if name not in log or log[name] is not v0:
                continue
            if name in owned0 and owned0[name] is frame.owned.get(name):
                continue
            if not (isinstance(v0, Read) and v0.ref.is_whole() and v0.ref.container.ndim
                    and v0.ref.container.kind in ("transient", "arg")):
                return [name]
            e1 = self.to_expr(v1, loc)
            wider = np.result_type(v0.dtype, e1.dtype)
            if wider != v0.dtype and wider.name in CASTS:
                # NumPy's name takes the wider dtype from its first new value on (x = x * np.cos(t)
                # with x float32): its storage has that dtype from the start
                self.widen[name] = wider
                return [name]
            if len(e1.shape) != v0.ref.container.ndim or any(
                    const_value(a) is not None and const_value(b) is not None and const_value(a) != const_value(b)
                    for a, b in zip(e1.shape, v0.ref.container.shape)):
                raise unsupported(loc, f"array {name!r} changing shape inside a loop",
                                  "preallocate the array with its final shape and fill it in place")
            carried.append((name, v0, e1))
        if not carried:
            return []
        # a name that shared its container with another one on entry (``y = x`` before the loop)
        # gets storage of its own before the loop: writing its new values back would change both
        # (a caller's name counts too: ``u = u * 0.5`` in a helper's loop must not overwrite the
        # caller's array ``u`` was bound to)
        callers = [w for f in self.frames if f is not frame for w in f.env.values()]
        aliased = [n for n, v0, _ in carried if any(
            other != n and isinstance(w, Read) and w.ref.container is v0.ref.container
            for other, w in env0.items()) or any(
            isinstance(w, Read) and w.ref.container is v0.ref.container for w in callers)]
        if aliased:
            return aliased
        # so does one a Python container holds (hist = [u] before the loop keeps the first u)
        held = pyvalues.held_in_containers(self, {v0.ref.container for n, v0, _ in carried if isinstance(n, str)},
                                           list(trees.values()))
        aliased = [n for n, v0, _ in carried if isinstance(n, str) and v0.ref.container in held]
        if aliased:
            return aliased
        self.carried_views(carried, env0, stmts, loc, loop)
        dests = {v0.ref.container for _, v0, _ in carried}
        carried_names = {n for n, _, _ in carried}
        shared = [n for n, v0, _ in carried if v0.ref.container in getattr(self, "stand_ins", {})]
        if shared and any(w.container in dests for t in walk(stmts) for w in stmt_writes(t)):
            # written in place while the names take turns holding each other's arrays: on some
            # passes NumPy's write reaches the array a name shared on entry
            raise unsupported(loc, f"writing in place, in a loop, into arrays the loop passes between "
                                   f"{', '.join(map(repr, sorted(carried_names)))} while {shared[0]!r} shares "
                                   "another array's memory on entry (NumPy's writes reach that array on some "
                                   "passes)", f"give {shared[0]!r} its own array before the loop "
                                              f"({shared[0]} = np.copy(...))")
        if shared:
            self.pass_stand_ins(carried, loc)
        # other names still viewing a destination would see it overwritten: give them a copy
        for name, v in list(frame.env.items()):
            if name in carried_names or not isinstance(v, Read):
                continue
            if v.ref.container in dests:
                stmts.append(Assign(Ref(c := self.container(name, v.dtype, v.shape)), v, loc=loc))
                frame.env[name] = Read(Ref(c))
        if trees:
            pyvalues.copy_views_of(self, dests, list(trees.values()), stmts, loc)
        staged = []
        for name, v0, e1 in carried:
            src_containers = {r.ref.container for r in _reads(e1)}
            if src_containers & dests:
                t = self.container((name if isinstance(name, str) else name[0]) + "_next", v0.dtype,
                                   v0.ref.container.shape)
                stmts.append(Assign(Ref(t), e1, loc=loc))
                e1 = Read(Ref(t))
            staged.append((v0, e1))
        for v0, e1 in staged:
            stmts.append(Assign(v0.ref, e1, loc=loc))
        for name, v0 in trees.items():
            frame.env[name] = v0
        for name, v0, e1 in carried:
            if not isinstance(name, tuple):
                frame.env[name] = v0
            if isinstance(e1, Read) and e1.ref.is_whole() and e1.ref.container is not v0.ref.container:
                # another name bound to the new value (``z = y`` after ``y = y + 1.0``) is the same
                # array as the carried name, which is now that value's storage
                for other, w in list(frame.env.items()):
                    if other not in carried_names and isinstance(w, Read) and w.ref.container is e1.ref.container:
                        frame.env[other] = Read(Ref(v0.ref.container, w.ref.items, w.ref.perm))
        return []

    def carried_views(self, carried, env0, stmts, loc, loop):
        """Refuse a loop-carried name bound at the end of a pass to a view of an array that lives
        across passes (an argument, or one bound before the loop), where the next pass changes that
        part of the array before it last reads the name: NumPy's name is the view and shows the
        change, flowgrad's holds the values the view had at the end of the pass (``prev = x[:, j]``
        and, on the next pass, ``x[:, j - 1] = ...`` before reading ``prev``). So is writing into
        such a name before the pass binds it again (NumPy's write would reach the array). A name
        bound to another carried name's old values (``ym2 = ym1`` before ``ym1 = y[:, j]``) views
        what that one viewed a pass earlier. After the loop the name's storage stands for the
        array's memory (``indexing.stand_in``). deriche's ``ym1 = y1[:, j]``, whose next pass
        writes column ``j + 1``, passes."""
        persistent = {v.ref.container for v in env0.values() if isinstance(v, Read)}
        bound = {v0.ref.container: e1 for _, v0, e1 in carried}
        written = {w.container for t in walk(stmts) for w in stmt_writes(t)}
        for name, v0, e1 in carried:
            view, back = e1, 1
            while isinstance(view, Read) and view.ref.is_whole() and view.ref.container in bound and back < 4:
                view, back = bound[view.ref.container], back + 1     # the other name's value, a pass earlier
            store = v0.ref.container
            if not isinstance(view, Read) or view.ref.container is store:
                continue
            c = view.ref.container
            if not (c.kind == "arg" or c in persistent) or c.ndim == 0:
                continue
            label = name if isinstance(name, str) else name[0]
            what = f"{label!r}, which the loop binds to a view of {c.name!r} from one pass to the next"
            fix = f"give {label!r} a copy where the loop binds it (... = {c.name}[...].copy()), or write {c.name!r} " \
                  f"after the last read of {label!r}"
            if store in written:
                through = next(t for t in walk(stmts) if any(w.container is store for w in stmt_writes(t)))
                raise unsupported(through.loc or loc, f"writing into {what} before the next pass binds it again "
                                                      f"(NumPy's write would reach {c.name!r})", fix)
            reads = [k for k, s in enumerate(stmts) if any(r.ref.container is store for t in walk([s])
                                                           for r in stmt_reads(t))]
            last = reads[-1] if reads else -1
            upto = last + (1 if last >= 0 and not isinstance(stmts[last], Assign) else 0)
            # the pass writing what it reads up to its last read, and, where the values went
            # through another name's storage, every pass holding them there (whole passes)
            spans = [(stmts[:upto], back)] + [(stmts, k) for k in range(1, back)]
            for part, passes in spans:
                earlier = _passes_back(view.ref, loop, written, passes)
                for t in walk(part):
                    if any(w.container is c and (earlier is None or not apart(w, earlier)) for w in stmt_writes(t)):
                        raise unsupported(t.loc or loc, f"writing into the part of {c.name!r} that {label!r} views "
                                          f"while the loop carries {label!r} to a later pass that reads it (NumPy's "
                                          f"{label!r} would show the write; flowgrad carries its values)", fix)
            indexing.stand_in(self, store, c, what, loc, fix)

    def carry_tree(self, name, v0, v1, loc, loop):
        """The leaves of Python container ``name`` that a loop body rebinds (``state = step(state)``)
        as ``(key, storage, new value)`` to copy back at the end of each pass, like loop-carried
        arrays; None where its leaves need storage of their own first (``tree_storage``). A
        container of another structure, or one bound to something else, cannot be carried: the
        loop is unrolled where capture may, else refused."""
        if not (pytrees.is_container(v0) and pytrees.is_container(v1)) or \
                pytrees.structure(self, v0, loc) != pytrees.structure(self, v1, loc):
            pyvalues.unroll(self, loop, loc, f"rebinding {name!r} to Python values of different structures",
                            fix=f"give {name!r} values of one structure (the same tuple, list or dict) on every pass")
        l0, _ = pytrees.flatten_runtime(self, v0, loc)
        l1, _ = pytrees.flatten_runtime(self, v1, loc)
        out, seen = [], set()
        for k, (a, b) in enumerate(zip(l0, l1)):
            if same_binding(a, b):
                continue
            if not (isinstance(a, Read) and a.ref.is_whole() and a.ref.container in self.carry_storage) or \
                    a.ref.container in seen:
                return None
            seen.add(a.ref.container)
            e1 = self.to_expr(b, loc)
            wider = np.result_type(a.dtype, e1.dtype)
            if wider != a.dtype and wider.name in CASTS:
                self.widen[(name, k)] = wider
                return None
            if len(e1.shape) != a.ref.container.ndim or any(
                    const_value(x) is not None and const_value(y) is not None and const_value(x) != const_value(y)
                    for x, y in zip(e1.shape, a.ref.container.shape)):
                raise unsupported(loc, f"an array in {name!r} changing shape inside a loop",
                                  "preallocate the array with its final shape and fill it in place")
            out.append(((name, k), a, e1))
        return out

    def tree_storage(self, name, v, loc):
        """``v`` rebuilt before a loop with each leaf copied into storage of its own (``carry_tree``)."""
        leaves, tree = pytrees.flatten_runtime(self, v, loc)
        new = []
        for k, e in enumerate(leaves):
            wider = self.widen.pop((name, k), None)
            e = self.to_expr(e, loc)
            r = self.materialize(e if wider is None else op(wider.name, e), name, loc)
            self.carry_storage.add(r.ref.container)
            new.append(r)
        return pytrees.build_value(self, tree, new)

    def emit_loop_prologue(self, ctx, loc):
        if ctx.brk is not None:
            self.emit(Assign(Ref(ctx.brk, ()), Const(False), loc=loc))

    def stmt_While(self, node, frame):
        loc = frame.loc(node)
        if node.orelse:
            raise unsupported(loc, "while-else", "use a flag variable")
        cond_name = self.namer("while_cond")
        cvar = self.container(cond_name, BOOL, ())

        def compute_cond():
            c = self.truth(self.eval(node.test, frame), loc)
            self.emit(Assign(Ref(cvar, ()), self.to_expr(c, loc), loc=loc))

        compute_cond()
        ran = self.materialize(scalar(cvar), "ran", loc)      # whether the loop makes a pass
        before = dict(frame.env)
        stmts, esc, ctx = self.under_facts("loop", node, frame, None, lambda: self.loop_body(
            node, frame, lambda: None, extra_tail=compute_cond))
        self.emit_loop_prologue(ctx, loc)
        cond = scalar(cvar)
        if ctx.brk is not None:
            cond = op("logical_and", cond, op("logical_not", scalar(ctx.brk)))
        self.emit(While(cond, stmts, loc))
        self.keep_if_no_pass(frame, before, ran, loc)
        return Escape([frame.ret_flag] if esc.flags and frame.ret_flag in esc.flags else [])

    def flag(self, hint):
        return self.container(hint, BOOL, ())

    def stmt_Break(self, node, frame):
        return self.jump(node, frame, "brk", "break")

    def stmt_Continue(self, node, frame):
        return self.jump(node, frame, "cont", "continue")

    def jump(self, node, frame, kind, word):
        """``break``/``continue``: set the enclosing loop's flag; the rest of the block is dead."""
        if not frame.loops:
            raise FlowgradError(f"{frame.loc(node)}: {word} outside a loop")
        ctx = frame.loops[-1]
        if getattr(ctx, kind) is None:
            setattr(ctx, kind, self.flag(kind))
        flag = getattr(ctx, kind)
        self.emit(Assign(Ref(flag, ()), Const(True), loc=frame.loc(node)))
        return Escape([flag], dead=True)


class _Range:
    """The bounds of a ``range(...)`` in a ``for`` statement."""

    def __init__(self, start, stop, step):
        self.bounds = (start, stop, step)

    def python(self, loc):
        if any(isinstance(b, Expr) for b in self.bounds):
            raise unsupported(loc, "range() of values known only at run time zipped with a Python list",
                              "zip Python lists with ranges of constants, or loop over range() and index")
        return range(*self.bounds)


def _is_builtin_call(fe, node, frame, name):
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name \
        and fe.lookup(name, frame, node) is getattr(builtins, name)


def _trips(begin, end, by):
    k = const_value(by)
    sign = op("sign", by) if k is None else (1 if k > 0 else -1)
    return op("maximum", 0, op("floor_divide", end - begin + by - sign, by))


def _trip_count(begin, end, by):
    """The number of passes of ``range(begin, end, by)`` where known at capture, else None."""
    return const_value(_trips(begin, end, by))


def _passes(plan):
    """The Python values of the passes of a run-time loop plan known at capture (to unroll it)."""
    if plan[0] == "range":
        _, a, b, by, reverse = plan
        r = range(*(const_value(x) if isinstance(x, Expr) else x for x in (a, b, by)))
        return list(r)[::-1] if reverse else list(r)
    _, length, element = plan
    return [element(k) for k in range(const_value(length) if isinstance(length, Expr) else length)]


def _breaks(stmts):
    """Whether a ``break`` in ``stmts`` ends their loop (not one of its inner loops)."""
    for node in stmts:
        if isinstance(node, ast.Break):
            return True
        if isinstance(node, (ast.For, ast.While, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            continue
        if any(_breaks(getattr(node, f, [])) for f in ("body", "orelse", "handlers", "finalbody")):
            return True
    return False


def _is_int_value(v):
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) or \
        isinstance(v, Expr) and v.shape == () and v.dtype.kind in "iu"


_OWN_SCOPES = (ast.FunctionDef, ast.Lambda, ast.ListComp, ast.DictComp, ast.SetComp, ast.GeneratorExp)


def _assigned_names(stmts):
    """The names ``stmts`` bind (not those bound inside nested functions or comprehensions)."""
    names = []
    todo = list(stmts)
    while todo:
        sub = todo.pop(0)
        if isinstance(sub, ast.Name) and isinstance(sub.ctx, ast.Store):
            names.append(sub.id)
        elif isinstance(sub, ast.AugAssign) and isinstance(sub.target, ast.Name):
            names.append(sub.target.id)
        if isinstance(sub, ast.FunctionDef):
            names.append(sub.name)
        if isinstance(sub, _OWN_SCOPES):
            continue
        todo.extend(ast.iter_child_nodes(sub))
    return list(dict.fromkeys(names))


def _reads(e):
    return list(iter_reads(e))


def _passes_back(ref, loop, written, n):
    """View ``ref`` (of a loop's pass) as it was ``n`` passes earlier, or None where that is not
    known: an index moving in a loop other than a ``for`` loop of a step known at capture, or
    reading what the body writes (``written``) besides the loop's variable."""
    loop_vars = set(loop.vars) if loop is not None else set()
    if not any(r.ref.container in written | loop_vars for ie in ref.index_exprs() for r in iter_reads(ie)):
        return ref                  # the same part on every pass
    step = const_value(loop.step) if loop is not None and loop.kind == "for" else None
    if not step or any(r.ref.container in written - loop_vars for ie in ref.index_exprs() for r in iter_reads(ie)):
        return None
    shift = n * step * (-1 if loop.reverse else 1)
    out = Read(ref)
    for v in loop.vars:
        out = substitute(out, v, op("subtract", scalar(v), Const(shift)))
    return out.ref
