"""The Fortran front door: ``from_fortran(sources, entry)`` parses Fortran with fparser2 (after
the C preprocessor where ``gfortran -cpp`` would run it) and returns a ``FortranProgram`` that
flowgrad runs and differentiates like any other function.

The package is split by concern: ``source`` (preprocessing, parsing, program units), ``types``
(kinds and dtypes), ``scope`` (declarations, names, where variables live), ``exprs`` and
``intrinsics`` (expressions), ``stmts`` (statements and control flow), ``calls`` (procedure
calls, inlined), ``lowering`` (scopes and bindings for one capture), ``analysis`` (what a
procedure writes and reads), ``program`` (the capture of an entry and its results) and this
module (the program object).
"""
from __future__ import annotations

import inspect
import keyword

import numpy as np

from ...errors import InputError, unsupported
from .analysis import module_variables, reused_arrays, sizing_integers, written_dummies
from .program import _Call, capture_program, inline_program, pack_cotangent, unpack
from .scope import declarations, is_dummy_procedure
from .source import Library, read_sources


class FortranProgram:
    """A Fortran subroutine or function, callable on NumPy arrays and differentiable.

    ``prog(*args, modules=None)`` runs it: arguments in dummy order, or by name (``in_=`` for a
    dummy named like a Python keyword), with numpy.f2py's index convention, returning the final
    values of the dummies it may write (``prog.outputs``), one value or a tuple, a function's
    result first. The caller's arrays are never modified.
    ``flowgrad.vjp(prog, *args)`` returns ``(outputs, pullback)``; ``pullback(cotangents)``
    (one per output, a tuple when there are several) gives the gradient of every float argument,
    in argument order (or of the ``wrt`` names given: arguments, and module variables as
    ``"module.name"``). ``flowgrad.grad``, ``value_and_grad`` and ``jit`` accept the program, and
    a NumPy function flowgrad differentiates may call it.

    Module variables the procedure reads (``prog.module_inputs``, as ``"module.name"``) are
    inputs: ``modules={"yomcst": {"rtt": 273.16}}`` (derived types as nested dicts); one not
    given keeps its initial value. ``prog.with_modules(modules)`` is the program with those
    values bound, for the transforms.
    """

    kind = "Fortran"

    def __init__(self, library, proc, bound_modules=None, entries=None, include_dirs=()):
        self.library, self.proc = library, proc
        self.include_dirs = tuple(include_dirs)     # where fparser finds INCLUDE files (kept to pickle)
        self.__name__ = proc.name
        self.dummies = list(proc.dummies)
        self.output_dummies = written_dummies(library, proc)
        self.outputs = ([proc.result] if proc.kind == "function" else []) + list(self.output_dummies)
        if not self.outputs:
            raise InputError(f"{proc.loc()}: {proc.name} writes none of its arguments: there is nothing to "
                             "return (give the outputs INTENT(OUT) or INTENT(INOUT))")
        self.sizing = sizing_integers(proc)
        self.reused = reused_arrays(proc)
        self.module_inputs = module_variables(library, proc)
        self.bound_modules = dict(bound_modules or {})
        spec = declarations(proc)
        decls = spec.decls
        for d in proc.dummies:
            if is_dummy_procedure(spec, d):
                raise unsupported(proc.loc(decls[d].node if d in decls else None), f"dummy procedure {d} of the "
                                  f"entry {proc.name}", "call the routine from a Fortran routine that passes the "
                                  "procedure, and make that the entry")
        # OPTIONAL dummies, and INTENT(OUT) ones (made by the program, as f2py does), may be left
        # out at the end of the argument list, or passed as None
        params, trailing = [], True
        for d in reversed(proc.dummies):
            optional = decls.get(d) is not None and (decls[d].optional or decls[d].intent == "out")
            trailing = trailing and optional
            # a dummy named like a Python keyword (IN, IS, LAMBDA) is passed by keyword as in_, is_, lambda_
            params.insert(0, inspect.Parameter(d + "_" if keyword.iskeyword(d) else d,
                                               inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                               default=None if trailing else inspect.Parameter.empty))
        self.__signature__ = inspect.Signature(params)
        self._entries = {} if entries is None else entries

    def __reduce__(self):
        # pickled (to another process, a Dask worker): the source texts as read (preprocessed
        # already), the entry and the bound module values; parsed again there, compiled at the
        # first call. INCLUDE files are read again from the same include directories.
        module = self.proc.module.name if self.proc.module is not None else None
        return _restore_fortran_program, (self.library.sources, self.include_dirs, module, self.proc.name,
                                          self.bound_modules)

    def __repr__(self):
        return f"<FortranProgram {self.proc.kind} {self.proc.name}({', '.join(self.dummies)}) -> " \
               f"{', '.join(self.outputs)}>"

    def with_modules(self, modules):
        """This program with module variables bound to ``modules`` (merged over those bound)."""
        merged = _merge(self.bound_modules, modules or {})
        return FortranProgram(self.library, self.proc, merged, self._entries, self.include_dirs)

    # ------------------------------------------------------------ capture

    def _bind(self, args, kwargs=None):
        try:
            bound = self.__signature__.bind(*args, **(kwargs or {}))
        except TypeError as exc:
            raise InputError(f"calling {self.__name__}: {exc}") from None
        bound.apply_defaults()
        return tuple(bound.arguments.values())

    def _key(self, args, modules):
        key = []
        for d, v in zip(self.dummies, args):
            if isinstance(v, np.ndarray):
                key.append(("a", v.shape, v.dtype.str))
            elif v is None:
                key.append(None)
            elif isinstance(v, (bool, np.bool_)):
                key.append(("b",))
            elif isinstance(v, (int, np.integer)):
                key.append(("i", int(v)) if d in self.sizing else ("i",))
            elif isinstance(v, (float, np.floating)):
                key.append(("f", np.dtype(type(v)).str if isinstance(v, np.floating) else "f8"))
            else:
                a = np.asarray(v)
                key.append(("a", a.shape, a.dtype.str))
        shapes = tuple(sorted((p, np.shape(v)) for p, v in _flatten(modules).items() if np.ndim(v)))
        return tuple(key), shapes

    def _check_args(self, args, cap):
        for k, value in cap.checks:
            if int(args[k]) != value:
                raise InputError(f"argument {self.dummies[k]!r} is {int(args[k])} in this call but sizes the "
                                 f"arrays as {value}: pass arrays of the shape it declares")

    def _module_value(self, path, cap, modules):
        c, tspec, default, shape = cap.inputs_made[path]
        given = _lookup(modules, path)
        if given is _MISSING:
            if default is None:
                raise InputError(f"module variable {path} has no initial value: pass it in modules= "
                                 f"(the program reads {', '.join(self.module_inputs)})")
            if shape:
                return default.T.copy()
            return c.dtype.type(default)
        value = np.asarray(given, dtype=c.dtype)
        if shape is not None and value.shape != tuple(shape):
            raise InputError(f"module variable {path} has shape {tuple(shape)}, but modules= gives {value.shape}")
        return value.T if value.ndim else c.dtype.type(value)

    def _flowgrad_capture(self, args):
        if isinstance(args, _Call):
            return capture_program(self, args.args, args.modules)
        return capture_program(self, self._bind(args), self.bound_modules)

    def _entry(self, args, modules, backend, mode, wrt=None):
        from ... import api
        backend = backend or api.DEFAULT_BACKEND
        if backend not in api.BACKENDS:
            raise InputError(f"unknown backend {backend!r}; available: {', '.join(api.BACKENDS)}")
        args = self._bind(args)
        _check_modules(self, modules)
        if mode != "forward" and wrt is None:
            wrt = tuple(d for d, v in zip(self.dummies, args) if v is not None and np.asarray(v).dtype.kind == "f")
        key = (self._key(args, modules), backend, mode, wrt)
        entry = self._entries.get(key)
        call = _Call(args, modules)
        if entry is None:
            entry = api._Compiled(self, call, wrt or (), backend, mode)
            entry.wrt_names = wrt or ()
            self._entries[key] = entry
        return entry, call

    # ------------------------------------------------------------ running

    def __call__(self, *args, modules=None, backend=None, **kwargs):
        mods = _merge(self.bound_modules, modules or {})
        if kwargs:                          # dummies by name, as f2py's wrappers take them
            args = self._bind(args, kwargs)
        entry, call = self._entry(args, mods, backend, "forward")
        raw = entry.func(*entry.call_args(call))
        return unpack(entry.cap.layout, raw)

    def _flowgrad_inline(self, fe, args, kwargs, loc):
        """Lower a call of this program inside a Python function's capture (``fe``)."""
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            raise InputError(f"{loc}: calling {self.__name__}: {exc}") from None
        bound.apply_defaults()
        return inline_program(self, fe, tuple(bound.arguments.values()), loc)

    def _flowgrad_result(self, cap, raw):
        """The outputs from the result of the captured program ``cap`` (``flowgrad.jit``)."""
        return unpack(cap.layout, raw)

    def _flowgrad_input_name(self, name):
        """``name`` (``"module.variable"``, any case) as a module variable the program reads, else
        None: ``flowgrad.grad(prog, wrt="yomcst.rtt")``."""
        name = name.lower()
        return name if any(name == p or name.startswith(p + ".") for p in self.module_inputs) else None

    @staticmethod
    def _flowgrad_input_grad(g):
        """A module variable's gradient as the caller holds the variable (the program holds module
        arrays column-major)."""
        return np.asarray(g).T.copy() if np.ndim(g) else float(g)

    def _flowgrad_vjp(self, args, wrt=None, backend=None):
        if wrt is not None:
            wrt = (wrt,) if isinstance(wrt, str) else tuple(wrt)
            for w in wrt:
                if not isinstance(w, str) or (w.lower() not in self.dummies
                                              and self._flowgrad_input_name(w) is None):
                    raise InputError(f"wrt entry {w!r} is neither an argument of {self.__name__} "
                                     f"({', '.join(self.dummies)}) nor a module variable it reads "
                                     f"({', '.join(self.module_inputs) or 'none'})")
            wrt = tuple(w.lower() for w in wrt)
        entry, call = self._entry(args, self.bound_modules, backend, "reverse", wrt)
        names = entry.wrt_names
        layout = entry.cap.layout
        if entry.result.dtype.kind != "f":
            raise InputError(f"{self.__name__} has no float outputs to differentiate")
        value, pull = entry.func(*entry.call_args(call))
        outputs = unpack(layout, value)
        used = [False]
        args_b = call.args

        def pullback(cotangents):
            nonlocal pull
            ct = pack_cotangent(layout, cotangents, entry.result.dtype)
            if used[0]:
                _, pull = entry.func(*entry.call_args(call))
            used[0] = True
            grads = pull(ct if ct.ndim else ct.item())
            out = []
            for name, g in zip(names, grads):
                if name not in self.dummies:
                    out.append(self._flowgrad_input_grad(g))
                    continue
                a = args_b[self.dummies.index(name)]
                if isinstance(a, np.ndarray):
                    out.append(np.asarray(g, dtype=a.dtype).reshape(a.shape))
                else:
                    out.append(float(g))
            return tuple(out)
        return outputs, pullback

    def source(self, *args, modules=None, backend=None, mode="reverse"):
        """The generated Python source for this call signature."""
        return self._entry(args, _merge(self.bound_modules, modules or {}), backend, mode)[0].src

    def ir(self, *args, modules=None, backend=None, mode="reverse"):
        """The IR (forward, and backward for gradients) as text, for this call signature."""
        return self._entry(args, _merge(self.bound_modules, modules or {}), backend, mode)[0].ir_text()


_MISSING = object()


def _merge(a, b):
    out = {k.lower(): v for k, v in a.items()}
    for k, v in b.items():
        k = k.lower()
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _flatten(modules, prefix=""):
    out = {}
    for k, v in (modules or {}).items():
        path = f"{prefix}{k.lower()}"
        if isinstance(v, dict):
            out.update(_flatten(v, path + "."))
        else:
            out[path] = v
    return out


def _lookup(modules, path):
    return _flatten(modules).get(path, _MISSING)


def _check_modules(prog, modules):
    known = set(prog.module_inputs)
    for path in _flatten(modules):
        if path not in known and not any(path.startswith(k + ".") for k in known):
            raise InputError(f"modules= gives {path}, which {prog.__name__} does not read; it reads: "
                             f"{', '.join(prog.module_inputs) or 'no module variables'}")


def from_fortran(sources, entry, *, include_dirs=(), defines=None):
    """A Fortran subroutine or function as a flowgrad program.

    Args:
      sources: a path, a list of paths (modules are found by USE, in any order), or Fortran
        source text. ``.F``/``.F90``/``.FPP`` files, and every source when ``include_dirs`` or
        ``defines`` are given, go through the C preprocessor as ``gfortran -cpp`` does.
      entry: the subroutine or function name (case-insensitive), also one inside a module.
      include_dirs: directories searched for ``#include`` and ``INCLUDE`` files.
      defines: preprocessor macros, ``{"N": 32, "MINI": None}``.

    Returns:
      A ``FortranProgram``: ``prog(*args)`` returns the dummies it writes (``prog.outputs``);
      ``flowgrad.vjp(prog, *args)``, ``grad``, ``value_and_grad`` and ``jit`` differentiate it.

    Example:
      >>> prog = flowgrad.from_fortran("saxpy.f90", "saxpy")          # doctest: +SKIP
      >>> y = prog(2.0, x, y0)                                        # doctest: +SKIP
    """
    include_dirs = tuple(str(d) for d in include_dirs)
    library = Library(read_sources(sources, include_dirs, defines), include_dirs)
    proc = library.find(entry)
    return FortranProgram(library, proc, include_dirs=include_dirs)


def _restore_fortran_program(sources, include_dirs, module, name, bound_modules):
    """A ``FortranProgram`` unpickled: its sources parsed again, nothing compiled yet."""
    library = Library(sources, include_dirs)
    proc = library.modules[module].procs[name] if module is not None else library.procs[name]
    return FortranProgram(library, proc, bound_modules, include_dirs=include_dirs)


__all__ = ["from_fortran", "FortranProgram"]
