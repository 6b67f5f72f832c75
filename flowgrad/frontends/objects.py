"""User objects in captured code: attribute reads, bound methods, objects the code builds.

* An object from outside the function (an argument that is not a pytree, a global, a closure
  variable) is folded in: its attributes are read when the function is captured, and each read
  is recorded (``Captured.global_reads``), so that a later call finding another value there
  captures the function again, as Python would run it with the new value. Methods and
  properties written in Python are inlined like helper functions, with ``self`` the object.
* A dataclass argument, or an object named in ``wrt``, stands in the captured code as an
  ``ObjectValue`` whose data attributes are run-time values (its pytree leaves).
* Objects the code builds (``State(u, v)``, a NamedTuple, a class whose ``__init__`` is Python)
  are ``ObjectValue``s too; only those may have attributes assigned (``self.u = ...`` in their
  ``__init__``): flowgrad does not write back to objects the caller owns.
"""
from __future__ import annotations

import dataclasses
import inspect
import types

from ..errors import unsupported
from ..pytree import is_namedtuple
from .closures import MethodValue
from .pyvalues import ObjectValue, check_mutable, freeze, made

_MISSING = object()
# modules whose objects are library objects (the op table's business), not user objects
LIBRARY_MODULES = ("numpy", "scipy", "math", "builtins", "jax", "jaxlib", "torch", "flowgrad", "types",
                   "functools", "collections", "itertools", "operator", "abc", "typing", "dataclasses",
                   "enum", "random", "re", "copy")


def _module_of(cls):
    return (getattr(cls, "__module__", None) or "").split(".")[0]


def is_user_class(cls) -> bool:
    return isinstance(cls, type) and _module_of(cls) not in LIBRARY_MODULES


def is_user_object(v) -> bool:
    """An instance of a class defined outside the libraries flowgrad knows (not a module,
    function or class)."""
    return not isinstance(v, (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
                              types.MethodType)) and is_user_class(type(v))


class AttrSource:
    """Where an attribute read was found, for ``Captured.current``: ``get(name)`` looks it up again
    without running properties or binding methods."""

    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def get(self, name, default=None):
        try:
            return inspect.getattr_static(self.obj, name)
        except AttributeError:
            return default


def _source(fe, obj):
    src = fe.attr_sources.get(id(obj))
    if src is None or src.obj is not obj:
        src = fe.attr_sources[id(obj)] = AttrSource(obj)
    return src


def get_attr(fe, obj, attr, loc):
    """``(True, obj.attr)`` for an attribute of a user object or class or an ``ObjectValue``;
    ``(False, None)`` for anything else (modules, arrays, library objects)."""
    if isinstance(obj, ObjectValue):
        if attr in obj.attrs:
            return True, obj.attrs[attr]
        if attr == "__class__":
            return True, obj.cls
        return True, _class_attribute(fe, obj.cls, obj, attr, loc)
    if is_namedtuple(obj) and attr in type(obj)._fields:
        value = obj[type(obj)._fields.index(attr)]
        return True, value if fe.pyobjs.get(obj) is not None else fe.outside(value)
    if isinstance(obj, type) and is_user_class(obj):
        raw = inspect.getattr_static(obj, attr, _MISSING)
        if raw is _MISSING:
            raise unsupported(loc, f"attribute {obj.__name__}.{attr}", f"class {obj.__name__} has no attribute {attr!r}")
        fe.global_reads.append((_source(fe, obj), attr, raw))
        if isinstance(raw, staticmethod):
            return True, raw.__func__
        if isinstance(raw, classmethod):
            return True, MethodValue(raw.__func__, obj)
        return True, fe.outside(raw)
    if not is_user_object(obj):
        return False, None
    cls = type(obj)
    raw = inspect.getattr_static(cls, attr, _MISSING)
    if isinstance(raw, property) or raw is not _MISSING and _is_data_descriptor(raw) and \
            not isinstance(raw, types.MemberDescriptorType):
        return True, _class_attribute(fe, cls, obj, attr, loc)
    own = getattr(obj, "__dict__", None)
    if own is not None and attr in own:
        value = own[attr]
        fe.global_reads.append((_source(fe, obj), attr, value))
        return True, fe.outside(value)
    if isinstance(raw, types.MemberDescriptorType):          # a __slots__ attribute
        value = getattr(obj, attr)
        fe.global_reads.append((_SlotSource(obj), attr, value))
        return True, fe.outside(value)
    if raw is _MISSING:
        if hasattr(cls, "__getattr__"):
            raise unsupported(loc, f"attribute .{attr} of a {cls.__name__} object, computed by its __getattr__",
                              "read the value outside the differentiated function and pass it in")
        raise unsupported(loc, f"attribute .{attr} of a {cls.__name__} object",
                          f"{cls.__name__} objects have no attribute {attr!r}")
    return True, _class_attribute(fe, cls, obj, attr, loc)


class _SlotSource:
    __slots__ = ("obj",)

    def __init__(self, obj):
        self.obj = obj

    def get(self, name, default=None):
        return getattr(self.obj, name, default)


def _is_data_descriptor(raw):
    return hasattr(type(raw), "__set__") or hasattr(type(raw), "__delete__")


def _class_attribute(fe, cls, self_value, attr, loc):
    """``attr`` looked up on ``cls`` for an instance ``self_value``: methods bound, properties
    inlined, class constants folded (and the lookup recorded)."""
    raw = inspect.getattr_static(cls, attr, _MISSING)
    if raw is _MISSING:
        raise unsupported(loc, f"attribute .{attr} of a {cls.__name__} object",
                          f"{cls.__name__} objects have no attribute {attr!r}")
    if is_user_class(cls):
        fe.global_reads.append((_source(fe, cls), attr, raw))
    if isinstance(raw, staticmethod):
        return raw.__func__
    if isinstance(raw, classmethod):
        return MethodValue(raw.__func__, cls)
    if isinstance(raw, property):
        if not isinstance(raw.fget, types.FunctionType):
            raise unsupported(loc, f"property {cls.__name__}.{attr} without Python source",
                              "read the value outside the differentiated function and pass it in")
        return fe.inline(raw.fget, [self_value], {}, loc)
    if isinstance(raw, types.FunctionType):
        return MethodValue(raw, self_value)
    if _is_data_descriptor(raw) or hasattr(type(raw), "__get__") and not isinstance(raw, type):
        raise unsupported(loc, f"attribute .{attr} of a {cls.__name__} object (a {type(raw).__name__} descriptor)",
                          "read the value outside the differentiated function and pass it in")
    return fe.outside(raw)


def set_attr(fe, obj, attr, value, loc, text):
    """``obj.attr = value``: only for objects the captured code built."""
    if isinstance(obj, ObjectValue):
        entry = fe.pyobjs.get(obj)
        if entry is not None and not entry[2]:
            if dataclasses.is_dataclass(obj.cls) and obj.cls.__dataclass_params__.frozen and fe.constructing is not obj:
                raise unsupported(loc, f"assignment to {text} of a frozen dataclass", "use dataclasses.replace")
            check_mutable(fe, obj, loc, f"assignment to {text}")
            obj.attrs[attr] = freeze(fe, value, loc)
            return
        what = f"a {obj.cls.__name__} argument"
    else:
        what = f"a {type(obj).__name__} object from outside the captured function"
    raise unsupported(loc, f"assignment to attribute {text} of {what}",
                      "flowgrad does not change objects the caller owns (the caller's object would not see the "
                      "change): return the new value instead (u = sim.step(u), or "
                      "state = dataclasses.replace(state, u=...))")


def construct(fe, cls, args, kwargs, loc):
    """``cls(*args, **kwargs)`` for a NamedTuple, a dataclass or a class with a Python ``__init__``."""
    args = [freeze(fe, a, loc) for a in args]
    kwargs = {k: freeze(fe, v, loc) for k, v in kwargs.items()}
    if issubclass(cls, tuple) and hasattr(cls, "_fields"):
        return made(fe, cls(*args, **kwargs))
    if cls.__new__ is not object.__new__:
        raise unsupported(loc, f"constructing a {cls.__name__} (its class defines __new__)",
                          "build the object outside the differentiated function and pass it in")
    if dataclasses.is_dataclass(cls) and _generated_init(cls):
        try:
            bound = inspect.signature(cls).bind(*args, **kwargs)
        except TypeError as exc:
            raise unsupported(loc, f"call {cls.__name__}(...) with these arguments", str(exc)) from None
        bound.apply_defaults()
        attrs = dict(bound.arguments)
        for f in dataclasses.fields(cls):
            if f.name in attrs:
                continue
            if f.default is not dataclasses.MISSING:
                attrs[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                attrs[f.name] = fe.outside(f.default_factory())
        obj = made(fe, ObjectValue(cls, attrs))
        post = inspect.getattr_static(cls, "__post_init__", None)
        if post is not None:
            _run_init(fe, obj, post, [], {}, loc)
        return obj
    init = inspect.getattr_static(cls, "__init__", None)
    obj = made(fe, ObjectValue(cls, {}))
    if init is not None and init is not object.__init__:
        if not isinstance(init, types.FunctionType):
            raise unsupported(loc, f"constructing a {cls.__name__} (its __init__ has no Python source)",
                              "build the object outside the differentiated function and pass it in")
        _run_init(fe, obj, init, args, kwargs, loc)
    elif args or kwargs:
        raise unsupported(loc, f"call {cls.__name__}(...) with arguments", f"{cls.__name__} takes no arguments")
    return obj


def _run_init(fe, obj, fn, args, kwargs, loc):
    saved, fe.constructing = fe.constructing, obj
    try:
        fe.inline(fn, [obj] + list(args), kwargs, loc)
    finally:
        fe.constructing = saved


def _generated_init(cls):
    init = cls.__dict__.get("__init__")
    if init is None:
        return any(dataclasses.is_dataclass(b) and _generated_init(b) for b in cls.__mro__[1:2])
    try:
        inspect.getsource(init)
    except (OSError, TypeError):
        return True
    return False


def replace(fe, obj, changes, loc):
    """``dataclasses.replace(obj, **changes)``: a new object (its ``__post_init__`` runs again)."""
    if isinstance(obj, ObjectValue):
        attrs = dict(obj.attrs)
        cls = obj.cls
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        attrs = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    else:
        raise unsupported(loc, f"dataclasses.replace of a {type(obj).__name__}", "pass a dataclass instance")
    for k in changes:
        if k not in attrs:
            raise unsupported(loc, f"dataclasses.replace with field {k!r}", f"{cls.__name__} has no field {k!r}")
    init_fields = [f.name for f in dataclasses.fields(cls) if f.init]
    kwargs = {k: (changes[k] if k in changes else attrs[k]) for k in init_fields}
    return construct(fe, cls, [], kwargs, loc)
