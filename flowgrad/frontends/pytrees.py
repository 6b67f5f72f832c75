"""Pytree arguments and results of a captured function.

An argument that is a pytree (``flowgrad.pytree``: tuples, lists, dicts, NamedTuples,
dataclasses, and plain objects where ``wrt`` names them) becomes one argument container per
run-time leaf, named by its path (``params_0_1``), and stands in the captured code as the same
structure holding their reads: lists, tuples and dicts as Python containers of the caller's
(which the code may not change), dataclasses and objects as ``ObjectValue``s.

A result that is a pytree is packed into the program's one result: the run-time leaves,
raveled and cast to one dtype, one after the other, after a header holding the sizes of
axes known only at run time. ``ResultLayout.unpack`` rebuilds the structure from it, and
``pack_cotangent`` lays a cotangent of that structure out the same way.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .. import pytree
from ..errors import InputError, unsupported
from ..ir.core import CASTS, Const, Expr, const_value, op
from .control import same_binding
from .numpy_api import call_function, stack_values
from .pyvalues import ObjectValue


def argument(fe, name, value, objects):
    """The captured value of pytree argument ``name``; records its leaves' containers."""
    leaves, tree = pytree.flatten(value, objects=objects)
    values, containers = [], []
    for k, (path, leaf) in enumerate(zip(tree.paths(name), leaves)):
        c, v = fe.leaf_param(path, leaf, (name, k))
        containers.append(c)
        values.append(v)
    fe.arg_leaves[name] = (tree, containers)
    return _build(fe, tree, iter(values))


def _build(fe, tree, values):
    if tree.kind == "leaf":
        return next(values)
    if tree.kind == "static":
        return fe.outside(tree.static)
    kids = [_build(fe, k, values) for k in tree.kids]
    if tree.kind in ("tuple", "list", "dict", "namedtuple"):
        out = pytree.rebuild(tree.template, tree.kind, kids, tree.keys)
    else:
        out = ObjectValue(type(tree.template), dict(zip(tree.keys, kids)), template=tree.template)
    return fe.pyobjs.add(fe, out, outside=True)


def is_tree(v):
    return isinstance(v, ObjectValue) or pytree.node_kind(v) is not None


def flatten_value(fe, v, loc):
    """``(leaves, treedef)`` of a captured value: IR values (and arrays) are the run-time leaves."""
    leaves = []

    def walk(x):
        if isinstance(x, (Expr, np.ndarray)):
            leaves.append(fe.to_expr(x, loc))
            return pytree.TreeDef("leaf")
        if isinstance(x, ObjectValue):
            template = x.template if x.template is not None else object.__new__(x.cls)
            kind = "dataclass" if dataclasses.is_dataclass(x.cls) else "object"
            keys = list(x.attrs)
            return pytree.TreeDef(kind, template, keys, [walk(x.attrs[k]) for k in keys])
        kind = pytree.node_kind(x)
        if kind is None:
            return pytree.TreeDef("static", static=x)
        keys, values = pytree.children(x, kind)
        return pytree.TreeDef(kind, x, keys, [walk(y) for y in values])
    return leaves, walk(v)


class ResultLayout:
    """How a pytree result lies in the packed result vector (see the module docstring)."""

    def __init__(self, tree, shapes, dtypes, header, packed, dtype):
        self.tree = tree            # the result's TreeDef
        self.shapes = shapes        # per leaf: its shape, an int per axis or None (in the header)
        self.dtypes = dtypes        # per leaf: its dtype
        self.header = header        # number of header entries
        self.packed = packed        # False: the result is the one leaf itself
        self.dtype = dtype          # the packed vector's dtype

    def unpack(self, flat):
        """The result tree from the program's result."""
        if not self.packed:
            return self.tree.unflatten([flat])
        if not self.shapes:
            return self.tree.unflatten([])       # nothing known only at run time
        flat = np.asarray(flat)
        sizes = [int(v) for v in flat[:self.header]]
        at, leaves = self.header, []
        it = iter(sizes)
        for shape, dt in zip(self.shapes, self.dtypes):
            dims = tuple(next(it) if d is None else d for d in shape)
            n = int(np.prod(dims, dtype=np.int64))
            leaf = flat[at:at + n].astype(dt).reshape(dims)
            leaves.append(leaf if dims else leaf[()])     # NumPy's scalar for a 0-d leaf
            at += n
        return self.tree.unflatten(leaves)

    def pack_cotangent(self, cotangent, result):
        """A cotangent of the result's structure, laid out as the packed result ``result``."""
        try:
            leaves = self.tree.leaves_of(cotangent, "cotangent")
        except ValueError as exc:
            raise InputError(f"{exc} (the cotangent must have the structure of the result)") from None
        if not self.packed:
            return leaves[0]
        if not self.shapes:
            return 0.0
        flat = np.asarray(result)
        sizes = [int(v) for v in flat[:self.header]]
        it = iter(sizes)
        parts = [np.zeros(self.header, self.dtype)]
        for k, (shape, leaf) in enumerate(zip(self.shapes, leaves)):
            dims = tuple(next(it) if d is None else d for d in shape)
            a = np.asarray(leaf)
            if a.shape != dims:
                raise InputError(f"cotangent leaf {self.tree.paths()[k] or k} has shape {a.shape}; the result's "
                                 f"has shape {dims}")
            parts.append(a.astype(self.dtype).ravel())
        return np.concatenate(parts)


def pack_result(fe, value, loc):
    """``(expr, layout)``: the program's result for a pytree ``value``."""
    leaves, tree = flatten_value(fe, value, loc)
    shapes = [tuple(const_value(d) for d in e.shape) for e in leaves]
    header = [d for e in leaves for d in e.shape if const_value(d) is None]
    dtypes = [e.dtype for e in leaves]
    if len(leaves) == 1 and not header:
        return leaves[0], ResultLayout(tree, shapes, dtypes, 0, False, dtypes[0])
    if not leaves:
        return Const(0.0), ResultLayout(tree, [], [], 0, True, np.dtype(np.float64))
    dt = np.result_type(*dtypes, *([np.int64] if header else []))
    if dt.name not in CASTS:
        dt = np.dtype(np.float64 if dt.kind == "f" or any(t.kind == "f" for t in dtypes) else np.int64)
    parts = []
    if header:
        parts.append(stack_values(fe, [op(dt.name, d) for d in header], 0, loc))
    for e in leaves:
        e = e if e.dtype == dt else op(dt.name, e)
        parts.append(call_function(fe, np.ravel, [e], {}, loc))
    flat = parts[0] if len(parts) == 1 else call_function(fe, np.concatenate, [parts], {}, loc)
    return flat, ResultLayout(tree, shapes, dtypes, len(header), True, dt)


def is_container(v):
    """A Python container or object of the captured code (not an IR value, not a number)."""
    return isinstance(v, (list, tuple, dict, ObjectValue))


def flatten_runtime(fe, v, loc):
    """``(leaves, treedef)`` of a captured value with its numbers as leaves too (as IR constants):
    what may differ between two paths that bind one name."""
    leaves, tree = flatten_value(fe, v, loc)
    out_leaves = []
    it = iter(leaves)

    def walk(td):
        if td.kind == "leaf":
            out_leaves.append(next(it))
            return td
        if td.kind == "static":
            if pytree.is_leaf_value(td.static) and not isinstance(td.static, np.ndarray):
                out_leaves.append(Const(td.static))
                return pytree.TreeDef("leaf")
            return td
        return pytree.TreeDef(td.kind, td.template, td.keys, [walk(k) for k in td.kids])
    return out_leaves, walk(tree)


def structure(fe, v, loc):
    """A hashable description of a captured value's structure (not its leaves)."""
    return flatten_runtime(fe, v, loc)[1].key()


def build_value(fe, tree, leaves):
    """The captured value of structure ``tree`` holding ``leaves`` (made here: a new list, tuple,
    dict or ``ObjectValue``)."""
    it = iter(leaves)

    def walk(td):
        if td.kind == "leaf":
            return next(it)
        if td.kind == "static":
            return td.static
        kids = [walk(k) for k in td.kids]
        if td.kind in ("tuple", "list", "dict", "namedtuple"):
            out = pytree.rebuild(td.template, td.kind, kids, td.keys)
        else:
            out = ObjectValue(type(td.template), dict(zip(td.keys, kids)), template=td.template)
        return fe.pyobjs.add(fe, out)
    return walk(tree)


def merge(fe, name, va, vb, loc, join):
    """One value for ``name`` bound to containers ``va`` and ``vb`` on two paths: the same
    structure, each leaf that differs joined by ``join(k, ea, eb)`` (an IR value read after the
    paths meet)."""
    la, ta = flatten_runtime(fe, va, loc)
    lb, tb = flatten_runtime(fe, vb, loc)
    if ta.key() != tb.key():
        raise unsupported(loc, f"name {name!r} bound to Python values of different structures on different paths",
                          "give it the same kind of value (the same tuple/list/dict structure) on every path")
    leaves = [a if same_binding(a, b) else join(k, a, b) for k, (a, b) in enumerate(zip(la, lb))]
    if all(x is y for x, y in zip(leaves, la)) and va is not None:
        return va
    return build_value(fe, ta, leaves)
