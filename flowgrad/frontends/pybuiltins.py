"""Python's builtins and container methods on the values of captured code.

Python containers whose length and order are known when the function is captured (lists,
tuples, dicts, ranges of constants, arrays of a fixed first length) are unrolled at capture:
``zip``, ``enumerate``, ``sum``, ``min``/``max``, ``list``, ``dict``, ``map`` build Python values
or fold IR expressions. ``isinstance`` and ``type`` answer from what capture knows: an array
argument is an ``np.ndarray``, a Python float argument a ``float`` (a NumPy scalar's type for a
NumPy scalar), a dataclass argument its class.
"""
from __future__ import annotations

import builtins
import dataclasses

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import Expr, const_value, is_weak, op
from . import indexing, objects
from .numpy_api import call_function, get_attribute
from .closures import LocalFunction, MethodValue
from .pyvalues import ObjectValue, check_mutable, freeze, made


# Python's operators on values known at capture
PY_OPERATORS = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "divide": lambda a, b: a / b, "floor_divide": lambda a, b: a // b, "mod": lambda a, b: a % b,
    "power": lambda a, b: a ** b, "less": lambda a, b: a < b, "less_equal": lambda a, b: a <= b,
    "greater": lambda a, b: a > b, "greater_equal": lambda a, b: a >= b,
    "equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b,
    "bitwise_and": lambda a, b: a & b, "bitwise_or": lambda a, b: a | b, "bitwise_xor": lambda a, b: a ^ b,
}


def represented_type(v):
    """The Python type NumPy code would see for captured value ``v``."""
    if isinstance(v, ObjectValue):
        return v.cls
    if isinstance(v, Expr):
        if v.shape:
            return np.ndarray
        if is_weak(v):
            return {"f": float, "i": int, "u": int, "b": bool}[v.dtype.kind]
        return v.dtype.type
    if isinstance(v, LocalFunction):
        return type(lambda: None)
    return type(v)


def sequence(fe, v, loc, what):
    """The items of ``v`` as a Python list, where capture knows how many there are."""
    if isinstance(v, (list, tuple, dict)):
        items = list(v.keys()) if isinstance(v, dict) else list(v)
        return items if fe.pyobjs.get(v) is not None else [fe.outside(x) for x in items]
    if isinstance(v, (range, str)):
        return list(v)
    if isinstance(v, Expr):
        if not v.shape:
            raise FlowgradError(f"{loc}: iteration over a 0-d array or scalar")
        n = const_value(v.shape[0])
        if n is None:
            raise unsupported(loc, f"{what} over an array whose length is known only at run time",
                              "write a for loop over range(len(x)) that fills a preallocated array")
        return [indexing.getitem(fe, v, (k,), loc) for k in range(n)]
    if isinstance(v, ObjectValue):
        raise unsupported(loc, f"{what} over a {v.cls.__name__} object", "iterate over a list, tuple or dict")
    if isinstance(v, (set, frozenset)):
        raise unsupported(loc, f"{what} over a set (its order is not fixed)", "use a list or tuple")
    if hasattr(v, "__iter__") and not isinstance(v, np.ndarray):
        return list(v)
    if isinstance(v, np.ndarray):
        return [v[k] for k in range(len(v))]
    raise unsupported(loc, f"{what} over a {type(v).__name__}", "iterate over a list, tuple, dict or range")


def _isinstance(fe, loc, obj, classinfo):
    if isinstance(classinfo, Expr) or not isinstance(classinfo, (type, tuple)):
        raise unsupported(loc, "isinstance with this second argument", "pass a class or a tuple of classes")
    return builtins.issubclass(represented_type(obj), classinfo)


def _type(fe, loc, obj, *rest):
    if rest:
        raise unsupported(loc, "type() with three arguments", "define classes outside the function")
    return represented_type(obj)


def _sum(fe, loc, iterable, start=0):
    if isinstance(iterable, Expr):
        total = call_function(fe, np.sum, [iterable], {"axis": 0}, loc)
        return total if isinstance(start, int) and start == 0 else fe.binop("add", start, total, loc)
    out = start
    for v in sequence(fe, iterable, loc, "sum()"):
        out = fe.binop("add", out, v, loc)
    return out


def _minmax(name):
    def handler(fe, loc, *args, key=None, default=None):
        if key is not None:
            raise unsupported(loc, f"{name}() with key=", f"compute the values first, then take {name}()")
        items = args[0] if len(args) == 1 else list(args)
        if len(args) == 1 and isinstance(items, Expr):
            return call_function(fe, getattr(builtins, name), [items], {}, loc)
        items = sequence(fe, items, loc, f"{name}()")
        if not items:
            if default is not None:
                return default
            raise FlowgradError(f"{loc}: {name}() of an empty sequence")
        if not any(isinstance(v, Expr) for v in items):
            return getattr(builtins, name)(items)
        for v in items:
            if isinstance(v, Expr) and v.shape:
                raise unsupported(loc, f"{name}() of arrays (Python compares them element by element, which "
                                       "is ambiguous)", f"use np.{'maximum' if name == 'max' else 'minimum'}")
        out = fe.to_expr(items[0], loc)
        for v in items[1:]:
            out = op("maximum" if name == "max" else "minimum", out, fe.to_expr(v, loc))
        return out
    return handler


def _anyall(name):
    def handler(fe, loc, iterable):
        if isinstance(iterable, Expr):
                return call_function(fe, getattr(np, name), [iterable], {}, loc)
        out = name == "all"
        for v in sequence(fe, iterable, loc, f"{name}()"):
            t = fe.truth(v, loc)
            if isinstance(t, Expr) or isinstance(out, Expr):
                out = op("logical_and" if name == "all" else "logical_or", fe.to_expr(out, loc), fe.to_expr(t, loc))
            else:
                out = (out and t) if name == "all" else (out or t)
        return out
    return handler


def _list(fe, loc, iterable=()):
    return made(fe, [freeze(fe, v, loc) for v in sequence(fe, iterable, loc, "list()")])


def _tuple(fe, loc, iterable=()):
    return made(fe, tuple(freeze(fe, v, loc) for v in sequence(fe, iterable, loc, "tuple()")))


def _dict(fe, loc, *args, **kwargs):
    out = {}
    if args:
        src = args[0]
        if isinstance(src, dict):
            out.update(src)
        else:
            for pair in sequence(fe, src, loc, "dict()"):
                k, v = sequence(fe, pair, loc, "dict()")
                out[_key(k, loc)] = v
    out.update(kwargs)
    return made(fe, {k: freeze(fe, v, loc) for k, v in out.items()})


def _key(k, loc):
    if isinstance(k, Expr):
        raise unsupported(loc, "a dict key known only at run time", "use keys known when the function is captured")
    return k


def _zip(fe, loc, *iterables, strict=False):
    seqs = [sequence(fe, s, loc, "zip()") for s in iterables]
    if strict and len({len(s) for s in seqs}) > 1:
        raise FlowgradError(f"{loc}: zip() arguments have different lengths")
    return made(fe, [made(fe, tuple(t)) for t in builtins.zip(*seqs)])


def _enumerate(fe, loc, iterable, start=0):
    if isinstance(start, Expr):
        raise unsupported(loc, "enumerate() with a start known only at run time", "count from a constant")
    return made(fe, [made(fe, (start + k, v)) for k, v in builtins.enumerate(sequence(fe, iterable, loc, "enumerate()"))])


def _reversed(fe, loc, seq):
    return made(fe, sequence(fe, seq, loc, "reversed()")[::-1])


def _range(fe, loc, *args):
    if any(isinstance(a, Expr) for a in args):
        raise unsupported(loc, "range() of values known only at run time outside a for statement",
                          "loop over it in a for statement, or use np.arange for an array of integers")
    return builtins.range(*args)


def _sorted(fe, loc, iterable, key=None, reverse=False):
    items = sequence(fe, iterable, loc, "sorted()")
    if key is not None or any(isinstance(v, (Expr, ObjectValue)) for v in items):
        raise unsupported(loc, "sorted() of values known only at run time", "use np.sort on an array")
    return made(fe, builtins.sorted(items, reverse=reverse))


def _map(fe, loc, fn, *iterables):
    seqs = [sequence(fe, s, loc, "map()") for s in iterables]
    return made(fe, [freeze(fe, fe.call(fn, list(items), {}, loc, getattr(fn, "__name__", "fn")), loc)
                     for items in builtins.zip(*seqs)])


def _hasattr(fe, loc, obj, name):
    if isinstance(obj, ObjectValue):
        return name in obj.attrs or hasattr(obj.cls, name)
    if isinstance(obj, Expr):
        return name in ("shape", "ndim", "size", "dtype", "T") or hasattr(np.ndarray, name)
    return builtins.hasattr(obj, name)


def _getattr(fe, loc, obj, name, *default):
    if isinstance(name, Expr):
        raise unsupported(loc, "getattr with a name known only at run time", "use a constant name")
    if default and not _hasattr(fe, loc, obj, name):
        return default[0]
    handled, value = objects.get_attr(fe, obj, name, loc)
    if handled:
        return value
    return get_attribute(fe, obj, name, loc)


def _callable(fe, loc, obj):
    return isinstance(obj, (LocalFunction, MethodValue)) or builtins.callable(obj)


def _replace(fe, loc, obj, **changes):
    return objects.replace(fe, obj, {k: freeze(fe, v, loc) for k, v in changes.items()}, loc)


FUNCTIONS = {
    builtins.isinstance: _isinstance, builtins.type: _type, builtins.sum: _sum,
    builtins.max: _minmax("max"), builtins.min: _minmax("min"), builtins.any: _anyall("any"),
    builtins.all: _anyall("all"), builtins.list: _list, builtins.tuple: _tuple, builtins.dict: _dict,
    builtins.zip: _zip, builtins.enumerate: _enumerate, builtins.reversed: _reversed, builtins.range: _range,
    builtins.sorted: _sorted, builtins.map: _map, builtins.hasattr: _hasattr, builtins.getattr: _getattr,
    builtins.callable: _callable, dataclasses.replace: _replace,
}


def handler_for(fn):
    try:
        return FUNCTIONS.get(fn)
    except TypeError:
        return None


# ----------------------------------------------------------------------------- methods


def call_container_method(fe, obj, name, args, kwargs, loc, text):
    """``obj.name(*args)`` for a Python list, tuple or dict: ``(True, result)``, or ``(False, None)``."""
    if isinstance(obj, list):
        table = _LIST_METHODS
    elif isinstance(obj, dict):
        table = _DICT_METHODS
    elif isinstance(obj, tuple):
        table = _TUPLE_METHODS
    else:
        return False, None
    method = table.get(name)
    if method is None:
        raise unsupported(loc, f"method .{name}() of a Python {type(obj).__name__}",
                          f"supported: {', '.join(sorted(table))}")
    mutates, fn = method
    if mutates:
        check_mutable(fe, obj, loc, f"{text}()")
    out = fn(fe, obj, loc, *args, **kwargs)
    if fe.pyobjs.get(obj) is None:          # read from a container from outside: record what it holds
        out = fe.outside(out)
        for x in out if isinstance(out, list) else ():
            for y in x if isinstance(x, tuple) else (x,):
                fe.outside(y)
    return True, out


def _append(fe, lst, loc, v):
    lst.append(freeze(fe, v, loc))


def _extend(fe, lst, loc, items):
    lst.extend(freeze(fe, v, loc) for v in sequence(fe, items, loc, "extend()"))


def _insert(fe, lst, loc, k, v):
    lst.insert(_index(k, loc), freeze(fe, v, loc))


def _pop(fe, lst, loc, *k):
    return lst.pop(*[_index(i, loc) for i in k])


def _index(k, loc):
    if isinstance(k, Expr):
        raise unsupported(loc, "a position in a Python list known only at run time", "use an array")
    return k


def _find(fe, seq, loc, v, *rest):
    if isinstance(v, Expr) or any(isinstance(x, Expr) for x in seq):
        raise unsupported(loc, "searching a Python sequence for values known only at run time", "use arrays")
    return seq.index(v, *rest)


def _count(fe, seq, loc, v):
    if isinstance(v, Expr) or any(isinstance(x, Expr) for x in seq):
        raise unsupported(loc, "counting values known only at run time in a Python sequence", "use arrays")
    return seq.count(v)


def _get(fe, d, loc, k, default=None):
    return d.get(_key(k, loc), default)


def _update(fe, d, loc, *args, **kwargs):
    d.update(_dict(fe, loc, *args, **kwargs))


def _setdefault(fe, d, loc, k, default=None):
    return d.setdefault(_key(k, loc), freeze(fe, default, loc))


def _dict_pop(fe, d, loc, k, *default):
    return d.pop(_key(k, loc), *default)


_LIST_METHODS = {
    "append": (True, _append), "extend": (True, _extend), "insert": (True, _insert), "pop": (True, _pop),
    "copy": (False, lambda fe, lst, loc: made(fe, list(lst))), "index": (False, _find), "count": (False, _count),
    "reverse": (True, lambda fe, lst, loc: lst.reverse()), "clear": (True, lambda fe, lst, loc: lst.clear()),
}
_DICT_METHODS = {
    "get": (False, _get), "keys": (False, lambda fe, d, loc: made(fe, list(d.keys()))),
    "values": (False, lambda fe, d, loc: made(fe, list(d.values()))),
    "items": (False, lambda fe, d, loc: made(fe, [made(fe, kv) for kv in d.items()])),
    "copy": (False, lambda fe, d, loc: made(fe, dict(d))), "update": (True, _update),
    "setdefault": (True, _setdefault), "pop": (True, _dict_pop), "clear": (True, lambda fe, d, loc: d.clear()),
}
_TUPLE_METHODS = {
    "index": (False, _find), "count": (False, _count),
    "_replace": (False, lambda fe, t, loc, **kw: made(fe, t._replace(**{k: freeze(fe, v, loc) for k, v in kw.items()}))),
    "_asdict": (False, lambda fe, t, loc: made(fe, t._asdict())),
}


def setitem(fe, obj, index, value, loc, text):
    """``obj[index] = value`` for a Python list or dict."""
    check_mutable(fe, obj, loc, f"assignment to {text}")
    if isinstance(obj, list):
        if isinstance(index, slice):
            obj[index] = [freeze(fe, v, loc) for v in sequence(fe, value, loc, "slice assignment")]
        else:
            obj[_index(index, loc)] = freeze(fe, value, loc)
    else:
        obj[_key(index, loc)] = freeze(fe, value, loc)


def contains(fe, needle, haystack, loc):
    """``needle in haystack`` where capture can tell."""
    if isinstance(haystack, dict):
        return _key(needle, loc) in haystack
    if isinstance(haystack, Expr):
        raise unsupported(loc, "'in' on an array", "use np.any(x == v) or np.isin")
    items = sequence(fe, haystack, loc, "'in'")
    if isinstance(needle, Expr) or any(isinstance(x, Expr) for x in items):
        raise unsupported(loc, "'in' over values known only at run time", "compare arrays (np.any(x == v))")
    return needle in items
