"""Calls in captured code: function activations (``Frame``), calls and the inlining of
Python functions (the user's helpers, nested functions, bound methods), and the dispatch of
a call to what lowers it (Python builtins, library functions written as NumPy source, user
classes, the op table)."""
from __future__ import annotations

import ast
import builtins
import inspect
import os
import sys
import sysconfig
import textwrap
import types
import warnings

import numpy as np

from ..errors import Loc, UnsupportedError, unsupported
from ..ir.core import Assign, Expr, Op, Ref, scalar
from . import closures, library, objects, pybuiltins
from .closures import LocalFunction, MethodValue
from .numpy_api import call_function, call_method, get_attribute
from .pyvalues import made

_UNSUPPORTED_NODES = {
    ast.SetComp: ("set comprehension", "use a list (a set's order is not fixed)"),
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
}
if hasattr(ast, "TryStar"):
    _UNSUPPORTED_NODES[ast.TryStar] = _UNSUPPORTED_NODES[ast.Try]


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
        self.closure = None      # a nested function's frame: the frame it closes over

    def loc(self, node):
        return Loc(self.filename, self.first_line + getattr(node, "lineno", 1) - 1)


class CallExpressions:
    """Calls (mixed into ``python.Frontend``)."""

    def new_frame(self, fn):
        if isinstance(fn, LocalFunction):
            outer = fn.frame
            frame = Frame(fn, outer.filename, outer.first_line, outer.globals)
            frame.sources, frame.closure = outer.sources, outer
            return frame, fn.node
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
        for node in _walk_checked(fdef):
            if node is not fdef and type(node) in _UNSUPPORTED_NODES:
                what, hint = _UNSUPPORTED_NODES[type(node)]
                raise unsupported(frame.loc(node), what, hint)
        return frame, fdef

    def expr_Call(self, node, frame):
        loc = frame.loc(node)
        if isinstance(node.func, ast.Attribute):
            obj = self.eval(node.func.value, frame)
            args, kwargs = self.call_arguments(node, frame)
            if isinstance(obj, Expr):
                return call_method(self, obj, node.func.attr, args, kwargs, loc)
            handled, result = pybuiltins.call_container_method(self, obj, node.func.attr, args, kwargs, loc,
                                                                _call_name(node.func))
            if handled:
                return result
            handled, fn = objects.get_attr(self, obj, node.func.attr, loc)
            if not handled:
                fn = get_attribute(self, obj, node.func.attr, loc)
        else:
            fn = self.eval(node.func, frame)
            args, kwargs = self.call_arguments(node, frame)
        return self.call(fn, args, kwargs, loc, _call_name(node.func))

    def call_arguments(self, node, frame):
        """A call's positional and keyword arguments (``*xs`` and ``**d`` of Python containers
        unpacked)."""
        args = []       # (each held while the later ones are evaluated: ``g(z * 2.0, h(z))``)
        for a in node.args:
            if isinstance(a, ast.Starred):
                _, v = self.then(args, lambda a=a: self.eval(a.value, frame))
                args += pybuiltins.sequence(self, v, frame.loc(a), "unpacking with *")
            elif isinstance(a, ast.GeneratorExp):
                args.append(self.then(args, lambda a=a: self.expr_ListComp(a, frame))[1])   # evaluated at once
            else:
                args.append(self.then(args, lambda a=a: self.eval(a, frame))[1])
        pairs = []      # (name, value) of the keywords, ``**d`` spread
        for k in node.keywords:
            held, v = self.then(args + [x for _, x in pairs], lambda k=k: self.eval(k.value, frame))
            args[:] = held[:len(args)]
            pairs = [(n, x) for (n, _), x in zip(pairs, held[len(args):])]
            if k.arg is None:
                if not isinstance(v, dict):
                    raise unsupported(frame.loc(k.value), "** of a value that is not a dict", "unpack a dict")
                pairs += list(v.items())
            else:
                pairs.append((k.arg, v))
        return args, dict(pairs)

    def call(self, fn, args, kwargs, loc, name):
        handler = pybuiltins.handler_for(fn) or library.handler_for(fn)
        if handler is not None:
            return handler(self, loc, *args, **kwargs)
        lower = getattr(fn, "_flowgrad_nested" if isinstance(fn, type) else "_flowgrad_inline", None)
        if lower is not None:     # a flowgrad transform, or a program object (from_fortran): lowers itself here
            return lower(self, args, kwargs, loc)
        if isinstance(fn, MethodValue):
            return self.inline(fn.func, [fn.self_value] + list(args), kwargs, loc)
        if isinstance(fn, LocalFunction) or isinstance(fn, types.FunctionType) and not _is_library(fn):
            return self.inline(fn, args, kwargs, loc)
        if isinstance(fn, types.MethodType) and isinstance(fn.__func__, types.FunctionType) and \
                not _is_library(fn.__func__):
            return self.inline(fn.__func__, [fn.__self__] + list(args), kwargs, loc)
        if objects.is_user_class(fn):
            return objects.construct(self, fn, args, kwargs, loc)
        if getattr(fn, "_flowgrad_transform", False):
            raise unsupported(loc, f"{name}() inside a function flowgrad captures",
                              "of flowgrad's transforms, grad, value_and_grad, jvp, vjp, hvp and jit nest there; "
                              "take jacobians and Hessians of the whole function from outside")
        if fn is builtins.print:
            _warn_print(loc)
            return None
        owner = getattr(fn, "__self__", None)
        if owner is not None and not isinstance(owner, (types.ModuleType, type, np.ufunc)) and \
                (getattr(type(owner), "__module__", None) or "").split(".")[0] not in _OP_TABLE_MODULES:
            cls = type(owner)
            raise unsupported(loc, f"call to {name}(), a method of a {cls.__module__}.{cls.__qualname__} object, "
                                   "which flowgrad cannot see into (no Python source: a builtin or C-extension "
                                   "class)", "call it outside the differentiated function and pass the result in, "
                              "or use a Python class, NumPy arrays and Python lists, tuples and dicts")
        return call_function(self, fn, args, kwargs, loc, name)

    def inline(self, fn, args, kwargs, loc):
        """Compile a call to a plain Python function in place (its body is inlined)."""
        self.depth += 1
        if self.depth > 32:
            raise unsupported(loc, f"recursion in {fn.__name__}", "write the recursion as a loop")
        try:
            frame, fdef = self.new_frame(fn)
            arguments, packed = closures.bind(fn, args, kwargs, loc)
            for name, value in arguments.items():
                if isinstance(value, Expr) and value.shape == ():
                    c = self.container(name, value.dtype, ())
                    self.emit(Assign(Ref(c, ()), value, loc=loc))
                    frame.owned[name] = c
                    value = scalar(c)
                elif isinstance(value, Op):
                    value = self.materialize(value, name, loc)
                elif name in packed:
                    value = made(self, value)            # *args, **kwargs: made by the call
                frame.env[name] = value
            self.frames.append(frame)
        except BaseException:
            self.depth -= 1
            raise
        self.suspended_logs.append(self.reads_log)
        self.reads_log = None
        try:
            body, esc = self.collect(self._frame_block, fdef, frame)
            for s in body:
                self.emit(s)
            return self.finish_frame(frame, fdef, self.out[-1])
        finally:
            self.reads_log = self.suspended_logs.pop()
            self.frames.pop()
            self.depth -= 1

    def _frame_block(self, fdef, frame):
        self.frame_body_start[frame] = self.out[-1]
        return self.block(fdef.body, frame)

    frame_body_start = None


_OP_TABLE_MODULES = ("numpy", "scipy", "math", "jax", "torch", "flowgrad")


def _warn_print(loc):
    warnings.warn_explicit(f"{loc}: print() in a function flowgrad captures is ignored (it would run once, "
                           "while capturing, not on each call); print results after the call",
                           UserWarning, loc.filename, loc.lineno, registry=_PRINT_WARNED)


_PRINT_WARNED = {}           # Python's "once per location" for these warnings (capture may run twice)


def _walk_checked(fdef):
    """The nodes of ``fdef`` that must be supported: all but the arguments of ``print(...)``,
    which is ignored (``Frontend.stmt_Expr``)."""
    todo = [fdef]
    while todo:
        node = todo.pop()
        yield node
        if _is_print(node):
            continue
        todo.extend(ast.iter_child_nodes(node))


def _is_print(node):
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Call) and \
        isinstance(node.value.func, ast.Name) and node.value.func.id == "print"


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
    if getattr(fn, "__module__", None) in library.SOURCE_MODULES:
        return False                 # flowgrad's NumPy source of a library function: inlined
    mod = (getattr(fn, "__module__", "") or "").split(".")[0]
    return mod in ("numpy", "scipy", "math", "builtins", "jax", "torch", "flowgrad") or _is_stdlib(mod)


_STDLIB = os.path.normcase(sysconfig.get_paths()["stdlib"])


def _is_stdlib(module_name):
    """Python's own library (``dataclasses``, ``functools``): its functions are not inlined."""
    if module_name not in sys.stdlib_module_names:
        return False
    path = getattr(sys.modules.get(module_name), "__file__", None)
    return path is None or os.path.normcase(os.path.abspath(path)).startswith(_STDLIB)
