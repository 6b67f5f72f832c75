"""Procedure references: statement functions, intrinsics, and user procedures inlined.

A call binds each dummy as Fortran's argument association does: a variable or section actual
by reference (the dummy is a view of the actual's container, so the callee's writes reach the
caller), an expression by value (a temporary), an array element passed to an array dummy by
sequence association (the dummy runs along the actual's first dimension from that element).
Where no view can express the association (a 2-D section passed to a 1-D dummy), the actual is
copied in and, if the callee may write it, copied back out, as compilers do for non-contiguous
actuals.
"""
from __future__ import annotations

from ...errors import unsupported
from ...ir.core import BOOL, Assign, Call, Const, Read, Ref, const_value, iter_reads
from .exprs import Text, const, convert, fold, mk
from .intrinsics import PARAMS, RAW, call_intrinsic, call_raw, canonical, is_intrinsic, is_standard_intrinsic
from .scope import Absent, ArrayView, ProcArg, Value, Var, declarations, extent, is_dummy_procedure
from .source import _fparser

MAX_DEPTH = 24


def split_args(nodes):
    """(positional nodes, {keyword: node}) of an actual argument list."""
    F = _fparser()[2]
    pos, kw = [], {}
    for n in nodes:
        if isinstance(n, F.Actual_Arg_Spec):
            kw[str(n.children[0]).lower()] = n.children[1]
        else:
            if kw:
                raise unsupported(None, "positional argument after a keyword argument", "reorder the arguments")
            pos.append(n)
    return pos, kw


class CallLowering:
    """Calls, mixed into the ``Lowering``."""

    # ------------------------------------------------------------ function references

    def function_call(self, name, arg_nodes, node):
        sf = self.stmt_function(name)
        if sf is not None:
            return self.apply_stmt_function(name, sf, arg_nodes)
        proc = self.find_procedure(name)
        if proc is None:
            if is_intrinsic(name):
                return self.intrinsic(name, arg_nodes)
            if is_standard_intrinsic(name):
                raise unsupported(self.loc, f"intrinsic {name.upper()}", "it is not supported yet: write it out, or "
                                  "pass its values as an argument")
            raise unsupported(self.loc, f"reference to unknown function {name}",
                              "its source is not among the sources given to from_fortran (or declare the array)")
        if isinstance(proc, list):
            proc = self.select_specific(name, proc, arg_nodes)
        if proc.kind != "function":
            raise unsupported(self.loc, f"subroutine {name} referenced as a function", "CALL it")
        return self.inline(proc, arg_nodes)

    def intrinsic(self, name, arg_nodes):
        cname = canonical(name)
        pos, kw = split_args(arg_nodes)
        if cname in RAW:
            params = PARAMS[cname]
            nodes = dict(zip(params, pos))
            nodes.update(kw)
            return call_raw(self, cname, nodes)
        args = [self.ex(n) for n in pos]
        kwargs = {k: self.ex(v) for k, v in kw.items()}
        return call_intrinsic(self, cname, args, kwargs, None)

    def stmt_function(self, name):
        s = self.frame
        while s is not None:
            sf = getattr(s, "stmt_funcs", {}).get(name)
            if sf is not None:
                return s, sf
            s = s.parent
        return None

    def apply_stmt_function(self, name, found, arg_nodes):
        """A statement function's expression with its dummies bound to the argument values (each
        converted to the type its name has in the defining scope)."""
        scope, (dummies, expr, node) = found
        pos, kw = split_args(arg_nodes)
        if kw or len(pos) != len(dummies):
            raise unsupported(self.loc, f"statement function {name} called with {len(pos)} arguments",
                              f"it takes {len(dummies)}")
        values = [self.value(a) for a in pos]
        # an argument the expression may read several times is computed once
        values = [v if isinstance(v, (Read, Const)) or v.shape != () else self.materialize(v, d)
                  for v, d in zip(values, dummies)]
        saved = {d: scope.bindings.get(d) for d in dummies}
        try:
            for d, v in zip(dummies, values):
                decl = scope.decls.decls.get(d)
                tspec = self.tspec(scope, decl.type_node if decl else None, d)
                scope.bindings[d] = Value(convert(v, tspec.dtype(self.loc), self.loc), tspec)
            saved_frame = self.frame
            self.frame = scope
            try:
                out = self.value(expr)
            finally:
                self.frame = saved_frame
        finally:
            for d, b in saved.items():
                if b is None:
                    scope.bindings.pop(d, None)
                else:
                    scope.bindings[d] = b
        decl = scope.decls.decls.get(name)
        tspec = self.tspec(scope, decl.type_node if decl else None, name)
        return convert(out, tspec.dtype(self.loc), self.loc)

    def select_specific(self, name, procs, arg_nodes):
        """The specific procedure of a generic interface whose dummies match the actuals' types
        and ranks."""
        pos, kw = split_args(arg_nodes)
        sig = []
        for n in pos:
            stmts, v = self.collect(self.ex, n)
            sig.append(None if isinstance(v, Text) else (v.dtype, len(v.shape)))
        for p in procs:
            decls = declarations(p).decls
            if len(pos) > len(p.dummies):
                continue
            ok = True
            scope = _DeclScope(self, p, self.host_frame(p))
            for d, s in zip(p.dummies, sig):
                dd = decls.get(d)
                if s is None:
                    continue
                ts = self.tspec(scope, dd.type_node if dd is not None else None, d)
                if ts.base == "type":
                    continue
                rank = len(dd.dims) if dd is not None and dd.dims is not None else 0
                if ts.dtype(self.loc) != s[0] or rank != s[1]:
                    ok = False
                    break
            if ok:
                return p
        raise unsupported(self.loc, f"call of generic {name} with these argument types",
                          "no specific procedure of the interface matches")

    # ------------------------------------------------------------ CALL

    def call_subroutine(self, name, arg_nodes):
        proc = self.find_procedure(name)
        if proc is None:
            if name in ("cpu_time", "system_clock", "date_and_time", "flush"):
                self.warn(f"CALL {name.upper()} ignored")
                return
            if name == "random_number":
                raise unsupported(self.loc, "CALL RANDOM_NUMBER", "pass the random numbers in as an argument")
            raise unsupported(self.loc, f"call of unknown subroutine {name}",
                              "its source is not among the sources given to from_fortran; add it")
        if isinstance(proc, list):
            proc = self.select_specific(name, proc, arg_nodes)
        if proc.kind != "subroutine":
            raise unsupported(self.loc, f"function {name} CALLed", "reference it in an expression")
        self.inline(proc, arg_nodes)

    def bound_call(self, obj, name, arg_nodes, kind):
        """Type-bound procedure ``name`` called through variable ``obj`` (``CALL M%STEP(DT)``,
        ``M%ENERGY()``): the ``kind`` of procedure the variable's type binds, inlined with the
        variable as its passed object."""
        from .lowering import type_bindings
        what, rec = self.designate(obj)
        if what != "record":
            raise unsupported(self.loc, f"{obj}%{name}: {obj} is not a derived-type variable", "check the declaration")
        bindings = type_bindings(self, *self.typedef(rec.source[0], rec.tspec.derived))
        if name not in bindings:
            raise unsupported(self.loc, f"{obj}%{name}: TYPE({rec.tspec.derived}) has no component or type-bound "
                              f"procedure {name}", "check the type's definition")
        procname, scope, passed = bindings[name]
        proc = self.find_procedure(procname, scope)
        if proc is None or isinstance(proc, list) or proc.kind != kind:
            raise unsupported(self.loc, f"{obj}%{name}: procedure {procname}", f"bind a {kind} in the sources")
        if passed is False:
            return self.inline(proc, arg_nodes)
        return self.inline(proc, arg_nodes, passed=(passed or proc.dummies[0], obj))

    # ------------------------------------------------------------ inlining

    def inline(self, proc, arg_nodes, passed=None):
        """Lower a call of ``proc`` in place; a function's result value is returned. ``passed``:
        (dummy, node) of a type-bound procedure's passed object."""
        from .lowering import Frame
        if any(f.proc is proc for f in self._active) or self.depth >= MAX_DEPTH:
            raise unsupported(self.loc, f"recursive call of {proc.name}", "write the recursion as a loop")
        pos, kw = split_args(arg_nodes)
        dummies = [d for d in proc.dummies if passed is None or d != passed[0]]
        if len(pos) > len(dummies):
            raise unsupported(self.loc, f"call of {proc.name} with {len(pos)} arguments",
                              f"it takes {len(dummies)}")
        actual = dict(zip(dummies, pos))
        if passed is not None:
            actual[passed[0]] = passed[1]
        for k, v in kw.items():
            if k not in proc.dummies:
                raise unsupported(self.loc, f"keyword argument {k}= of {proc.name}",
                                  f"its dummies are {', '.join(proc.dummies)}")
            actual[k] = v
        F = _fparser()[2]
        for d, node in list(actual.items()):
            # an absent OPTIONAL argument passed on is absent in the callee too
            if isinstance(node, F.Name) and isinstance(self.lookup(str(node).lower(), create=False), Absent):
                del actual[d]
        if proc.elemental:
            values = {d: self.ex(n) for d, n in actual.items()}
            if any(not isinstance(v, Text) and v.shape != () for v in values.values()):
                return self.elemental(proc, values)
        frame = Frame(proc, self.host_frame(proc))
        copy_out = []
        decls = frame.decls.decls
        # scalars and records first: array bounds may read them
        order = sorted(proc.dummies, key=lambda d: decls.get(d) is not None and decls[d].dims is not None)
        for d in order:
            dd = decls.get(d)
            node = actual.get(d)
            if node is None:
                if dd is not None and dd.optional:
                    frame.bindings[d] = Absent(d)
                    continue
                raise unsupported(self.loc, f"call of {proc.name} without argument {d}",
                                  "pass it (only OPTIONAL dummies may be left out)")
            if is_dummy_procedure(frame.decls, d):
                frame.bindings[d] = ProcArg(d, self.procedure_actual(proc, d, node))
                continue
            frame.bindings[d] = self.associate(frame, d, dd, node, copy_out)
        return self._run_frame(frame, copy_out)

    def procedure_actual(self, proc, d, node):
        """The procedure passed for dummy procedure ``d`` of ``proc`` (a name, resolved here)."""
        F = _fparser()[2]
        actual = self.find_procedure(str(node).lower()) if isinstance(node, F.Name) else None
        if actual is None or isinstance(actual, list):
            raise unsupported(self.loc, f"argument {node} for dummy procedure {d} of {proc.name}",
                              "pass the name of a (specific) procedure in the sources")
        return actual

    def _run_frame(self, frame, copy_out=()):
        self.depth += 1
        try:
            stmts, result = self.collect(self.lower_frame, frame)
        finally:
            self.depth -= 1
        for st in frame.prologue + stmts:
            self.emit(st)
        for item in copy_out:
            self.copy_back(item)
        return result

    def elemental(self, proc, values):
        """An ELEMENTAL function applied to arrays: a loop nest over the elements, the function
        inlined for each (its body may branch on the values)."""
        from ...ir.core import For, I64, Index
        from .lowering import Frame
        if proc.kind != "function":
            raise unsupported(self.loc, f"ELEMENTAL subroutine {proc.name} called with arrays",
                              "call it in a DO loop over the elements")
        shape = next(v.shape for v in values.values() if not isinstance(v, Text) and v.shape != ())
        arrays = {}
        for d, v in values.items():
            if not isinstance(v, Text) and v.shape != ():
                if len(v.shape) != len(shape):
                    raise unsupported(self.loc, f"arguments of ELEMENTAL {proc.name} of different ranks",
                                      "pass conformable arrays")
                arrays[d] = self.materialize(v, d).ref.container
        counters = [self.temp("i_" + proc.name, I64, ()) for _ in shape]

        def body():
            frame = Frame(proc, self.host_frame(proc))
            for d in proc.dummies:
                dd = frame.decls.decls.get(d)
                if d not in values:
                    if dd is not None and dd.optional:
                        frame.bindings[d] = Absent(d)
                        continue
                    raise unsupported(self.loc, f"call of {proc.name} without argument {d}", "pass it")
                tspec = self.tspec(frame, dd.type_node if dd is not None else None, d)
                v = values[d]
                if d in arrays:
                    v = Read(Ref(arrays[d], [Index(Read(Ref(c, ()))) for c in counters]))
                frame.bindings[d] = Value(convert(v, tspec.dtype(self.loc), self.loc), tspec)
            return self._run_frame(frame)
        self.loop_vars.update(counters)
        try:
            stmts, elem = self.collect(body)
        finally:
            self.loop_vars.difference_update(counters)
        out = self.temp(proc.name, elem.dtype, shape)
        stmts.append(Assign(Ref(out, [Index(Read(Ref(c, ()))) for c in counters]), elem, loc=self.loc))
        for c, n in reversed(list(zip(counters, shape))):
            stmts = [For(c, const(0), n, const(1), stmts, loc=self.loc)]
        for st in stmts:
            self.emit(st)
        return Read(Ref(out))

    def lower_frame(self, frame):
        """The body of ``frame``'s procedure; its function result (a value), else None."""
        proc = frame.proc
        saved = self.frame, self.loc, getattr(self, "_masks", None)
        self.frame = frame
        self._masks = None          # a WHERE around the call does not mask the callee's assignments
        self._active = tuple(self._active) + (frame,)
        try:
            result_var = None
            if proc.kind == "function":
                result_var = self.function_result(frame)
            self.body_statements(proc.body)
            if result_var is None:
                return None
            if result_var.is_array:
                return Read(result_var.view.ref())
            return Read(result_var.ref)
        finally:
            self._active = self._active[:-1]
            self.frame, self.loc, self._masks = saved

    def function_result(self, frame):
        proc = frame.proc
        name = proc.result
        decl = frame.decls.decls.get(name)
        tnode = None
        if proc.prefix is not None:
            F = _fparser()[2]
            for p in proc.prefix.children if hasattr(proc.prefix, "children") else ():
                if isinstance(p, (F.Intrinsic_Type_Spec, F.Declaration_Type_Spec)):
                    tnode = p
        if decl is not None and decl.type_node is not None:
            tnode = decl.type_node
        b = self.make_local(frame, decl, name, tnode)
        frame.bindings[name] = b
        return b

    # ------------------------------------------------------------ argument association

    def associate(self, frame, d, dd, node, copy_out):
        """The binding of dummy ``d`` (declaration ``dd``, or None: implicitly typed) to actual
        ``node``, evaluated in the caller's scope."""
        tspec = self.tspec(frame, dd.type_node if dd is not None else None, d)
        if tspec.base == "type":
            kind, target = self.designate(node)
            if kind != "record":
                raise unsupported(self.loc, f"argument {node} for TYPE({tspec.derived}) dummy {d}",
                                  "pass a variable of that type")
            return target
        if tspec.base == "character":
            v = self.ex(node)
            return Value(v) if isinstance(v, Text) else v
        dtype = tspec.dtype(self.loc)
        is_array = dd is not None and dd.dims is not None
        value_attr = dd is not None and dd.value
        F = _fparser()[2]
        if is_array:
            return self.associate_array(frame, d, dd, tspec, dtype, node, copy_out)
        if isinstance(node, (F.Name, F.Part_Ref, F.Data_Ref, F.Intrinsic_Function_Reference)) and not value_attr:
            kind, target = self.designate(node)
            if kind == "elem":
                if target.container.dtype == dtype:
                    return Var(d, tspec, ref=self.stable_ref(target), decl=dd)
                tmp = self.temp(d, dtype, ())
                self.emit(Assign(Ref(tmp, ()), convert(Read(target), dtype, self.loc), loc=self.loc))
                if dd is None or dd.intent != "in":
                    copy_out.append((target, convert(Read(Ref(tmp, ())), target.container.dtype, self.loc)))
                return Var(d, tspec, ref=Ref(tmp, ()), decl=dd)
            if kind == "view":
                raise unsupported(self.loc, f"array {node} passed to scalar dummy {d} of {frame.proc.name}",
                                  "pass an element, or declare the dummy as an array")
            if kind == "record":
                raise unsupported(self.loc, f"derived-type {node} passed to dummy {d}", "check the declaration")
            v = target
        else:
            v = self.ex(node)
            if isinstance(v, Text):
                raise unsupported(self.loc, f"character argument {node} for numeric dummy {d}",
                                  "check the declaration")
        if v.shape != ():
            raise unsupported(self.loc, f"array value passed to scalar dummy {d} of {frame.proc.name}",
                              "pass a scalar")
        v = fold(convert(v, dtype, self.loc))
        if self.is_stable(v) and (dd is None or dd.intent in (None, "in")):
            return Value(v, tspec)
        tmp = self.temp(d, dtype, ())
        self.emit(Assign(Ref(tmp, ()), v, loc=self.loc))
        return Var(d, tspec, ref=Ref(tmp, ()), decl=dd)

    def is_stable(self, e):
        """Whether an expression's value cannot change during a call: constants, and reads of
        loop counters and of arguments the program never writes."""
        for r in iter_reads(e):
            c = r.ref.container
            if c not in self.loop_vars and c not in self.stable_args:
                return False
        return True

    def stable_ref(self, ref):
        """``ref`` with its index expressions evaluated now (a callee's write to a variable an index
        reads does not move the element the dummy names)."""
        from ...ir.core import Index
        items = []
        for it in ref.items:
            if isinstance(it, Index) and not self.is_stable(it.at):
                it = Index(self.materialize(it.at, "at"))
            items.append(it)
        return Ref(ref.container, items, ref.perm)

    def associate_array(self, frame, d, dd, tspec, dtype, node, copy_out):
        F = _fparser()[2]
        kinds = [k for k, lo, hi in dd.dims]
        designator = isinstance(node, (F.Name, F.Part_Ref, F.Data_Ref))
        kind, target = self.designate(node) if designator else ("value", self.value(node))
        if kind == "record":
            raise unsupported(self.loc, f"derived-type {node} passed to array dummy {d}", "check the declaration")
        element = None
        if kind == "elem":
            element = self.element_of(node)
            if element is None:
                raise unsupported(self.loc, f"scalar {node} passed to array dummy {d} of {frame.proc.name}",
                                  "pass an array")
        if kind == "value":
            if isinstance(target, Text):
                raise unsupported(self.loc, f"character argument for array dummy {d}", "check the declaration")
            v = convert(target, dtype, self.loc)
            if v.shape == ():
                raise unsupported(self.loc, f"scalar value passed to array dummy {d}", "pass an array")
            c = self.temp(d, dtype, v.shape)
            self.emit(Assign(Ref(c), v, loc=self.loc))
            target, kind = ArrayView.whole(c), "view"
        lbounds = []
        for k, lo, hi in dd.dims:
            lbounds.append(const(1) if lo is None else self.snapshot(self.in_scope(frame, self.int_value, lo)))
        if all(k == "assumed" for k in kinds) or all(k == "deferred" for k in kinds):
            if element is not None or target.rank != len(kinds):
                raise unsupported(self.loc, f"argument {node} of rank {0 if element else target.rank} for "
                                  f"assumed-shape dummy {d}({', '.join(':' * len(kinds))})", "pass a matching array")
            view = target.rebased(lbounds=lbounds)
            return self._typed_view(d, tspec, dtype, view, dd, copy_out)
        extents = []
        for (k, lo, hi), lb in zip(dd.dims, lbounds):
            if k == "explicit":
                extents.append(self.snapshot(extent(lb, self.in_scope(frame, self.int_value, hi))))
            elif k == "size":
                extents.append(None)
            else:
                raise unsupported(self.loc, f"dummy {d} mixing assumed and explicit bounds", "declare it consistently")
        rd = len(extents)
        if element is not None:
            # sequence association from an element: the dummy runs along the actual's leading
            # dimensions from that element (its leading subscripts at their lower bounds)
            av, subs = element
            if rd <= av.rank and all(_same(subs[k], av.lbounds[k]) for k in range(rd - 1)):
                target = av.section([("r", subs[k], None, None) if k < rd else ("i", subs[k])
                                     for k in range(av.rank)])
            elif av.rank == 1:
                target = av.section([("r", subs[0], None, None)])
            else:
                raise unsupported(self.loc, f"element {node} passed to dummy {d} of rank {rd}",
                                  "pass the array section the dummy should see")
        if extents[-1] is None:
            if rd <= target.rank:
                extents[-1] = target.extents[rd - 1]
            else:
                have, lead = const(1), const(1)
                for e in target.extents:
                    have = mk("multiply", have, e)
                for e in extents[:-1]:
                    lead = mk("multiply", lead, e)
                if const_value(have) is None or const_value(lead) is None:
                    raise unsupported(self.loc, f"assumed-size dummy {d} of rank {rd} for a rank-{target.rank} "
                                      "argument of size known only at run time", "pass an array of the dummy's rank")
                extents[-1] = const(const_value(have) // const_value(lead))
        pending = self._fits(extents, target.extents) if len(extents) == target.rank else None
        if pending is not None:
            if pending:
                self.check_extents(pending, f"dummy {d} of {frame.proc.name}", node)
            view = ArrayView(target.container, target.axes, lbounds, extents)
            return self._typed_view(d, tspec, dtype, view, dd, copy_out)
        return self.copy_in(d, tspec, dtype, target, lbounds, extents, dd, copy_out)

    def _fits(self, want, have):
        """Whether the dummy's extents ``want`` lie within the actual's ``have`` as a view (every
        extent but the last equal, the last no longer): None if not, else the pairs of extents
        known only at run time that must then be equal (the last as (w, min(w, h)))."""
        pending = []
        for k, (w, h) in enumerate(zip(want, have)):
            cw, ch = const_value(fold(w)), const_value(fold(h))
            last = k == len(want) - 1
            if cw is not None and ch is not None:
                if cw > ch or (not last and cw != ch):
                    return None
            elif not _same(w, h):
                pending.append((w, mk("minimum", w, h) if last else h))
        return pending

    def check_extents(self, pairs, dummy, actual):
        """A run-time check that each pair (the dummy's extent, the actual's) is equal."""
        flag = self.temp("extents_ok", BOOL, ())
        differ = ", ".join(["{} declared where it has {}"] * len(pairs))
        message = f"{self.loc}: {dummy} does not fit its actual argument {actual}: an extent {differ}; " \
                  "pass an array of the dummy's shape"
        self.emit(Call("check_sizes", [e for pair in pairs for e in pair], [flag], {"message": message},
                       loc=self.loc))

    def element_of(self, node):
        """(view, Fortran subscripts) of an array element designator, else None."""
        F = _fparser()[2]
        if isinstance(node, F.Part_Ref):
            name = str(node.children[0]).lower()
            b = self.lookup(name, create=False)
            if isinstance(b, Var) and b.is_array and b.view is not None:
                subs = [self.int_value(s) for s in node.children[1].children]
                return b.view, subs
        if isinstance(node, F.Data_Ref) and isinstance(node.children[-1], F.Part_Ref):
            parts = node.children
            head = F.Data_Ref(" % ".join(str(p) for p in parts[:-1])) if len(parts) > 2 else parts[0]
            kind, rec = self.designate(head)
            if kind == "record":
                comp = str(parts[-1].children[0]).lower()
                field = self.ensure_field(rec, comp)
                if field.is_array and field.view is not None:
                    return field.view, [self.int_value(s) for s in parts[-1].children[1].children]
        return None

    def _typed_view(self, d, tspec, dtype, view, dd, copy_out):
        if view.container.dtype == dtype:
            return Var(d, tspec, view=view, decl=dd)
        c = self.temp(d, dtype, tuple(reversed(view.extents)))
        self.emit(Assign(Ref(c), convert(Read(view.ref()), dtype, self.loc), loc=self.loc))
        if dd.intent != "in":
            copy_out.append((view.ref(), convert(Read(Ref(c)), view.container.dtype, self.loc)))
        return Var(d, tspec, view=ArrayView.whole(c, view.lbounds), decl=dd)

    def copy_in(self, d, tspec, dtype, target, lbounds, extents, dd, copy_out):
        """Sequence association by copy: the actual's elements in array element order, as many as
        the dummy has, into the dummy's own container (and back after the call)."""
        size = const(1)
        for e in extents:
            size = mk("multiply", size, e)
        have = const(1)
        for e in target.extents:
            have = mk("multiply", have, e)
        if const_value(size) is None or const_value(have) is None:
            raise unsupported(self.loc, f"argument for dummy {d} whose shape differs from the actual's, with sizes "
                              "known only at run time", "pass an array of the dummy's shape")
        if const_value(size) > const_value(have):  # noqa: SIM102
            raise unsupported(self.loc, f"dummy {d} of {const_value(size)} elements for an actual of "
                              f"{const_value(have)}", "pass a larger array")
        from ...ir.core import Slice
        flat = self.ravel(Read(target.ref()))
        part = self.temp(d + "_flat", dtype, (size,))
        self.emit(Assign(Ref(part), convert(Read(Ref(flat.ref.container, [Slice(0, size, 1)])), dtype, self.loc)))
        c = self.temp(d, dtype, tuple(reversed(extents)))
        self.emit(Call("reshape", [Read(Ref(part))], [c], {"shape": c.shape}, loc=self.loc))
        if dd.intent != "in":
            copy_out.append(("seq", target, c, size))
        return Var(d, tspec, view=ArrayView.whole(c, lbounds), decl=dd)

    def copy_back(self, item):
        """Write a copied-in dummy back into its actual."""
        if item[0] != "seq":
            dst, src = item
            self.emit(Assign(dst, src, loc=self.loc))
            return
        _, target, c, size = item
        from ...ir.core import Slice
        n = const(1)
        for e in target.extents:
            n = mk("multiply", n, e)
        flat = self.ravel(Read(target.ref()))
        if flat.ref.container is target.container:
            flat = self.materialize(flat, "flat")
        mine = self.ravel(Read(Ref(c)))
        self.emit(Assign(Ref(flat.ref.container, [Slice(0, size, 1)]),
                         convert(mine, target.container.dtype, self.loc), loc=self.loc))
        back = self.temp("unflat", target.container.dtype, tuple(reversed(target.extents)))
        self.emit(Call("reshape", [flat], [back], {"shape": back.shape}, loc=self.loc))
        self.emit(Assign(target.ref(), Read(Ref(back)), loc=self.loc))


def _same(a, b):
    from ...ir.core import same_expr
    return same_expr(fold(a), fold(b))


class _DeclScope:
    """A procedure's declarations seen without an activation (for generic resolution)."""

    def __init__(self, lo, proc, parent):
        self.unit = proc
        self.decls = declarations(proc)
        self.parent = parent
        self.bindings = {}
        self.dummies = set(proc.dummies)
        self.stmt_funcs = {}
        from .scope import implicit_rules
        from .types import implicit_default
        self.rules = implicit_rules(proc, parent.rules if parent is not None else implicit_default())


__all__ = ["CallLowering", "split_args"]
