"""Frontends: each turns user code (a Python function, a PyTorch module, an ONNX model, ...)
into the same IR, as a ``Captured`` record for one call signature."""
from __future__ import annotations

import math
import types


class Captured:
    """One frontend's result for one call signature.

    name: a Python identifier for generated code. params: argument containers in the order the
    generated function takes them. inputs(args): the values for ``params`` given the user's call
    arguments. arg_containers: user-visible argument name -> container (what ``wrt`` names).
    namer: the unique-name source, shared with later passes. global_reads: the module globals,
    closure cells, user-module and object attributes and outside containers whose values the
    capture folded in, as ``(where, name, value)``; the capture holds while each still has that
    value (``current``). arg_leaves: pytree argument name -> (its ``pytree.TreeDef``, the
    container of each run-time leaf). result_layout: for a pytree result, how it lies in
    ``result`` (``frontends.pytrees.ResultLayout``), else None.
    """

    def __init__(self, name, params, body, result, containers, namer, arg_containers, inputs):
        self.name, self.params, self.body, self.result = name, params, body, result
        self.containers, self.namer = containers, namer
        self.arg_containers, self.inputs = arg_containers, inputs
        self.global_reads = []
        self.arg_leaves = {}
        self.result_layout = None

    def current(self):
        """Whether every outside value the capture folded in is still the one it read (a module
        global rebound since, ``ALPHA = 2.0``, a helper redefined, an attribute of an object
        assigned, a global list changed, needs a new capture). ``where`` is a dict, a closure
        cell, or an object whose ``get(name, default)`` looks the value up again."""
        for where, name, value in self.global_reads:
            if isinstance(where, dict):
                now = where.get(name, _MISSING)
            elif isinstance(where, types.CellType):
                try:
                    now = where.cell_contents
                except ValueError:
                    return False
            else:
                now = where.get(name, _MISSING)
            if not same_value(now, value):
                return False
        return True


_MISSING = object()
_ATOMS = (int, float, complex, bool, str, bytes, type(None))


def same_value(a, b):
    """Whether ``a`` is what a capture read as ``b``: the same object, an equal Python number or
    string (a float bit for bit), or a tuple of such (a recorded container's contents)."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if type(a) in _ATOMS:
        if isinstance(a, float):
            return math.copysign(1.0, a) == math.copysign(1.0, b) and (a == b or a != a and b != b)
        return a == b
    if type(a) is tuple:
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    return False
