"""``FortranProgram``: a Fortran procedure as a program flowgrad runs and differentiates.

The program is captured per call signature (array shapes and dtypes, the kinds of scalars,
the values of integer dummies that size array dummies, the shapes of allocatable module
arrays), like any flowgrad function. Arguments follow numpy.f2py: ``a(i, j)`` is ``A[i - 1,
j - 1]`` (``A[i - l1, j - l2]`` for lower bounds ``l1``, ``l2``), in any memory order; an
array the routine's loops revisit is copied into column-major order (IR axes reversed), one it
reads about once is read in the caller's layout through a permuted view. Its results are the dummies
the routine may write, in argument order, after a function's result; with several, the IR
result is one flat vector of them all (in float64 unless every one is float32), unpacked here.
"""
from __future__ import annotations

import numpy as np

from ...errors import FlowgradError, InputError, unsupported
from ...ir.core import BOOL, I64, Assign, Call, Const, Read, Ref, Slice, const_value
from .. import Captured
from ..python import Namer
from .analysis import written_names
from .exprs import const, convert, fold
from .lowering import Frame, Lowering
from .scope import Absent, ArrayView, Value, Var, extent, field_init
from .types import F32, F64


class _Host:
    """Containers and parameters of a program captured on its own."""

    def __init__(self):
        self.namer = Namer()
        self.containers = {}
        self.params = []
        self.sources = []       # per parameter: ("arg", position), ("module", path) or ("const", value)
        self._consts = {}

    def container(self, hint, dtype, shape, kind="transient"):
        from ...ir.core import Container
        c = Container(self.namer(hint), dtype, shape, kind)
        self.containers[c.name] = c
        return c

    def param(self, hint, dtype, shape, source):
        c = self.container(hint, dtype, shape, "arg")
        self.params.append(c)
        self.sources.append(source)
        return c

    def const_array(self, value):
        key = (value.dtype.str, value.shape, value.tobytes())
        if key not in self._consts:
            c = self.param("const", value.dtype, tuple(Const(int(d)) for d in value.shape), ("const", value))
            self._consts[key] = c
        return Read(Ref(self._consts[key]))


class _PythonHost:
    """Containers made in a Python function's capture (the program called inside it)."""

    def __init__(self, fe):
        self.fe = fe

    def container(self, hint, dtype, shape, kind="transient"):
        return self.fe.container(hint, dtype, shape, kind)

    def const_array(self, value):
        return self.fe.const_array(value)


class _Call:
    """The arguments of one call and the module values it runs with."""

    def __init__(self, args, modules):
        self.args, self.modules = args, modules


class Capture:
    """The IR of one entry procedure for one call signature."""

    def __init__(self, prog, args, modules, host=None, loc=None):
        self.prog = prog
        self.standalone = host is None
        self.host = host or _Host()
        self.modules = modules
        self.inputs_made = {}       # module path -> (container or binding, tspec, default)
        self.lo = Lowering(prog.library, self.host, self.module_input)
        self.lo.loc = loc or prog.proc.loc()
        self.arg_containers = {}
        self.checks = []            # (dummy, value) of integer dummies the capture took as constants
        self.reshapes = {}          # dummy -> the caller's shape, where sequence association reshaped it

    # ------------------------------------------------------------ module variables

    def module_input(self, lo, scope, d, path):
        """A module variable the program reads: an input (standalone), else its value folded in."""
        tspec = lo.tspec(scope, d.type_node, d.name)
        loc = scope.unit.loc(d.node)
        if tspec.base == "type":
            return lo.record(scope, d.name, tspec, d, self._module_field(path))
        return self._input_var(lo, scope, d, path, tspec, loc, (scope, d.init))

    def _module_field(self, path):
        def make(var, comp, cdecl, owner):
            lo = self.lo
            tspec = lo.tspec(owner, cdecl.type_node, cdecl.name)
            sub = f"{path}.{comp}"
            init = field_init(var, comp, cdecl, owner)
            if tspec.base == "type":
                return lo.record(owner, cdecl.name, tspec, cdecl, self._module_field(sub), init=init)
            return self._input_var(lo, owner, cdecl, sub, tspec, owner.unit.loc(cdecl.node), init)
        return make

    def _given(self, path):
        node = self.modules
        for part in path.split("."):
            if not isinstance(node, dict):
                return _MISSING
            found = _MISSING
            for k, v in node.items():
                if k.lower() == part:
                    found = v
            if found is _MISSING:
                return _MISSING
            node = found
        return node

    def _input_var(self, lo, scope, d, path, tspec, loc, init):
        """Module variable ``path`` declared by ``d`` in ``scope``, initialised by ``init``: (scope,
        node); its default is that value (a NumPy scalar or array in Fortran's shape), or None."""
        dtype = tspec.dtype(loc)
        dims = d.dims
        default = None
        iscope, node = init
        if node is not None:
            v = fold(convert(lo.in_scope(iscope, lo.value, node), dtype))
            default = v.value if isinstance(v, Const) else lo.const_values(v)
            if default is None:
                raise unsupported(loc, f"initial value of module variable {path}", "it must be a constant")
        given = self._given(path)
        if dims is None:
            if not self.standalone:
                value = given if given is not _MISSING else default
                if value is not None:
                    value = const(np.asarray(value, dtype=dtype)[()], dtype)
                if value is None:
                    raise InputError(f"module variable {path} has no initial value: give it in modules=")
                return Value(value, tspec)
            c = self.host.param(path.replace(".", "_"), dtype, (), ("module", path))
            self.inputs_made[path] = (c, tspec, default, None)
            self.arg_containers[path] = c
            # the routine may assign it: it works on a copy made at entry
            local = lo.temp(d.name, dtype, ())
            self.top.prologue.append(Assign(Ref(local, ()), Read(Ref(c, ())), loc=loc))
            return Var(d.name, tspec, ref=Ref(local, ()), decl=d)
        if any(k != "explicit" for k, lo_, hi in dims):
            if given is _MISSING:
                raise InputError(f"module array {path} is allocatable: give its value in modules=")
            arr = np.asarray(given)
            shape = arr.shape
            lbounds = [const(1)] * len(shape)
        else:
            bounds = lo.eval_dims(scope, d)
            shape = tuple(const_value(fold(e)) for lb, e in bounds)
            if None in shape:
                raise unsupported(loc, f"module array {path} with bounds known only at run time", "use constants")
            lbounds = [lb for lb, e in bounds]
        if default is not None:
            default = np.reshape(np.asarray(default, dtype=dtype), shape, order="F") if np.size(default) > 1 \
                else np.full(shape, np.ravel(default)[0], dtype=dtype)
        if not self.standalone:
            if given is _MISSING:
                if default is None:
                    raise InputError(f"module array {path} has no initial value: give it in modules=")
                value = default
            else:
                value = np.asarray(given, dtype=dtype)
            read = lo.const_array(value)
            return Var(d.name, tspec, view=ArrayView.whole(read.ref.container, lbounds), readonly=True, decl=d)
        c = self.host.param(path.replace(".", "_"), dtype, tuple(Const(int(n)) for n in reversed(shape)),
                            ("module", path))
        self.inputs_made[path] = (c, tspec, default, shape)
        self.arg_containers[path] = c
        return Var(d.name, tspec, view=ArrayView.whole(c, lbounds), decl=d)

    # ------------------------------------------------------------ the entry's dummies

    def bind_dummies(self, frame, args):
        lo = self.lo
        proc = self.prog.proc
        decls = frame.decls.decls
        sizing = self.prog.sizing
        written = set(written_names(self.prog.library, proc))
        order = sorted(range(len(proc.dummies)), key=lambda k: decls.get(proc.dummies[k]) is not None
                       and decls[proc.dummies[k]].dims is not None)
        prologue = self.entry = []
        for k in order:
            d = proc.dummies[k]
            dd = decls.get(d)
            value = args[k]
            if value is None and dd is not None and dd.optional:
                frame.bindings[d] = Absent(d)
                continue
            tspec = lo.tspec(frame, dd.type_node if dd is not None else None, d)
            if tspec.base in ("type", "character", "complex"):
                raise unsupported(proc.loc(dd.node if dd is not None else None),
                                  f"{tspec.base} dummy argument {d} of the entry procedure",
                                  "pass numeric and LOGICAL arrays and scalars")
            if value is None:
                if dd is not None and dd.intent == "out":
                    frame.bindings[d] = self.omitted(frame, d, dd)
                    continue
                raise InputError(f"argument {d!r} of {proc.name} is not OPTIONAL: pass a value")
            dtype = tspec.dtype(lo.loc)
            if dd is not None and dd.dims is not None:
                frame.bindings[d] = self.array_dummy(frame, k, d, dd, tspec, dtype, value)
                continue
            if isinstance(value, np.ndarray) and value.ndim == 0:
                value = value[()]
            if isinstance(value, np.ndarray) and value.ndim:
                raise InputError(f"argument {d!r} of {proc.name} is a scalar, but an array of shape "
                                 f"{value.shape} was passed")
            if dtype == I64 and not isinstance(value, (int, np.integer)) or dtype == BOOL and \
                    not isinstance(value, (bool, np.bool_)):
                raise InputError(f"argument {d!r} of {proc.name} is {tspec.base.upper()}, not "
                                 f"{type(value).__name__}")
            if d in sizing and d not in written:
                frame.bindings[d] = Value(const(int(value)), tspec)
                self.checks.append((k, int(value)))
                continue
            c = self.host.param(d, dtype, (), ("arg", k))
            self.arg_containers[d] = c
            if d in written:
                local = lo.temp(d, dtype, ())
                prologue.append(Assign(Ref(local, ()), Read(Ref(c, ())), loc=lo.loc))
                frame.bindings[d] = Var(d, tspec, ref=Ref(local, ()), decl=dd)
            else:
                lo.stable_args.add(c)
                frame.bindings[d] = Var(d, tspec, ref=Ref(c, ()), decl=dd)
        return prologue

    def array_dummy(self, frame, k, d, dd, tspec, dtype, value):
        lo = self.lo
        if not isinstance(value, np.ndarray):
            value = np.asarray(value)
        if value.dtype.kind not in "biuf":
            raise InputError(f"argument {d!r} has dtype {value.dtype}; pass a real, integer or boolean array")
        shape = value.shape
        rank = len(dd.dims)
        lbounds = [const(1) if lo_ is None else fold(lo.in_scope(frame, lo.int_value, lo_))
                   for kind, lo_, hi in dd.dims]
        want = []
        for (kind, lo_, hi), lb in zip(dd.dims, lbounds):
            if kind == "explicit":
                want.append(const_value(fold(extent(lb, lo.in_scope(frame, lo.int_value, hi)))))
            else:
                want.append(None)
        if rank != len(shape) or any(w is not None and w != s for w, s in zip(want, shape)):
            known = [w for w in want if w is not None]
            size = int(np.prod(shape))
            if len(known) == rank and int(np.prod(known)) == size or \
                    dd.dims[-1][0] == "size" and len(known) == rank - 1 and size % max(int(np.prod(known)), 1) == 0:
                # sequence association: the caller's array seen in the dummy's shape
                new = tuple(known) if len(known) == rank else tuple(known) + (size // max(int(np.prod(known)), 1),)
                self.reshapes[d] = (shape, new)
                shape = new
            else:
                decl = ", ".join("*" if w is None else str(w) for w in want)
                raise InputError(f"argument {d!r} of {self.prog.proc.name} is declared ({decl}) but has shape {shape}")
        for lb in lbounds:
            if const_value(lb) is None:
                raise unsupported(lo.loc, f"lower bound of {d} known only at run time", "use constant lower bounds "
                                  "or integer arguments that also size an array")
        user = tuple(Const(int(n)) for n in value.shape)
        c = self.host.param(d, dtype, user, ("arg", k))
        self.arg_containers[d] = c
        if len(value.shape) <= 1 and d not in self.reshapes:
            return Var(d, tspec, view=ArrayView.whole(c, lbounds), decl=dd)
        if d not in self.reshapes and d not in self.prog.reused:
            # read about once per element: the routine reads the caller's layout where it lies
            axes = [("dim", k, 0, 1) for k in range(len(shape))]
            return Var(d, tspec, view=ArrayView(c, axes, lbounds, list(c.shape)), decl=dd)
        # an array the loops revisit is copied into column-major order, so that Fortran's loops
        # walk memory in order; the argument keeps the caller's layout, and so does its gradient
        from .. import numpy_api
        read = Read(Ref(c))
        if len(value.shape) > 1:
            read = numpy_api._transpose(lo, lo.loc, read)
        work = lo.temp(d, dtype, tuple(Const(int(n)) for n in reversed(shape)))
        if d in self.reshapes:
            src = read
            if len(value.shape) > 1:
                t = lo.temp(d + "_t", dtype, tuple(Const(int(n)) for n in reversed(value.shape)))
                self.entry.append(Assign(Ref(t), read, loc=lo.loc))
                src = Read(Ref(t))
            self.entry.append(Call("reshape", [src], [work], {"shape": work.shape}, loc=lo.loc))
        else:
            self.entry.append(Assign(Ref(work), read, loc=lo.loc))
        return Var(d, tspec, view=ArrayView.whole(work, lbounds), decl=dd)

    def omitted(self, frame, d, dd):
        """An INTENT(OUT) dummy the call leaves out: a local of its declared shape (as f2py makes
        it)."""
        try:
            return self.lo.make_local(frame, dd, d, dd.type_node)
        except FlowgradError as exc:
            raise InputError(f"argument {d!r} of {self.prog.proc.name} was left out, but its shape is not known "
                             f"without it ({exc}): pass an array") from None

    def bind_values(self, frame, args):
        """Dummies bound to the values of a call in a Python function's capture: numbers are
        constants, arrays are copied into the routine's own (column-major) containers."""
        from .. import numpy_api
        from ...ir.core import Expr
        lo, fe = self.lo, self.host.fe
        proc = self.prog.proc
        decls = frame.decls.decls
        written = set(written_names(self.prog.library, proc))
        order = sorted(range(len(proc.dummies)), key=lambda k: decls.get(proc.dummies[k]) is not None
                       and decls[proc.dummies[k]].dims is not None)
        entry = []
        for k in order:
            d = proc.dummies[k]
            dd = decls.get(d)
            value = args[k]
            if value is None:
                if dd is not None and dd.optional:
                    frame.bindings[d] = Absent(d)
                    continue
                if dd is not None and dd.intent == "out":
                    frame.bindings[d] = self.omitted(frame, d, dd)
                    continue
                raise unsupported(lo.loc, f"call of {proc.name} without argument {d}", "pass it")
            tspec = lo.tspec(frame, dd.type_node if dd is not None else None, d)
            dtype = tspec.dtype(lo.loc)
            if isinstance(value, np.ndarray):
                value = fe.const_array(value) if value.ndim else const(value[()])
            if isinstance(value, (bool, int, float, np.generic)):
                value = const(np.asarray(value).astype(dtype)[()], dtype)
            if not isinstance(value, Expr):
                raise unsupported(lo.loc, f"argument {d} of {proc.name} of type {type(value).__name__}",
                                  "pass arrays and numbers")
            if dd is not None and dd.dims is not None:
                rank = len(dd.dims)
                if len(value.shape) != rank:
                    raise unsupported(lo.loc, f"argument {d} of {proc.name} with {len(value.shape)} axes",
                                      f"the dummy has {rank} dimensions")
                read = value if isinstance(value, Read) else fe.materialize(value, d)
                if rank > 1:
                    read = numpy_api._transpose(fe, lo.loc, read)
                work = lo.temp(d, dtype, read.shape)
                entry.append(Assign(Ref(work), convert(read, dtype, lo.loc), loc=lo.loc))
                lbounds = [const(1) if lo_ is None else fold(lo.in_scope(frame, lo.int_value, lo_))
                           for kind, lo_, hi in dd.dims]
                frame.bindings[d] = Var(d, tspec, view=ArrayView.whole(work, lbounds), decl=dd)
                continue
            if value.shape != ():
                raise unsupported(lo.loc, f"array argument {d} of {proc.name}", "the dummy is a scalar")
            v = fold(convert(value, dtype, lo.loc))
            if isinstance(v, Const) and d not in written:
                frame.bindings[d] = Value(v, tspec)
                continue
            c = lo.temp(d, dtype, ())
            entry.append(Assign(Ref(c, ()), v, loc=lo.loc))
            frame.bindings[d] = Var(d, tspec, ref=Ref(c, ()), decl=dd)
        return entry

    # ------------------------------------------------------------ the whole capture

    def run(self, args):
        """(body statements, output Vars) of the entry called with ``args``."""
        lo = self.lo
        proc = self.prog.proc
        frame = self.top = Frame(proc, lo.host_frame(proc))
        lo.frame = frame
        prologue = self.bind_dummies(frame, args) if self.standalone else self.bind_values(frame, args)
        stmts, result = lo.collect(lo.lower_frame, frame)
        outputs = []
        if proc.kind == "function":
            outputs.append(frame.bindings[proc.result])
        for d in self.prog.output_dummies:
            outputs.append(frame.bindings[d])
        return prologue + frame.prologue + stmts, outputs


_MISSING = object()


def capture_program(prog, args, modules):
    """The ``Captured`` record of ``prog`` for ``args``, and how to unpack its result."""
    cap = Capture(prog, args, modules)
    body, outputs = cap.run(args)
    host, lo = cap.host, cap.lo
    lo.blocks = [body]
    lo.loc = prog.proc.loc()
    layout = []                 # per output: (name, offset, size, Fortran shape, dtype, out dtype)
    if len(outputs) == 1 and not outputs[0].is_record:
        res = _single_result(lo, outputs[0])
        v = outputs[0]
        layout.append((prog.outputs[0], None, None, _fshape(v), v.view.container.dtype if v.is_array
                       else v.ref.container.dtype, v.tspec.out_dtype()))
    else:
        res, layout = _packed_result(lo, prog, outputs)
    name = "f_" + prog.proc.name
    sources = list(host.sources)

    def inputs(call_args):
        if isinstance(call_args, _Call):
            args_, mods = call_args.args, call_args.modules
        else:
            args_, mods = tuple(call_args), prog.bound_modules
        prog._check_args(args_, cap)
        out = []
        for src in sources:
            kind, what = src
            if kind == "arg":
                value = args_[what]
                c_dtype = _param_dtype(host, src)
                out.append(np.asarray(value, dtype=c_dtype) if np.ndim(value) else c_dtype.type(value))
            elif kind == "module":
                out.append(prog._module_value(what, cap, mods))
            else:
                out.append(what)
        return out

    captured = Captured(name, host.params, lo.blocks[0], res, host.containers, host.namer, cap.arg_containers,
                        inputs)
    captured.layout = layout
    captured.fortran = cap
    return captured


def inline_program(prog, fe, args, loc):
    """Lower ``prog`` called with ``args`` into a Python function's capture ``fe``; returns its
    outputs as values of that capture (arrays in the caller's layout)."""
    from .. import numpy_api
    cap = Capture(prog, args, prog.bound_modules, host=_PythonHost(fe), loc=loc)
    body, outputs = cap.run(args)
    for s in body:
        fe.emit(s)
    out = []
    for name, v in zip(prog.outputs, outputs):
        if v.is_record:
            raise unsupported(loc, f"derived-type output {name}", "return its components as arrays")
        if v.is_array:
            read = Read(v.view.ref())
            out.append(numpy_api._transpose(fe, loc, read) if v.view.rank > 1 else read)
        else:
            out.append(Read(v.ref))
    return out[0] if len(out) == 1 else tuple(out)


def _param_dtype(host, src):
    return host.params[host.sources.index(src)].dtype


def _fshape(v):
    if not v.is_array:
        return ()
    return tuple(const_value(fold(e)) for e in v.view.extents)


def _single_result(lo, v):
    """The result container of a program with one output, in the caller's layout."""
    from .. import numpy_api
    if v.is_array:
        read = numpy_api._transpose(lo, lo.loc, Read(v.view.ref()))
        return lo.materialize(read, "result").ref.container
    return lo.materialize(Read(v.ref), "result").ref.container


def _packed_result(lo, prog, outputs):
    pieces, layout = [], []
    for name, v in zip(prog.outputs, outputs):
        if v.is_record:
            raise unsupported(lo.loc, f"derived-type output {name}", "return its components as arrays")
        e = Read(v.view.ref()) if v.is_array else Read(v.ref)
        pieces.append((name, v, e))
    floats = [e.dtype for _, _, e in pieces]
    dt = F32 if all(d == F32 for d in floats) else F64
    total, offsets = 0, []
    for name, v, e in pieces:
        shape = _fshape(v)
        if None in shape:
            raise unsupported(lo.loc, f"output {name} whose shape is known only at run time", "use fixed shapes")
        size = int(np.prod(shape)) if shape else 1
        offsets.append((total, size, shape))
        total += size
    res = lo.temp("result", dt, (const(total),))
    for (name, v, e), (off, size, shape) in zip(pieces, offsets):
        x = convert(e if e.dtype != BOOL else _bool_num(e), dt)
        if shape:
            flat = lo.ravel(lo.whole(x) if len(shape) > 1 else x)
            lo.emit(Assign(Ref(res, [Slice(off, size, 1)]), flat, loc=lo.loc))
        else:
            from ...ir.core import Index
            lo.emit(Assign(Ref(res, [Index(off)]), x, loc=lo.loc))
        layout.append((name, off, size, shape, e.dtype, v.tspec.out_dtype()))
    return res, layout


def _bool_num(e):
    from .exprs import mk
    return mk("where", e, const(1), const(0))


def unpack(layout, raw):
    """The caller's outputs from the IR result."""
    out = []
    for name, off, size, shape, dtype, out_dtype in layout:
        if off is None:
            value = np.asarray(raw)
        else:
            flat = np.asarray(raw)[off:off + size]
            value = flat.reshape(shape, order="F") if shape else flat[0]
        if np.dtype(out_dtype).kind == "b":
            value = np.asarray(value) != 0
        value = np.asarray(value).astype(out_dtype, copy=False)
        out.append(value[()] if value.ndim == 0 else value)
    return out[0] if len(out) == 1 else tuple(out)


def pack_cotangent(layout, cotangents, dtype):
    """The IR result's cotangent from one cotangent per output (None: zero; integer outputs
    take none)."""
    if len(layout) == 1:
        cotangents = (cotangents,)
    elif not isinstance(cotangents, (tuple, list)) or len(cotangents) != len(layout):
        raise InputError(f"pass one cotangent per output ({', '.join(l[0] for l in layout)}), as a tuple")
    if layout[0][1] is None:
        name, _, _, shape, _, _ = layout[0]
        ct = cotangents[0]
        ct = np.zeros(shape, dtype) if ct is None else np.asarray(ct, dtype=dtype)
        if ct.shape != tuple(shape):
            raise InputError(f"cotangent of {name} has shape {ct.shape}, but {name} has shape {tuple(shape)}")
        return ct
    total = sum(l[2] for l in layout)
    out = np.zeros(total, dtype=dtype)
    for (name, off, size, shape, d, od), ct in zip(layout, cotangents):
        if ct is None or np.dtype(od).kind != "f":
            continue
        ct = np.asarray(ct, dtype=dtype)
        if ct.shape != tuple(shape):
            raise InputError(f"cotangent of {name} has shape {ct.shape}, but {name} has shape {tuple(shape)}")
        out[off:off + size] = ct.ravel(order="F") if shape else ct
    return out


__all__ = ["capture_program", "inline_program", "Capture", "unpack", "pack_cotangent"]
