"""The lowering of one Fortran entry procedure, for one call signature, into IR statements.

``Lowering`` holds the scopes (a ``Frame`` per procedure activation being inlined, a
``ModuleScope`` per module), creates containers through its host (the program's own capture,
or the Python frontend when a NumPy function calls the program), and makes the bindings of
declared names lazily. A local's initial value is emitted into its frame's prologue, which
runs at the frame's entry, wherever the name is first used.
"""
from __future__ import annotations

import itertools

import numpy as np

from ...errors import unsupported
from ...ir.core import Assign, Const, Expr, Read, Ref, const_value, iter_reads
from .calls import CallLowering
from .exprs import ExprLowering, const, convert, fold
from .analysis import used_name
from .scope import ArrayView, ProcArg, Value, Var, declarations, field_init, implicit_rules, is_constructor
from .source import _fparser
from .stmts import StmtLowering
from .types import TypeSpec, implicit_default


class ModuleScope:
    """A module's names for one capture."""

    def __init__(self, module):
        self.unit = module
        self.decls = declarations(module)
        self.rules = implicit_rules(module, implicit_default())
        self.bindings = {}
        self.parent = None
        self.dummies = ()
        self.stmt_funcs = {}

    def __repr__(self):
        return f"<module {self.unit.name}>"


class Frame:
    """One activation of a procedure being inlined: its bindings, loops and prologue."""

    def __init__(self, proc, parent):
        self.unit = self.proc = proc
        self.parent = parent
        self.decls = declarations(proc)
        self.rules = implicit_rules(proc, parent.rules if parent is not None else implicit_default())
        self.bindings = {}
        self.dummies = set(proc.dummies)
        self.prologue = []
        self.ret = None             # bool container: RETURN was executed
        self.loops = []             # enclosing DO loops (``stmts.LoopCtx``), innermost last
        self.stmt_funcs = dict(self.decls.stmt_funcs)

    def __repr__(self):
        return f"<frame {self.proc.name}>"


class Lowering(ExprLowering, CallLowering, StmtLowering):
    """Lowers procedures into IR through ``host`` (``container``, ``emit``, ``const_array``).

    ``inputs(scope, decl, path, tspec)`` makes the binding of a module variable the program
    reads (an input of the program, or a constant), given by the host too.
    """

    def __init__(self, library, host, module_input):
        self.library = library
        self.host = host
        self.module_input = module_input
        self.modules = {}
        self.frame = None
        self.loc = None
        self.blocks = [[]]
        self.depth = 0
        self.const_arrays = {}      # container -> its constant value (Fortran order, Fortran shape)
        self._active = ()           # frames being lowered, outermost first
        self.loop_vars = set()      # DO loop counters (never written by the loop's body)
        self.stable_args = set()    # argument containers the program never writes

    # ------------------------------------------------------------ the host interface

    def container(self, hint, dtype, shape, kind="transient", weak=False):
        return self.host.container(hint, dtype, tuple(shape), kind)

    def temp(self, hint, dtype, shape):
        return self.container(hint, dtype, shape)

    def emit(self, stmt):
        if getattr(stmt, "loc", None) is None:
            stmt.loc = self.loc
        self.blocks[-1].append(stmt)
        return stmt

    def collect(self, fn, *args):
        self.blocks.append([])
        try:
            value = fn(*args)
        finally:
            stmts = self.blocks.pop()
        return stmts, value

    def to_expr(self, value, loc=None):
        if isinstance(value, Expr):
            return value
        if isinstance(value, (bool, int, float, np.generic)):
            return const(value)
        raise unsupported(loc or self.loc, f"value {value!r}", "not a number")

    def materialize(self, e, hint="t", loc=None):
        e = self.to_expr(e)
        c = self.temp(hint, e.dtype, e.shape)
        self.emit(Assign(Ref(c) if c.ndim else Ref(c, ()), e, loc=loc or self.loc))
        return Read(Ref(c) if c.ndim else Ref(c, ()))

    def whole(self, e):
        """``e`` as a Read (of a view or a whole container), computed into memory if needed."""
        return e if isinstance(e, Read) else self.materialize(e)

    def const_array(self, value):
        """A constant array given in Fortran's shape, as a read-only container (axes reversed)."""
        value = np.asarray(value)
        stored = np.ascontiguousarray(value.T)
        read = self.host.const_array(stored)
        self.const_arrays[read.ref.container] = value
        return read

    def const_values(self, e):
        """The values of a constant rank-1 value, as a list, else None."""
        if isinstance(e, Read) and e.ref.container in self.const_arrays and e.ref.is_whole():
            return list(np.ravel(self.const_arrays[e.ref.container], order="F"))
        if isinstance(e, Const):
            return [e.value]
        return None

    # ------------------------------------------------------------ scopes and names

    def module_scope(self, name, loc=None):
        scope = self.modules.get(name)
        if scope is None and name in INTRINSIC_MODULES and name not in self.library.modules:
            scope = self.modules[name] = _IntrinsicModule(name)
        if scope is None:
            module = self.library.modules.get(name)
            if module is None:
                raise unsupported(loc or self.loc, f"USE of module {name}",
                                  "its source is not among the sources given to from_fortran; add it")
            scope = self.modules[name] = ModuleScope(module)
        return scope

    def lookup(self, name, create=True, scope=None):
        """The binding of ``name`` in the current scope chain; with ``create``, an undeclared name
        under implicit typing becomes a local of the innermost frame."""
        start = scope or self.frame
        s = start
        while s is not None:
            b = self._own(s, name)
            if b is not None:
                return b
            s = s.parent
        if create and isinstance(start, Frame):
            tnode = start.rules.get(name[0])
            if tnode is not None:
                b = self.make_local(start, None, name, tnode)
                start.bindings[name] = b
                return b
        return None

    def _own(self, s, name):
        """A name bound in scope ``s`` itself (declared, or made available by its USE statements)."""
        b = s.bindings.get(name)
        if b is not None:
            return b
        d = s.decls.decls.get(name)
        if d is not None and not self._names_procedure(s, d):
            b = self.make_binding(s, d)
            s.bindings[name] = b
            return b
        for module, only, renames in s.decls.uses:
            remote = None
            if only is not None:
                remote = next((r for l, r in only if l == name), None)
            else:
                remote = next((r for l, r in renames if l == name), None)
                if remote is None and not any(r == name for l, r in renames):
                    remote = name
            if remote is None:
                continue
            b = self._own(self.module_scope(module), remote)
            if b is not None:
                s.bindings[name] = b
                return b
        return None

    def _names_procedure(self, s, d):
        """Whether declaration ``d`` names a procedure (EXTERNAL, a statement function) rather than a
        variable. A scalar declared with a function's name (``REAL F``) is also made a variable,
        unused where ``F(x)`` is a call."""
        if d.dims is not None or d.parameter or d.init is not None:
            return False
        if isinstance(s, Frame) and (d.name in s.dummies or d.name == s.proc.result and s.proc.kind == "function"):
            return False
        return d.external or d.name in s.stmt_funcs

    def find_procedure(self, name, scope=None):
        """The procedure (a ``ProcDef``, or a list of them for a generic) ``name`` calls here."""
        s = scope or self.frame
        while s is not None:
            if isinstance(s, Frame):
                if name in s.proc.internals:
                    return s.proc.internals[name]
                if isinstance(s.bindings.get(name), ProcArg):
                    return s.bindings[name].proc
            found = self._module_procedure(s, name)
            if found is not None:
                return found
            s = s.parent
        if isinstance(scope or self.frame, Frame) and (scope or self.frame).proc.module is not None:
            ms = self.module_scope((scope or self.frame).proc.module.name)
            found = self._module_procedure(ms, name)
            if found is not None:
                return found
        return self.library.procs.get(name)

    def _module_procedure(self, s, name, seen=None):
        if isinstance(s, ModuleScope):
            if name in s.unit.procs:
                return s.unit.procs[name]
        if name in s.decls.generics:
            return [self.find_procedure(n, s) or _missing(self, n) for n in s.decls.generics[name]]
        seen = seen or set()
        for module, only, renames in s.decls.uses:
            if module in seen:
                continue
            remote = used_name(name, only, renames)
            if remote is None:
                continue
            ms = self.module_scope(module)
            found = self._module_procedure(ms, remote, seen | {module})
            if found is not None:
                return found
        return None

    # ------------------------------------------------------------ types

    def tspec(self, scope, type_node, name=None):
        """The TypeSpec of a type node (kinds evaluated in ``scope``), or of ``name`` implicitly."""
        F = _fparser()[2]
        if type_node is None:
            rules = scope.rules
            tnode = rules.get(name[0]) if name else None
            if tnode is None:
                raise unsupported(self.loc, f"variable {name} without a type under IMPLICIT NONE", "declare it")
            if isinstance(tnode, TypeSpec):
                return tnode
            return self.tspec(scope, tnode)
        if isinstance(type_node, TypeSpec):
            return type_node
        if isinstance(type_node, F.Declaration_Type_Spec):
            word, tname = type_node.children
            if str(word).upper() == "CLASS" and str(tname).strip() == "*":
                raise unsupported(self.loc, "CLASS(*) declarations", "use TYPE(...)")
            # CLASS(T) is its declared type: a variable's type is known where it is declared
            return TypeSpec("type", derived=str(tname).lower())
        base, selector = type_node.children[0], type_node.children[1]
        base = str(base).upper()
        if base == "DOUBLE PRECISION":
            return TypeSpec("real", 8)
        if base == "DOUBLE COMPLEX":
            return TypeSpec("complex", 8)
        base = base.lower()
        if base == "character":
            return TypeSpec("character", 1)
        kind = None
        if selector is not None:
            parts = [c for c in selector.children if c is not None and not isinstance(c, str)]
            if str(selector).lstrip().startswith("*"):
                kind = int(str(parts[0]) if parts else str(selector).strip("* "))
                if base == "complex":
                    kind //= 2
            else:
                saved = self.frame
                self.frame = scope
                try:
                    v = fold(self.value(parts[-1]))
                finally:
                    self.frame = saved
                if const_value(v) is None:
                    raise unsupported(self.loc, f"kind {selector}", "a kind must be a constant")
                kind = int(const_value(v))
        return TypeSpec(base, kind)

    def typedef(self, scope, name):
        """The ``Derived_Type_Def`` node of derived type ``name`` visible from ``scope``."""
        s = scope
        while s is not None:
            found = self._own_typedef(s, name, set())
            if found is not None:
                return found
            s = s.parent
        raise unsupported(self.loc, f"TYPE({name})", "its definition is not in the sources given")

    def _own_typedef(self, s, name, seen):
        if name in s.decls.typedefs:
            return s, s.decls.typedefs[name]
        for module, only, renames in s.decls.uses:
            if module in seen:
                continue
            remote = name
            if only is not None:
                remote = next((r for l, r in only if l == name), None)
            if remote is None:
                continue
            found = self._own_typedef(self.module_scope(module), remote, seen | {module})
            if found is not None:
                return found
        return None

    # ------------------------------------------------------------ bindings

    def in_scope(self, scope, fn, *args):
        """Run ``fn`` with names resolved in ``scope``."""
        saved = self.frame
        self.frame = scope
        try:
            return fn(*args)
        finally:
            self.frame = saved

    def make_binding(self, scope, d):
        if d.parameter:
            return self.parameter(scope, d)
        if isinstance(scope, ModuleScope):
            return self.module_input(self, scope, d, f"{scope.unit.name}.{d.name}")
        if d.name in scope.dummies:
            raise unsupported(self.loc, f"dummy argument {d.name} of {scope.proc.name} not bound",
                              "this is a flowgrad bug")
        return self.make_local(scope, d, d.name, d.type_node)

    def parameter(self, scope, d, init=None):
        """A PARAMETER's binding: a ``Value``, a read-only constant array, or a record of constant
        components. ``init``: (scope, node) of its value, where not ``d.init`` read in ``scope``."""
        iscope, node = init or (scope, d.init)
        tspec = self.tspec(scope, d.type_node, d.name)
        if tspec.base == "type":
            return self.record(scope, d.name, tspec, d, self._constant_field, init=(iscope, node))
        if node is None:
            raise unsupported(scope.unit.loc(d.node), f"PARAMETER {d.name} without a value",
                              "give every component a value in the structure constructor")
        v = self.in_scope(iscope, self.value, node)
        if d.dims is not None:
            dims = self.eval_dims(scope, d)
            values = self.const_values(v) if v.shape != () else None
            if v.shape == () and const_value(v) is not None:
                shape = tuple(int(const_value(e)) for lb, e in dims)
                values = np.full(shape, const_value(v))
            elif values is not None:
                shape = tuple(int(const_value(e)) for lb, e in dims)
                values = np.reshape(np.asarray(values), shape, order="F")
            if values is None:
                raise unsupported(scope.unit.loc(d.node), f"PARAMETER array {d.name}",
                                  "its value must be an array constructor of constants")
            arr = self.const_array(np.asarray(values, dtype=tspec.dtype(self.loc)))
            c = arr.ref.container
            return Var(d.name, tspec, view=ArrayView.whole(c, [lb for lb, e in dims]), readonly=True, decl=d)
        v = fold(convert(v, tspec.dtype(self.loc)))
        if not isinstance(v, Const):
            raise unsupported(scope.unit.loc(d.node), f"PARAMETER {d.name}", "its value must be a constant expression")
        return Value(v, tspec)

    def _constant_field(self, var, comp, cdecl, owner):
        return self.parameter(owner, cdecl, field_init(var, comp, cdecl, owner))

    def eval_dims(self, scope, d):
        """[(lower bound, extent)] of an explicit-shape declaration, evaluated in ``scope``."""
        out = []
        for kind, lo, hi in d.dims:
            if kind != "explicit":
                raise unsupported(self.loc, f"array {d.name} with shape ({kind})", "give explicit bounds")
            lb = const(1) if lo is None else self.in_scope(scope, self.int_value, lo)
            ub = self.in_scope(scope, self.int_value, hi)
            from .scope import extent
            out.append((lb, extent(lb, ub)))
        return out

    def make_local(self, frame, d, name, type_node):
        """A local variable of ``frame``, initialised in its prologue."""
        tspec = self.tspec(frame, type_node, name)
        with_prologue = _Prologue(self, frame)
        with with_prologue:
            if tspec.base == "type":
                return self.record(frame, name, tspec, d)
            dtype = tspec.dtype(self.loc)
            if d is not None and d.dims is not None:
                if d.allocatable or d.pointer:
                    return Var(name, tspec, view=None, decl=d)
                dims = self.eval_dims(frame, d)
                extents = [self.snapshot(e) for lb, e in dims]
                lbounds = [self.snapshot(lb) for lb, e in dims]
                c = self.temp(name, dtype, tuple(reversed(extents)))
                view = ArrayView.whole(c, lbounds)
                data = self.data_values(frame).get(name)
                if data is not None:
                    shape = tuple(const_value(fold(e)) for e in extents)
                    if None in shape:
                        raise unsupported(self.loc, f"DATA for {name}, an array of run-time size",
                                          "give it constant bounds")
                    flat = np.zeros(int(np.prod(shape)), dtype=dtype)
                    for k, v in data.items():
                        flat[k] = const_value(v)
                    init = self.const_array(np.reshape(flat, shape, order="F"))
                else:
                    init = const(0, dtype) if d.init is None else self.in_scope(frame, self.value, d.init)
                self.emit(Assign(Ref(c), convert(init, dtype, self.loc)))
                return Var(name, tspec, view=view, decl=d)
            c = self.temp(name, dtype, ())
            data = self.data_values(frame).get(name)
            if data is not None:
                init = data[0]
            else:
                init = const(0, dtype) if d is None or d.init is None else self.in_scope(frame, self.value, d.init)
            self.emit(Assign(Ref(c, ()), convert(init, dtype, self.loc)))
            return Var(name, tspec, ref=Ref(c, ()), decl=d)

    def data_values(self, frame):
        """Name -> {position in array element order: constant value} of what DATA statements
        give it (whole variables, elements, sections and implied DOs)."""
        cached = getattr(frame, "_data", None)
        if cached is not None:
            return cached
        F = _fparser()[2]
        cached = frame._data = {}
        for stmt in frame.decls.data:
            for dset in stmt.children:
                if not isinstance(dset, F.Data_Stmt_Set):
                    continue
                objects, vals = dset.children
                values = []
                for v in vals.children:
                    if isinstance(v, F.Data_Stmt_Value):
                        rep, c = v.children
                        values += [self.in_scope(frame, self.value, c)] * int(const_value(self.in_scope(
                            frame, self.value, rep)))
                    else:
                        values.append(self.in_scope(frame, self.value, v))
                targets = [t for obj in objects.children for t in self._data_targets(frame, obj, stmt)]
                if len(targets) != len(values):
                    raise unsupported(frame.unit.loc(stmt), f"DATA with {len(values)} values for {len(targets)} "
                                      "elements", "give one value per element")
                for (name, k), v in zip(targets, values):
                    cached.setdefault(name, {})[k] = fold(v)
        return cached

    def _data_targets(self, frame, obj, stmt):
        """(name, position in array element order) of each element DATA object ``obj`` names."""
        F = _fparser()[2]
        if isinstance(obj, F.Data_Implied_Do):
            items, var, *control = obj.children
            first, last, step = (1 if e is None else self._data_int(frame, e, stmt) for e in control)
            var = str(var).lower()
            saved = frame.bindings.get(var)
            out = []
            try:
                for i in range(first, last + (1 if step > 0 else -1), step):
                    frame.bindings[var] = Value(const(i))
                    out += [t for item in items.children for t in self._data_targets(frame, item, stmt)]
            finally:
                if saved is None:
                    frame.bindings.pop(var, None)
                else:
                    frame.bindings[var] = saved
            return out
        name = str(obj if isinstance(obj, F.Name) else obj.children[0]).lower()
        decl = frame.decls.decls.get(name)
        bounds = [] if decl is None or decl.dims is None else [
            (int(const_value(fold(lb))), int(const_value(fold(e)))) for lb, e in self.eval_dims(frame, decl)]
        if isinstance(obj, F.Name):
            subscripts = [range(lb, lb + n) for lb, n in bounds]
        elif isinstance(obj, F.Part_Ref) and len(obj.children[1].children) == len(bounds):
            subscripts = []
            for sub, (lb, n) in zip(obj.children[1].children, bounds):
                if isinstance(sub, F.Subscript_Triplet):
                    lo, hi, st = (None if e is None else self._data_int(frame, e, stmt) for e in sub.children)
                    subscripts.append(range(lb if lo is None else lo, (lb + n - 1 if hi is None else hi) + 1,
                                            st or 1))
                else:
                    subscripts.append([self._data_int(frame, sub, stmt)])
        else:
            raise unsupported(frame.unit.loc(stmt), f"DATA for {obj}", "initialise variables, elements, sections "
                              "or implied DOs of them")
        out = []
        for at in itertools.product(*reversed(subscripts)):      # the first subscript varies fastest
            k, stride = 0, 1
            for i, (lb, n) in zip(reversed(at), bounds):
                k, stride = k + (i - lb) * stride, stride * n
            out.append((name, k))
        return out

    def _data_int(self, frame, node, stmt):
        v = const_value(fold(self.in_scope(frame, self.int_value, node)))
        if v is None:
            raise unsupported(frame.unit.loc(stmt), f"DATA subscript {node}", "subscripts must be constants")
        return int(v)

    def snapshot(self, e):
        """An integer known at frame entry: a constant as it is, else its value saved then (a
        later write to what it reads does not change a bound)."""
        e = fold(e)
        if isinstance(e, Const):
            return e
        if all(r.ref.container.kind == "arg" for r in iter_reads(e)):
            return e
        return self.materialize(e, "extent")

    def record(self, scope, name, tspec, d, make_field=None, init=None):
        """A derived-type variable: its components are made on first use (``ensure_field``), from
        the structure constructor that initialises it (``init``: (scope, node), by default
        ``d.init`` in ``scope``), else from their default values."""
        if d is not None and d.dims is not None:
            raise unsupported(self.loc, f"array of derived type TYPE({tspec.derived}) {name}",
                              "use a derived type whose components are arrays")
        owner, tdef = self.typedef(scope, tspec.derived)
        comps = _components(self, owner, tdef)
        var = Var(name, tspec, fields={c: None for c in comps}, decl=d)
        var.source = (owner, comps, make_field or self._local_field(scope))
        iscope, node = init or (scope, d.init if d is not None else None)
        var.inits = {} if node is None else self.constructor_values(iscope, tspec, comps, node)
        return var

    def constructor_values(self, scope, tspec, comps, node):
        """Component -> (scope, value node) of the structure constructor ``node`` of TYPE(tspec)."""
        F = _fparser()[2]
        if not is_constructor(node, tspec):
            raise unsupported(self.loc, f"value {node} for a TYPE({tspec.derived}) variable",
                              f"give a structure constructor {tspec.derived}(...) or a variable of the type")
        names, out = list(comps), {}
        items = node.children[1].children if node.children[1] is not None else ()
        for k, item in enumerate(items):
            if isinstance(item, (F.Component_Spec, F.Actual_Arg_Spec)):
                comp, value = str(item.children[0]).lower(), item.children[1]
            elif k < len(names):
                comp, value = names[k], item
            else:
                raise unsupported(self.loc, f"structure constructor {node}", f"TYPE({tspec.derived}) has "
                                  f"{len(names)} components")
            if comp not in comps:
                raise unsupported(self.loc, f"component {comp} in {node}",
                                  f"TYPE({tspec.derived}) has no such component")
            out[comp] = (scope, value)
        return out

    def _local_field(self, frame):
        def make(var, comp, cdecl, owner):
            tspec = self.tspec(owner, cdecl.type_node, cdecl.name)
            iscope, node = field_init(var, comp, cdecl, owner)
            with _Prologue(self, frame):
                if tspec.base == "type":
                    return self.record(owner, f"{var.name}_{comp}", tspec, cdecl, self._local_field(frame),
                                       init=(iscope, node))
                dtype = tspec.dtype(self.loc)
                init = None if node is None else self.in_scope(iscope, self.value, node)
                if cdecl.dims is not None:
                    if cdecl.allocatable or cdecl.pointer:
                        return Var(comp, tspec, view=None, decl=cdecl)
                    dims = self.eval_dims(owner, cdecl)
                    c = self.temp(f"{var.name}_{comp}", dtype, tuple(reversed([e for lb, e in dims])))
                    self.emit(Assign(Ref(c), convert(init if init is not None else const(0, dtype), dtype)))
                    return Var(comp, tspec, view=ArrayView.whole(c, [lb for lb, e in dims]), decl=cdecl)
                c = self.temp(f"{var.name}_{comp}", dtype, ())
                self.emit(Assign(Ref(c, ()), convert(init if init is not None else const(0, dtype), dtype)))
                return Var(comp, tspec, ref=Ref(c, ()), decl=cdecl)
        return make

    def ensure_field(self, var, comp):
        f = var.fields.get(comp)
        if f is None:
            owner, comps, make = var.source
            f = var.fields[comp] = make(var, comp, comps[comp], owner)
        return f

    # ------------------------------------------------------------ frames

    def host_frame(self, proc):
        """The scope a procedure's names fall back to: its host procedure's active frame (an
        internal procedure), its module's scope, or None (an external procedure)."""
        if proc.host is not None:
            for fr in reversed(self._active):
                if fr.proc is proc.host:
                    return fr
            raise unsupported(self.loc, f"call of internal procedure {proc.name} from outside its host",
                              "call it from its host procedure")
        if proc.module is not None:
            return self.module_scope(proc.module.name)
        return None

    def warn(self, message):
        import warnings
        warnings.warn(f"{self.loc}: {message}", stacklevel=2)


# the kind constants of the intrinsic modules, as gfortran defines them
INTRINSIC_MODULES = {
    "iso_fortran_env": {"real32": 4, "real64": 8, "real128": 16, "int8": 1, "int16": 2, "int32": 4, "int64": 8,
                        "numeric_storage_size": 32, "character_storage_size": 8, "file_storage_size": 8},
    "iso_c_binding": {"c_double": 8, "c_float": 4, "c_long_double": 10, "c_int": 4, "c_short": 2, "c_long": 8,
                      "c_long_long": 8, "c_int8_t": 1, "c_int16_t": 2, "c_int32_t": 4, "c_int64_t": 8,
                      "c_size_t": 8, "c_bool": 1, "c_char": 1},
    # its inquiry functions (IEEE_IS_NAN, IEEE_IS_FINITE) are intrinsics
    "ieee_arithmetic": {},
}


class _IntrinsicModule:
    """An intrinsic module (ISO_FORTRAN_ENV, ISO_C_BINDING): its named kind constants."""

    def __init__(self, name):
        from .scope import Declarations

        class _Unit:
            procs = {}
        self.unit = _Unit()
        self.unit.name = name
        self.decls = Declarations()
        self.rules = {}
        self.parent = None
        self.dummies = ()
        self.stmt_funcs = {}
        self.bindings = {k: Value(const(v), TypeSpec("integer")) for k, v in INTRINSIC_MODULES[name].items()}


class _Prologue:
    """Emit into a frame's prologue (and resolve names there) for the duration of a ``with``."""

    def __init__(self, lo, frame):
        self.lo, self.frame = lo, frame

    def __enter__(self):
        self.lo.blocks.append(self.frame.prologue)
        self.saved = self.lo.frame
        self.lo.frame = self.frame

    def __exit__(self, *exc):
        self.lo.blocks.pop()
        self.lo.frame = self.saved


def _components(lo, owner, tdef):
    """Component name -> Decl of a ``Derived_Type_Def`` (parsed once)."""
    cached = getattr(tdef, "_flowgrad_components", None)
    if cached is not None:
        return cached
    F = _fparser()[2]
    from .scope import Decl, _array_spec
    comps = {}
    parent = _parent_type(tdef)
    if parent is not None:                  # TYPE, EXTENDS(T): T's components come first
        comps.update(_components(lo, *lo.typedef(owner, parent)))
    for s in _type_statements(tdef, F.Component_Part, F.Data_Component_Def_Stmt):
        tnode, attrs, decls = s.children
        common = Decl("")
        dims = None
        for a in (attrs.children if attrs is not None else ()):
            word = str(a).upper()
            if word.startswith("DIMENSION"):
                dims = _array_spec(a.children[1], owner.unit.loc)
            elif word == "ALLOCATABLE":
                common.allocatable = True
            elif word == "POINTER":
                common.pointer = True
        for cd in decls.children:
            name, spec, _length, init = cd.children
            d = Decl(str(name).lower())
            d.type_node, d.node = tnode, s
            d.allocatable, d.pointer = common.allocatable, common.pointer
            d.dims = _array_spec(spec, owner.unit.loc) if spec is not None else dims
            if init is not None and str(init.children[0]).strip() == "=":
                d.init = init.children[1]
            comps[d.name] = d
    tdef._flowgrad_components = comps
    return comps


def _parent_type(tdef):
    """The name of the type a ``TYPE, EXTENDS(T)`` definition extends, else None."""
    F = _fparser()[2]
    attrs = tdef.children[0].children[0]
    for a in (attrs.children if attrs is not None else ()):
        if isinstance(a, F.Type_Attr_Spec) and str(a.children[0]).upper() == "EXTENDS":
            return str(a.children[1]).lower()
    return None


def type_bindings(lo, owner, tdef):
    """Binding name -> (procedure name, the scope it is found from, its passed-object dummy: None
    for the first, a name for PASS(name), False for NOPASS) of a derived type's type-bound
    procedures, those of the type it extends included (and overridden)."""
    F = _fparser()[2]
    parent = _parent_type(tdef)
    out = dict(type_bindings(lo, *lo.typedef(owner, parent))) if parent is not None else {}
    for b in _type_statements(tdef, F.Type_Bound_Procedure_Part, F.Specific_Binding):
        _iface, attrs, _, name, proc = b.children
        passed = None
        for a in (attrs.children if attrs is not None else ()):
            if isinstance(a, F.Binding_PASS_Arg_Name):
                passed = str(a.children[1]).lower()
            elif str(a).upper() == "NOPASS":
                passed = False
        out[str(name).lower()] = (str(proc if proc is not None else name).lower(), owner, passed)
    return out


def _type_statements(tdef, part, kind):
    """The statements of class ``kind`` in the parts of class ``part`` of a type definition."""
    for p in tdef.children:
        if isinstance(p, part):
            yield from (s for s in p.children if isinstance(s, kind))


def _missing(lo, name):
    raise unsupported(lo.loc, f"procedure {name} of a generic interface", "its source is not among the sources")


__all__ = ["Lowering", "Frame", "ModuleScope"]
