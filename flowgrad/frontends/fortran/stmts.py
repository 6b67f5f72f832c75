"""Fortran statements into structured IR control flow.

``DO`` becomes a ``For`` over Fortran's trip count (``max(0, (stop - start + step) / step)``,
bounds evaluated once; the variable is ``start + trips * step`` afterwards), ``DO WHILE`` and
``DO`` without control a ``While``. ``EXIT``, ``CYCLE`` and ``RETURN`` set flags: the rest of
the block after a statement that may set one runs under ``IF (.NOT. flag)``, and a loop whose
body may leave it stops running its body once the flag is set, as the Python frontend lowers
``break`` and ``continue``. Each statement returns the set of flags it may set.
"""
from __future__ import annotations

from ...errors import unsupported
from ...ir.core import (BOOL, I64, Assign, Const, Expr, For, If, Read, Ref, While, const_value, iter_reads, op,
                        stmt_writes, walk)
from .exprs import Text, const, convert, fold, int_div, mk
from .scope import ArrayView, Value, Var, extent, is_constructor
from .source import _fparser, node_line


class LoopCtx:
    def __init__(self, name):
        self.name = name
        self.brk = None         # bool container: EXIT was executed
        self.cont = None        # bool container: CYCLE was executed (reset each iteration)


_IGNORED = ("Continue_Stmt", "Format_Stmt", "End_Do_Stmt", "Deallocate_Stmt", "Nullify_Stmt", "Comment",
            "End_If_Stmt", "End_Select_Stmt", "End_Where_Stmt", "End_Associate_Stmt", "Directive")
_IO_IGNORED = {"Write_Stmt": "WRITE", "Print_Stmt": "PRINT", "Open_Stmt": "OPEN", "Close_Stmt": "CLOSE",
               "Flush_Stmt": "FLUSH", "Rewind_Stmt": "REWIND", "Backspace_Stmt": "BACKSPACE",
               "Endfile_Stmt": "ENDFILE", "Inquire_Stmt": "INQUIRE", "Wait_Stmt": "WAIT"}
_REFUSED = {
    "Goto_Stmt": ("GOTO", "restructure the jump with IF, DO WHILE, EXIT or CYCLE"),
    "Computed_Goto_Stmt": ("computed GOTO", "use SELECT CASE"),
    "Assigned_Goto_Stmt": ("assigned GOTO", "use SELECT CASE"),
    "Arithmetic_If_Stmt": ("arithmetic IF", "use IF ... ELSE IF ... ELSE"),
    "Assign_Stmt": ("ASSIGN statement", "use an integer variable and SELECT CASE"),
    "Read_Stmt": ("READ statement feeding the computation", "read the data in Python and pass it as an argument"),
    "Pointer_Assignment_Stmt": ("pointer assignment (=>)", "use the target variable directly"),
    "Forall_Construct": ("FORALL", "write DO loops"),
    "Forall_Stmt": ("FORALL", "write DO loops"),
    "Entry_Stmt": ("ENTRY statement", "split the routine into separate subroutines"),
    "Select_Type_Construct": ("SELECT TYPE", "use concrete types"),
    "Block_Construct": ("BLOCK construct", "declare the variables in the enclosing procedure"),
    "Critical_Construct": ("CRITICAL construct", "remove it"),
    "Pause_Stmt": ("PAUSE statement", "remove it"),
}


def _any(flags):
    flags = sorted(flags, key=lambda c: c.name)
    out = Read(Ref(flags[0], ()))
    for f in flags[1:]:
        out = op("logical_or", out, Read(Ref(f, ())))
    return out


class StmtLowering:
    """Statements, mixed into the ``Lowering``."""

    def body_statements(self, stmts):
        """A procedure body: leading statement-function definitions, then its statements."""
        self.block(list(stmts))

    def block(self, stmts):
        """Lower a statement list; returns the flags its statements may set."""
        escapes = set()
        for k, s in enumerate(stmts):
            esc = self.statement(s)
            if esc:
                escapes |= esc
                rest = [t for t in stmts[k + 1:] if type(t).__name__ not in _IGNORED]
                if rest:
                    body, more = self.collect(self.block, rest)
                    escapes |= more
                    if body:
                        self.emit(If(op("logical_not", _any(esc)), body, loc=self.loc))
                break
        return escapes

    def statement(self, s):
        name = type(s).__name__
        if node_line(s) is not None:
            self.loc = self.frame.unit.loc(s)
        if name in _IGNORED:
            return None
        if name in _IO_IGNORED:
            self.warn(f"{_IO_IGNORED[name]} statement ignored (flowgrad programs do no I/O)")
            return None
        if name in _REFUSED:
            what, hint = _REFUSED[name]
            raise unsupported(self.loc, what, hint)
        handler = getattr(self, "st_" + name, None)
        if handler is None:
            raise unsupported(self.loc, f"statement {name} ({str(s)[:40]})", "rewrite it with supported statements")
        return handler(s)

    # ------------------------------------------------------------ assignment

    def st_Assignment_Stmt(self, s):
        F = _fparser()[2]
        lhs, _, rhs = s.children
        if isinstance(lhs, F.Part_Ref) and self.is_stmt_function_def(lhs):
            name = str(lhs.children[0]).lower()
            args = [str(a).lower() for a in lhs.children[1].children]
            self.frame.stmt_funcs[name] = (args, rhs, s)
            return None
        self.assign(lhs, rhs)
        return None

    def is_stmt_function_def(self, lhs):
        F = _fparser()[2]
        name = str(lhs.children[0]).lower()
        subs = lhs.children[1].children if lhs.children[1] is not None else ()
        if not subs or not all(isinstance(a, F.Name) for a in subs):
            return False
        if name in self.frame.stmt_funcs:
            return True
        b = self.frame.bindings.get(name)
        if b is not None:
            return False
        d = self.frame.decls.decls.get(name)
        if d is not None:
            return d.dims is None and not d.allocatable and not d.pointer
        return self.lookup(name, create=False) is None

    def assign(self, lhs, rhs, mask=None):
        kind, target = self.designate(lhs, write=True)
        if kind == "vector":
            if self.where_masks() is not None:
                raise unsupported(self.loc, "vector-subscripted assignment inside WHERE", "use a DO loop")
            return self.scatter(*target, self.value(rhs))
        if kind == "value":
            raise unsupported(self.loc, f"assignment to {lhs}, which is not a variable",
                              "a PARAMETER or an expression cannot be assigned")
        if kind == "record":
            return self.assign_record(target, rhs)
        v = self.value(rhs)
        if kind == "elem":
            ref = target
            if v.shape != ():
                raise unsupported(self.loc, f"array assigned to scalar {lhs}", "assign an element or a scalar")
        else:
            ref = target.ref()
        self._check_writable(ref, lhs)
        v = convert(v, ref.container.dtype, self.loc)
        masks = self.where_masks()
        if masks is not None:
            v = mk("where", masks, v, Read(ref))
        else:
            added = _increment(ref, v)
            if added is not None:
                # x = x + e is x += e (the same value, bit for bit): the adjoint passes through
                # instead of restoring x's old value
                self.emit(Assign(ref, added, accumulate=True, loc=self.loc))
                return
        self.emit(Assign(ref, v, loc=self.loc))

    def _check_writable(self, ref, lhs):
        c = ref.container
        if c in self.const_arrays:
            raise unsupported(self.loc, f"assignment to PARAMETER {lhs}", "a PARAMETER is a constant")
        if c in self.loop_vars:
            raise unsupported(self.loc, f"assignment to DO variable {lhs} inside its loop",
                              "Fortran does not allow it; use another variable")

    def assign_record(self, target, rhs):
        # (a generic interface named like the type overrides the structure constructor)
        if is_constructor(rhs, target.tspec) and self.find_procedure(target.tspec.derived) is None:
            owner, comps, _ = target.source
            values = self.constructor_values(self.frame, target.tspec, comps, rhs)
            for comp, cdecl in comps.items():
                scope, node = values.get(comp, (owner, cdecl.init))
                if node is None:
                    raise unsupported(self.loc, f"structure constructor {rhs} without component {comp}",
                                      "give every component without a default value")
                dst = self.ensure_field(target, comp)
                if dst.is_record:
                    raise unsupported(self.loc, f"structure constructor for TYPE({target.tspec.derived}), which has "
                                      f"derived-type component {comp}", "assign the components one by one")
                value = self.in_scope(scope, self.value, node)
                self.emit(Assign(dst.view.ref() if dst.is_array else dst.ref,
                                 convert(value, (dst.view.container if dst.is_array else dst.ref.container).dtype),
                                 loc=self.loc))
            return
        kind, source = self.designate(rhs)
        if kind != "record" or source.tspec.derived != target.tspec.derived:
            raise unsupported(self.loc, f"assignment of {rhs} to TYPE({target.tspec.derived}) variable",
                              "assign a variable of the same type")
        for comp in target.fields:
            src = self.ensure_field(source, comp)
            dst = self.ensure_field(target, comp)
            self._copy_var(dst, src)

    def _copy_var(self, dst, src):
        if isinstance(src, Value):          # a component of a PARAMETER record
            self.emit(Assign(dst.ref, convert(src.expr, dst.ref.container.dtype), loc=self.loc))
        elif dst.is_record:
            for comp in dst.fields:
                self._copy_var(self.ensure_field(dst, comp), self.ensure_field(src, comp))
        elif dst.is_array:
            if src.view is None:
                return
            if dst.view is None:
                self.allocate_var(dst, list(src.view.lbounds), list(src.view.extents))
            self.emit(Assign(dst.view.ref(), convert(Read(src.view.ref()), dst.view.container.dtype), loc=self.loc))
        else:
            self.emit(Assign(dst.ref, convert(Read(src.ref), dst.ref.container.dtype), loc=self.loc))

    # ------------------------------------------------------------ IF and SELECT CASE

    def condition(self, node):
        v = self.value(node)
        if v.dtype != BOOL or v.shape != ():
            raise unsupported(self.loc, f"condition {node}", "a condition must be a scalar LOGICAL")
        return v

    def st_If_Stmt(self, s):
        cond = fold(self.condition(s.children[0]))
        if isinstance(cond, Const):         # IF (PRESENT(x)) ...: decided when captured
            return self.statement(s.children[1]) if cond.value else None
        body, esc = self.collect(self.statement, s.children[1])
        self.emit(If(cond, body, [], loc=self.loc))
        return esc

    def st_If_Construct(self, s):
        F = _fparser()[2]
        arms, current = [], None
        for child in s.children:
            if isinstance(child, (F.If_Then_Stmt, F.Else_If_Stmt)):
                current = [child.children[0], []]
                arms.append(current)
            elif isinstance(child, F.Else_Stmt):
                current = [None, []]
                arms.append(current)
            elif isinstance(child, F.End_If_Stmt):
                break
            else:
                current[1].append(child)
        return self._chain(arms, s)

    def _chain(self, arms, s):
        """``IF (c1) ... ELSE IF (c2) ... ELSE ...``: arms of (condition node or expression, or
        None for ELSE, statements)."""
        if not arms:
            return None
        cond_node, stmts = arms[0]
        if cond_node is None:
            return self.block(stmts)
        cond = cond_node if isinstance(cond_node, Expr) else self.condition(cond_node)
        c = fold(cond)
        if isinstance(c, Const):
            return self.block(stmts) if c.value else self._chain(arms[1:], s)
        then, esc1 = self.collect(self.block, stmts)
        orelse, esc2 = self.collect(self._chain, arms[1:], s)
        self.emit(If(c, then, orelse, loc=self.loc))
        return (esc1 or set()) | (esc2 or set())

    def st_Case_Construct(self, s):
        F = _fparser()[2]
        sel_node = s.children[0].children[0]
        sel = self.ex(sel_node)
        if not isinstance(sel, Text) and (sel.shape != () or sel.dtype.kind == "f"):
            raise unsupported(self.loc, "SELECT CASE on a real or array value", "select on an integer or LOGICAL")
        if not isinstance(sel, Text) and not isinstance(fold(sel), Const):
            sel = self.materialize(sel, "case")
        arms, default = [], None
        current = None
        for child in s.children[1:]:
            if isinstance(child, F.Case_Stmt):
                selector = child.children[0]
                values = selector.children[0] if selector.children else None
                if values is None:
                    current = default = (None, [])
                else:
                    current = (self._case_cond(sel, values), [])
                    arms.append(current)
            elif isinstance(child, F.End_Select_Stmt):
                break
            elif current is not None:
                current[1].append(child)
        if default is not None:
            arms.append(default)
        return self._chain(arms, s)

    def _case_cond(self, sel, values):
        F = _fparser()[2]
        if isinstance(sel, Text):
            return const(any(self._text_case(sel.value, v) for v in values.children))
        cond = None
        for v in values.children:
            if isinstance(v, F.Case_Value_Range):
                lo, hi = v.children
                parts = []
                if lo is not None:
                    parts.append(mk("greater_equal", sel, convert(self.value(lo), sel.dtype)))
                if hi is not None:
                    parts.append(mk("less_equal", sel, convert(self.value(hi), sel.dtype)))
                c = parts[0] if len(parts) == 1 else mk("logical_and", *parts)
            else:
                x = self.value(v)
                c = mk("equal", sel, x if sel.dtype == BOOL else convert(x, sel.dtype))
            cond = c if cond is None else mk("logical_or", cond, c)
        return cond

    def _text_case(self, sel, v):
        """Whether the character constant ``sel`` matches the case value or range ``v``: Fortran
        compares strings padded with blanks to the same length."""
        F = _fparser()[2]
        bounds = v.children if isinstance(v, F.Case_Value_Range) else (v, v)
        texts = [None if b is None else self.ex(b) for b in bounds]
        if any(t is not None and not isinstance(t, Text) for t in texts):
            raise unsupported(self.loc, f"CASE ({v}) of a character selector", "give character constants")
        width = max([len(sel)] + [len(t.value) for t in texts if t is not None])
        lo, hi = (None if t is None else t.value.ljust(width) for t in texts)
        return (lo is None or lo <= sel.ljust(width)) and (hi is None or sel.ljust(width) <= hi)

    # ------------------------------------------------------------ loops

    def _loop_name(self, stmt):
        getter = getattr(stmt, "get_start_name", None)
        name = getter() if getter is not None else None
        return name.lower() if name else None

    def st_Block_Nonlabel_Do_Construct(self, s):
        head = s.children[0]
        body = [c for c in s.children[1:] if type(c).__name__ != "End_Do_Stmt"]
        return self.do_loop(head, self._loop_control(head), body, self._loop_name(head))

    def st_Block_Label_Do_Construct(self, s):
        F = _fparser()[2]
        head = s.children[0]
        rest = list(s.children[1:])
        label = str(head.children[1])
        # DO 10 I ... DO 10 J ... 10 CONTINUE: fparser keeps the inner loops flat
        for k, c in enumerate(rest):
            if isinstance(c, F.Label_Do_Stmt) and str(c.children[1]) == label:
                rest = rest[:k] + [_Nested(c, rest[k + 1:])]
                break
        body = [c for c in rest if type(c).__name__ != "End_Do_Stmt"]
        return self.do_loop(head, self._loop_control(head), body, self._loop_name(head))

    st_Action_Term_Do_Construct = st_Block_Label_Do_Construct

    def st__Nested(self, s):
        return self.do_loop(s.head, self._loop_control(s.head), s.body, None)

    def _loop_control(self, head):
        for c in head.children:
            if type(c).__name__ == "Loop_Control":
                return c
        return None

    def do_loop(self, head, control, body, name):
        ctx = LoopCtx(name)
        self.frame.loops.append(ctx)
        try:
            if control is None:
                return self._while(None, body, ctx)
            cond, counter = control.children[0], control.children[1]
            if cond is not None:
                return self._while(cond, body, ctx)
            if counter is None and len(control.children) > 3 and control.children[3] is not None:
                return self._concurrent(control.children[3], body, ctx)
            return self._for(counter, body, ctx)
        finally:
            self.frame.loops.pop()

    def _for(self, counter, body, ctx):
        var_node, bounds = counter
        name = str(var_node).lower()
        var = self.lookup(name)
        if not isinstance(var, Var) or var.is_array or var.is_record or var.ref.container.dtype != I64:
            raise unsupported(self.loc, f"DO variable {name}", "it must be a scalar INTEGER variable")
        loc = self.loc
        start, stop = self.int_value(bounds[0]), self.int_value(bounds[1])
        step = self.int_value(bounds[2]) if len(bounds) > 2 else const(1)
        counter_c = self.temp(name, I64, ())
        own = var.ref
        var.ref = Ref(counter_c, ())
        self.loop_vars.add(counter_c)
        try:
            stmts, esc = self.collect(self.block, body)
        finally:
            var.ref = own
            self.loop_vars.discard(counter_c)
        esc = set(esc or ())
        written = {w.container for t in walk(stmts) for w in stmt_writes(t)}
        bounds_e = []
        for e in (start, stop, step):
            if any(r.ref.container in written for r in iter_reads(e)):
                e = self.materialize(e, "bound")
            bounds_e.append(e)
        start, stop, step = bounds_e
        vs = const_value(step)
        if vs is None:
            end = mk("add", stop, mk("sign", step))
            trips = mk("maximum", int_div(mk("add", mk("subtract", stop, start), step), step), const(0))
        elif vs == 0:
            raise unsupported(loc, "DO loop with step 0", "the step must not be zero")
        else:
            end = mk("add", stop, const(1 if vs > 0 else -1))
            trips = mk("maximum", mk("floor_divide", mk("add", mk("subtract", stop, start), step), step), const(0))
        after = mk("add", start, mk("multiply", trips, step))
        stop_flags = esc - {ctx.cont}
        inner = []
        if ctx.cont is not None:
            inner.append(Assign(Ref(ctx.cont, ()), const(False), loc=loc))
        if ctx.brk is not None:
            # EXIT leaves the variable at the iteration's value
            stmts = [Assign(own, Read(Ref(counter_c, ())), loc=loc)] + stmts
        if stop_flags:
            inner.append(If(op("logical_not", _any(stop_flags)), stmts, loc=loc))
        else:
            inner.extend(stmts)
        for flag in (ctx.brk, ctx.cont):
            if flag is not None:
                self.emit(Assign(Ref(flag, ()), const(False), loc=loc))
        self.emit(For(counter_c, start, end, step, inner, loc=loc))
        if ctx.brk is not None:
            self.emit(If(op("logical_not", Read(Ref(ctx.brk, ()))), [Assign(own, after, loc=loc)], loc=loc))
        else:
            self.emit(Assign(own, after, loc=loc))
        return esc - {ctx.brk, ctx.cont} or None

    def _concurrent(self, header, body, ctx):
        """DO CONCURRENT: nested DO loops (the first index innermost), the mask an IF inside."""
        specs, mask = header.children[0].children, header.children[1]
        inner = list(body) if mask is None else [_Masked(mask, list(body))]
        for spec in specs[:-1]:
            var, lo, hi, st = spec.children
            inner = [_Loop(var, [lo, hi] + ([st] if st is not None else []), inner)]
        var, lo, hi, st = specs[-1].children
        return self._for((var, [lo, hi] + ([st] if st is not None else [])), inner, ctx)

    def st__Loop(self, s):
        ctx = LoopCtx(None)
        self.frame.loops.append(ctx)
        try:
            return self._for((s.var, s.bounds), s.body, ctx)
        finally:
            self.frame.loops.pop()

    def st__Masked(self, s):
        cond = fold(self.condition(s.mask))
        if isinstance(cond, Const):
            return self.block(s.body) if cond.value else None
        body, esc = self.collect(self.block, s.body)
        self.emit(If(cond, body, [], loc=self.loc))
        return esc

    def _while(self, cond_node, body, ctx):
        loc = self.loc
        pre, cond = [], const(True)
        if cond_node is not None:
            pre, cond = self.collect(self.condition, cond_node)
        stmts, esc = self.collect(self.block, body)
        esc = set(esc or ())
        stop_flags = esc - {ctx.cont}
        if pre:
            # a condition that needs statements (a function call) is kept in a flag recomputed at
            # the end of each pass
            flag = self.temp("while", BOOL, ())
            for t in pre:
                self.emit(t)
            self.emit(Assign(Ref(flag, ()), cond, loc=loc))
            tail = list(pre) + [Assign(Ref(flag, ()), cond, loc=loc)]
            cond = Read(Ref(flag, ()))
        else:
            tail = []
        inner = []
        if ctx.cont is not None:
            inner.append(Assign(Ref(ctx.cont, ()), const(False), loc=loc))
        inner.extend(stmts)
        inner.extend(tail)
        for flag in (ctx.brk, ctx.cont):
            if flag is not None:
                self.emit(Assign(Ref(flag, ()), const(False), loc=loc))
        if stop_flags:
            cond = op("logical_and", op("logical_not", _any(stop_flags)), cond)
        if isinstance(fold(cond), Const) and fold(cond).value is False:
            return esc - {ctx.brk, ctx.cont} or None
        self.emit(While(cond, inner, loc=loc))
        return esc - {ctx.brk, ctx.cont} or None

    def _target_loop(self, s, what):
        name = s.children[1]
        loops = self.frame.loops
        if not loops:
            raise unsupported(self.loc, f"{what} outside a DO loop", "use it inside a loop")
        if name is None:
            return loops[-1]
        name = str(name).lower()
        for ctx in reversed(loops):
            if ctx.name == name:
                return ctx
        raise unsupported(self.loc, f"{what} {name}", "no enclosing DO loop has that name")

    def st_Exit_Stmt(self, s):
        ctx = self._target_loop(s, "EXIT")
        if ctx.brk is None:
            ctx.brk = self.temp("exit", BOOL, ())
        self.emit(Assign(Ref(ctx.brk, ()), const(True), loc=self.loc))
        return {ctx.brk}

    def st_Cycle_Stmt(self, s):
        ctx = self._target_loop(s, "CYCLE")
        if ctx.cont is None:
            ctx.cont = self.temp("cycle", BOOL, ())
        self.emit(Assign(Ref(ctx.cont, ()), const(True), loc=self.loc))
        return {ctx.cont}

    def st_Return_Stmt(self, s):
        if s.children and s.children[0] is not None:
            raise unsupported(self.loc, "alternate RETURN", "return normally and test a flag")
        frame = self.frame
        if frame.ret is None:
            frame.ret = self.temp("returned", BOOL, ())
            frame.prologue.append(Assign(Ref(frame.ret, ()), const(False), loc=self.loc))
        self.emit(Assign(Ref(frame.ret, ()), const(True), loc=self.loc))
        return {frame.ret}

    def st_Stop_Stmt(self, s):
        self.warn("STOP ignored: the program cannot stop the Python process")
        return None

    st_Error_Stop_Stmt = st_Stop_Stmt

    # ------------------------------------------------------------ CALL, WHERE, ASSOCIATE, ALLOCATE

    def st_Call_Stmt(self, s):
        F = _fparser()[2]
        target, args = s.children[0], s.children[1]
        if isinstance(target, F.Procedure_Designator):
            obj, _, binding = target.children
            self.bound_call(obj, str(binding).lower(), args.children if args is not None else (), "subroutine")
            return None
        if not isinstance(target, F.Name):
            raise unsupported(self.loc, f"CALL of {target}", "call a named subroutine")
        self.call_subroutine(str(target).lower(), args.children if args is not None else ())
        return None

    def where_masks(self):
        masks = getattr(self, "_masks", None)
        return masks[-1] if masks else None

    def _push_mask(self, m):
        if not hasattr(self, "_masks") or self._masks is None:
            self._masks = []
        self._masks.append(m)

    def _mask(self, node):
        m = self.value(node)
        if m.dtype != BOOL or m.shape == ():
            raise unsupported(self.loc, f"WHERE mask {node}", "the mask must be a LOGICAL array")
        outer = self.where_masks()
        if outer is not None:
            m = mk("logical_and", outer, m)
        return self.materialize(m, "mask")

    def st_Where_Stmt(self, s):
        mask = self._mask(s.children[0])
        self._push_mask(mask)
        try:
            self.statement(s.children[1])
        finally:
            self._masks.pop()
        return None

    def st_Where_Construct(self, s):
        F = _fparser()[2]
        outer = self.where_masks()
        arms, current = [], None
        for child in s.children:
            if isinstance(child, F.Where_Construct_Stmt):
                current = [child.children[0], []]
                arms.append(current)
            elif isinstance(child, F.Masked_Elsewhere_Stmt):
                current = [child.children[0], []]
                arms.append(current)
            elif isinstance(child, F.Elsewhere_Stmt):
                current = [None, []]
                arms.append(current)
            elif isinstance(child, F.End_Where_Stmt):
                break
            else:
                current[1].append(child)
        remaining = None            # elements no earlier arm took
        for cond_node, stmts in arms:
            if cond_node is not None:
                m = self.value(cond_node)
                if m.dtype != BOOL or m.shape == ():
                    raise unsupported(self.loc, f"WHERE mask {cond_node}", "the mask must be a LOGICAL array")
            else:
                m = None
            base = remaining if remaining is not None else outer
            take = m if base is None else (base if m is None else mk("logical_and", base, m))
            take = self.materialize(take, "mask")
            if m is not None:
                rest = mk("logical_not", m) if base is None else mk("logical_and", base, mk("logical_not", m))
                remaining = self.materialize(rest, "mask")
            self._push_mask(take)
            try:
                for t in stmts:
                    self.statement(t)
            finally:
                self._masks.pop()
        return None

    def st_Associate_Construct(self, s):
        F = _fparser()[2]
        head = s.children[0]
        assoc_list = next(c for c in head.children if isinstance(c, F.Association_List))
        frame = self.frame
        saved = {}
        for a in assoc_list.children:
            name, selector = str(a.children[0]).lower(), a.children[-1]
            kind, target = self.designate(selector) if isinstance(selector, (F.Name, F.Part_Ref, F.Data_Ref)) \
                else ("value", self.value(selector))
            if kind == "elem":
                b = Var(name, None, ref=self.stable_ref(target))
            elif kind == "view":
                b = Var(name, None, view=target.rebased(lbounds=[const(1)] * target.rank)
                        if not isinstance(selector, F.Name) else target)
            elif kind == "record":
                b = target
            else:
                v = target if isinstance(fold(target), Const) else self.materialize(target, name)
                b = Value(fold(v)) if v.shape == () else Var(name, None, view=ArrayView.whole(v.ref.container))
            saved[name] = frame.bindings.get(name)
            frame.bindings[name] = b
        try:
            body = [c for c in s.children[1:] if not isinstance(c, F.End_Associate_Stmt)]
            return self.block(body)
        finally:
            for name, b in saved.items():
                if b is None:
                    frame.bindings.pop(name, None)
                else:
                    frame.bindings[name] = b

    def st_Allocate_Stmt(self, s):
        F = _fparser()[2]
        for child in s.children:
            if not isinstance(child, F.Allocation_List):
                if child is not None and not isinstance(child, str) and type(child).__name__ == "Alloc_Opt_List":
                    raise unsupported(self.loc, "ALLOCATE with STAT=, SOURCE= or MOLD=", "allocate without them")
                continue
            for alloc in child.children:
                obj, shape = alloc.children[0], alloc.children[1]
                var = self._allocatable(obj)
                if shape is None:
                    if var.is_record:
                        continue            # a derived-type pointer: its components are the data
                    raise unsupported(self.loc, f"ALLOCATE({obj}) without a shape", "give the bounds")
                lbs, exts = [], []
                for spec in shape.children:
                    lo, hi = spec.children
                    lb = const(1) if lo is None else self.int_value(lo)
                    lbs.append(self.snapshot(lb))
                    exts.append(self.snapshot(extent(lb, self.int_value(hi))))
                self.allocate_var(var, lbs, exts)
        return None

    def _allocatable(self, obj):
        F = _fparser()[2]
        if isinstance(obj, F.Name):
            var = self.lookup(str(obj).lower())
        elif isinstance(obj, F.Data_Ref):
            parts = obj.children
            head = F.Data_Ref(" % ".join(str(p) for p in parts[:-1])) if len(parts) > 2 else parts[0]
            kind, rec = self.designate(head)
            if kind != "record":
                raise unsupported(self.loc, f"ALLOCATE({obj})", "allocate a variable or a component")
            var = self.ensure_field(rec, str(parts[-1]).lower())
        else:
            raise unsupported(self.loc, f"ALLOCATE({obj})", "allocate a variable or a component")
        if not isinstance(var, Var):
            raise unsupported(self.loc, f"ALLOCATE({obj})", "it is not an allocatable variable")
        return var

    def allocate_var(self, var, lbounds, extents):
        dtype = var.tspec.dtype(self.loc)
        c = self.temp(var.name, dtype, tuple(reversed(extents)))
        self.emit(Assign(Ref(c), const(0, dtype), loc=self.loc))
        var.view = ArrayView.whole(c, lbounds)


def _increment(ref, v):
    """``e`` when ``v`` is ``ref + e``, ``e + ref`` or ``ref - e`` (``-e``) in ``ref``'s dtype."""
    from ...ir.core import Op, same_ref
    if not isinstance(v, Op) or v.dtype != ref.container.dtype or v.name not in ("add", "subtract"):
        return None
    a, b = v.args

    def is_ref(x):
        return isinstance(x, Read) and same_ref(x.ref, ref)
    if is_ref(a) and not any(is_ref(r) for r in iter_reads(b)):
        return b if v.name == "add" else mk("negative", b)
    if v.name == "add" and is_ref(b) and not any(is_ref(r) for r in iter_reads(a)):
        return a
    return None


class _Loop:
    """One index of a DO CONCURRENT header, as a DO loop."""

    def __init__(self, var, bounds, body):
        self.var, self.bounds, self.body = var, bounds, body
        self.item = None


class _Masked:
    """The mask of a DO CONCURRENT header, as an IF around the body."""

    def __init__(self, mask, body):
        self.mask, self.body = mask, body
        self.item = None


class _Nested:
    """The inner loop of ``DO 10 I ... DO 10 J ... 10 CONTINUE`` (shared termination)."""

    def __init__(self, head, body):
        self.head, self.body = head, body

    @property
    def item(self):
        return self.head.item


__all__ = ["StmtLowering", "LoopCtx"]
