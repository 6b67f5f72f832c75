"""Frontends: each turns user code (a Python function, a PyTorch module, an ONNX model, ...)
into the same IR, as a ``Captured`` record for one call signature."""
from __future__ import annotations


class Captured:
    """One frontend's result for one call signature.

    name: a Python identifier for generated code. params: argument containers in the order the
    generated function takes them. inputs(args): the values for ``params`` given the user's call
    arguments. arg_containers: user-visible argument name -> container (what ``wrt`` names).
    namer: the unique-name source, shared with later passes. global_reads: the module globals,
    closure cells and user-module attributes whose values the capture folded in, as
    ``(dict or cell, name, value)``; the capture holds while each still has that value
    (``current``).
    """

    def __init__(self, name, params, body, result, containers, namer, arg_containers, inputs):
        self.name, self.params, self.body, self.result = name, params, body, result
        self.containers, self.namer = containers, namer
        self.arg_containers, self.inputs = arg_containers, inputs
        self.global_reads = []

    def current(self):
        """Whether every outside value the capture folded in is still the one it read (a module
        global rebound since, ``ALPHA = 2.0``, or a helper redefined, needs a new capture)."""
        for where, name, value in self.global_reads:
            now = where.get(name, _MISSING) if isinstance(where, dict) else where.cell_contents
            if now is not value:
                return False
        return True


_MISSING = object()
