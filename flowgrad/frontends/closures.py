"""Functions defined inside captured code (``def`` and ``lambda``) and bound methods.

A nested function is a value of the captured code: its AST, the frame it was defined in and
its default values (evaluated, as Python does, where the ``def`` runs). Calling it inlines its
body like a helper's. A name it does not bind itself is looked up in the frame it closes over
*when it runs*, as Python's closures do (a later rebinding of that name is seen).
"""
from __future__ import annotations

import ast
import inspect

from ..errors import FlowgradError, unsupported
from .pyvalues import HoldsValues, freeze


class LocalFunction(HoldsValues):
    """A ``def`` or ``lambda`` inside captured code. Equal (and hashing alike) across captures of
    the same source, so that what capture learnt about it (``Frontend.hints``) holds when capture
    starts again."""

    def __init__(self, node, frame, defaults, key):
        self.node = node                # an ast.FunctionDef (a lambda is made into one)
        self.frame = frame              # the frame it closes over
        self.defaults = defaults        # parameter name -> default value
        self.key = key
        self.__name__ = node.name
        self.__qualname__ = node.name

    @property
    def __globals__(self):
        return self.frame.fn.__globals__

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, LocalFunction) and other.key == self.key

    def __repr__(self):
        return f"<local function {self.__name__}>"

    def map_values(self, fn):
        """Rewrite the IR values it holds (its defaults) in place with ``fn``."""
        self.defaults = {k: fn(v) for k, v in self.defaults.items()}

    def signature(self):
        a = self.node.args
        P = inspect.Parameter
        params = []

        def default(name):
            return self.defaults.get(name, P.empty)
        for arg in a.posonlyargs:
            params.append(P(arg.arg, P.POSITIONAL_ONLY, default=default(arg.arg)))
        for arg in a.args:
            params.append(P(arg.arg, P.POSITIONAL_OR_KEYWORD, default=default(arg.arg)))
        if a.vararg is not None:
            params.append(P(a.vararg.arg, P.VAR_POSITIONAL))
        for arg in a.kwonlyargs:
            params.append(P(arg.arg, P.KEYWORD_ONLY, default=default(arg.arg)))
        if a.kwarg is not None:
            params.append(P(a.kwarg.arg, P.VAR_KEYWORD))
        return inspect.Signature(params)


class MethodValue(HoldsValues):
    """A function bound to the object it was looked up on (``sim.step``): calling it inlines
    the function with ``self_value`` first."""

    def __init__(self, func, self_value):
        self.func, self.self_value = func, self_value
        self.__name__ = getattr(func, "__name__", "method")

    def map_values(self, fn):
        self.self_value = fn(self.self_value)


def define(fe, node, frame):
    """The value a ``def`` statement or ``lambda`` expression makes in ``frame``."""
    if isinstance(node, ast.Lambda):
        fdef = ast.FunctionDef(name="<lambda>", args=node.args,
                               body=[ast.Return(value=node.body, lineno=node.lineno, col_offset=node.col_offset)],
                               decorator_list=[], returns=None, type_params=[], lineno=node.lineno,
                               col_offset=node.col_offset)
        fdef = ast.fix_missing_locations(fdef)
    else:
        fdef = node
        if node.decorator_list:
            raise unsupported(frame.loc(node), f"decorated nested function {node.name!r}",
                              "define it without decorators, or at module level")
    a = fdef.args
    defaults = {}
    positional = a.posonlyargs + a.args
    for arg, d in zip(positional[len(positional) - len(a.defaults):], a.defaults):
        defaults[arg.arg] = freeze(fe, fe.eval(d, frame), frame.loc(d))
    for arg, d in zip(a.kwonlyargs, a.kw_defaults):
        if d is not None:
            defaults[arg.arg] = freeze(fe, fe.eval(d, frame), frame.loc(d))
    return LocalFunction(fdef, frame, defaults, (frame.fn, node.lineno, node.col_offset))


def bind(fn, args, kwargs, loc):
    """Python's binding of a call's arguments to ``fn``'s parameters, defaults applied:
    ``(arguments, names of the *args and **kwargs parameters)``."""
    sig = fn.signature() if isinstance(fn, LocalFunction) else inspect.signature(fn)
    try:
        bound = sig.bind(*args, **kwargs)
    except TypeError as exc:
        raise FlowgradError(f"{loc}: calling {fn.__name__}: {exc}") from None
    bound.apply_defaults()
    packed = {n for n, p in sig.parameters.items() if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return bound.arguments, packed


def closure_lookup(fe, name, frame):
    """``(True, value)`` for a name a nested function reads from a frame it closes over, else
    ``(False, None)``. A read in a loop of that frame is a read of the loop's names."""
    outer = getattr(frame, "closure", None)
    while outer is not None:
        if name in outer.env:
            v = outer.env[name]
            for log in [fe.reads_log] + fe.suspended_logs[::-1]:
                if log is not None and log[0] is outer:
                    log[1].setdefault(name, v)
                    break
            return True, v
        outer = getattr(outer, "closure", None)
    return False, None
