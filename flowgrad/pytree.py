"""Pytrees: nested Python containers of arrays and numbers, with JAX's conventions.

A pytree is a leaf or a node holding pytrees. Nodes: tuples, lists, dicts (any ``dict``
subclass, in its own key order), NamedTuples, dataclass instances (their fields) and, where the
caller asks for it (``objects=True``, an argument named in ``wrt``), plain objects (their
instance attributes). Leaves that are run-time values: NumPy arrays and Python or NumPy numbers
(``bool`` excepted: a boolean is a setting, folded in when the function is captured, as a
top-level one is). Anything else (``None``, strings, functions, other objects) is a *static*
leaf: part of the structure, compared by identity or equality like any other argument.

``flatten(tree)`` gives the run-time leaves in order and a ``TreeDef``; ``treedef.unflatten(leaves)``
rebuilds a tree of the same kind: a NamedTuple of the same class, a dataclass or object as a
shallow copy of the one flattened (its ``__init__`` is not run) with the leaves replaced.

    >>> leaves, tree = flatten({"W": np.ones((2, 2)), "b": (0.5, "tag")})
    >>> [type(v).__name__ for v in leaves]
    ['ndarray', 'float']
    >>> tree.unflatten([np.zeros((2, 2)), 1.5])["b"]
    (1.5, 'tag')
"""
from __future__ import annotations

import copy
import dataclasses

import numpy as np


def is_leaf_value(v) -> bool:
    """Whether ``v`` is a run-time leaf: an array or a (non-boolean) number."""
    if isinstance(v, (bool, np.bool_)):
        return False
    return isinstance(v, (np.ndarray, int, float, complex, np.number))


def is_namedtuple(v) -> bool:
    return isinstance(v, tuple) and hasattr(type(v), "_fields") and hasattr(type(v), "_make")


def node_kind(v, objects=False):
    """The node kind of ``v`` ('tuple', 'list', 'dict', 'namedtuple', 'dataclass', 'object'),
    or None for a leaf."""
    if type(v) is tuple:
        return "tuple"
    if is_namedtuple(v):
        return "namedtuple"
    if isinstance(v, list):
        return "list"
    if isinstance(v, dict):
        return "dict"
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return "dataclass"
    if objects and is_plain_object(v):
        return "object"
    return None


def is_plain_object(v) -> bool:
    """An instance of a user-defined Python class whose attributes live in its ``__dict__``."""
    return (not isinstance(v, type) and hasattr(v, "__dict__") and type(v).__module__ not in _LIBRARY_MODULES
            and not callable(v) and not isinstance(v, (np.ndarray, np.generic)))


_LIBRARY_MODULES = ("builtins", "numpy", "types", "functools", "collections")


def children(v, kind):
    """``(keys, values)`` of a node: positions, dict keys, field or attribute names."""
    if kind in ("tuple", "list", "namedtuple"):
        return list(range(len(v))), list(v)
    if kind == "dict":
        return list(v.keys()), list(v.values())
    if kind == "dataclass":
        names = [f.name for f in dataclasses.fields(v)]
        return names, [getattr(v, n) for n in names]
    names = list(vars(v))
    return names, [getattr(v, n) for n in names]


def rebuild(template, kind, values, keys=None):
    """A node of ``template``'s kind and type holding ``values`` (at ``keys``, by default the
    template's own, in ``children`` order)."""
    if kind == "tuple":
        return tuple(values)
    if kind == "namedtuple":
        return type(template)._make(values)
    if kind == "list":
        return list(values) if type(template) is list else type(template)(values)
    if kind == "dict":
        keys = list(template.keys()) if keys is None else list(keys)
        if type(template) is dict:
            return dict(zip(keys, values))
        out = copy.copy(template)
        out.clear()
        out.update(zip(keys, values))
        return out
    keys = children(template, kind)[0] if keys is None else keys
    out = copy.copy(template)
    for k, v in zip(keys, values):
        object.__setattr__(out, k, v)          # frozen dataclasses too
    return out


class TreeDef:
    """The structure of a pytree: node kinds and types, keys, static leaves and where the
    run-time leaves go. ``key()`` is hashable (for signatures); ``unflatten`` rebuilds."""

    __slots__ = ("kind", "template", "keys", "kids", "static")

    def __init__(self, kind, template=None, keys=(), kids=(), static=None):
        self.kind = kind              # a node kind, 'leaf' or 'static'
        self.template = template      # the node flattened (its type, and what a copy starts from)
        self.keys = tuple(keys)
        self.kids = tuple(kids)
        self.static = static          # the value of a static leaf

    def key(self):
        """A hashable description: equal for trees of the same structure and static leaves."""
        if self.kind == "leaf":
            return "*"
        if self.kind == "static":
            return ("static", static_key(self.static))
        t = None if self.kind in ("tuple", "list", "dict") else type(self.template)
        return (self.kind, t, self.keys, tuple(k.key() for k in self.kids))

    def unflatten(self, leaves):
        """The tree with its run-time leaves taken, in order, from ``leaves``."""
        it = iter(leaves)
        out = self._build(it)
        rest = next(it, _END)
        if rest is not _END:
            raise ValueError("too many leaves for this tree")
        return out

    def _build(self, it):
        if self.kind == "leaf":
            v = next(it, _END)
            if v is _END:
                raise ValueError("too few leaves for this tree")
            return v
        if self.kind == "static":
            return self.static
        return rebuild(self.template, self.kind, [k._build(it) for k in self.kids], self.keys)

    def paths(self, prefix=""):
        """The path of each run-time leaf, as Python would index it (``[0]['W'].b``)."""
        if self.kind == "leaf":
            return [prefix]
        if self.kind == "static":
            return []
        out = []
        for k, kid in zip(self.keys, self.kids):
            step = f".{k}" if self.kind in ("dataclass", "object") else f"[{k!r}]"
            out += kid.paths(prefix + step)
        return out

    def leaves_of(self, tree, what="value"):
        """The values at this structure's run-time leaves in ``tree``, a tree of the same
        structure (a ValueError naming the first difference otherwise); static leaves are
        skipped."""
        out = []

        def walk(td, v, path):
            if td.kind == "leaf":
                out.append(v)
                return
            if td.kind == "static":
                return
            kind = node_kind(v, objects=td.kind == "object")
            if kind != td.kind or (td.kind not in ("tuple", "list", "dict") and type(v) is not type(td.template)):
                raise ValueError(f"{what}{path} is a {type(v).__name__}, expected a "
                                 f"{type(td.template).__name__}")
            keys, values = children(v, kind)
            if list(keys) != list(td.keys):
                if kind == "dict" and set(keys) == set(td.keys):
                    values = [v[k] for k in td.keys]
                else:
                    raise ValueError(f"{what}{path} has keys {list(keys)}, expected {list(td.keys)}")
            for k, kid, x in zip(td.keys, td.kids, values):
                walk(kid, x, path + (f".{k}" if td.kind in ("dataclass", "object") else f"[{k!r}]"))
        walk(self, tree, "")
        return out


_END = object()


def static_key(v):
    """How a static value takes part in a signature: by value where hashable, else identity."""
    try:
        hash(v)
    except TypeError:
        return ("id", id(v))
    return (type(v), v)


def flatten(tree, objects=False, is_leaf=is_leaf_value):
    """``(leaves, treedef)``: the run-time leaves of ``tree`` in order, and its structure.

    Args:
      tree: a pytree.
      objects: plain objects are nodes (their attributes), not static leaves.
      is_leaf: which values are run-time leaves (default: arrays and numbers).
    """
    leaves = []
    seen = set()

    def walk(v):
        if is_leaf(v):
            leaves.append(v)
            return TreeDef("leaf")
        kind = node_kind(v, objects)
        if kind is None:
            return TreeDef("static", static=v)
        if id(v) in seen:
            raise ValueError(f"a {type(v).__name__} that contains itself is not a pytree")
        seen.add(id(v))
        keys, values = children(v, kind)
        kids = [walk(x) for x in values]
        seen.discard(id(v))
        return TreeDef(kind, v, keys, kids)

    return leaves, walk(tree)


def is_node(v, objects=False) -> bool:
    return node_kind(v, objects) is not None


__all__ = ["TreeDef", "flatten", "is_leaf_value", "is_node", "node_kind", "static_key"]
