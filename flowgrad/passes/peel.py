"""Peel off the iterations at the end of a loop where a test of its variable goes the other way.

Needs: a statement list (a gradient's backward sweep). Changes: a loop with constant bounds whose
body tests its variable against a constant (``if v != c``, ``if v + k != c``, or ``==``) around
statements on arrays, where the iterations for which some test differs from the others are at
most ``PEEL`` at one end of the loop's run, becomes two loops over consecutive parts of its run:
the one over the other iterations with each such test replaced by the branch it takes there, and
the one over those iterations with the body as it was. The iterations run in the same order, so
nothing else changes.

The restores of a value carried from the pass before (``replays.previous_pass_restores``: ``if
i != first: t = x[i - 1, :] else: t = t_first``) are such tests: deriche's recursive filters
restore four rows or columns per pass, each behind one. Without the tests, the restores are
copies whose originals the pass reads in their place (``passes/copies.py``), and the native
backend fuses what is left of them with the pass's other statements over the same row: one
loop over the row where there were six. Deriche's gradient took 6.5 ms against 7.5 (the
generated programs alternating in one process, one CPU).

A test around scalars only is left as it is: copying the body pays only where the branch keeps
whole loops over arrays apart.
"""
from __future__ import annotations

from ..ir.core import For, If, Read, const_value, distinct, map_blocks, split_offset, stmt_writes, walk

PEEL = 4                # at most this many iterations run apart
_TESTS = {"not_equal": True, "equal": False}     # the test's value away from its one iteration


def peel_boundary_tests(stmts):
    """``stmts`` with the loops peeled as the module says."""
    out = []
    for s in stmts:
        s = map_blocks(s, peel_boundary_tests)
        out += _peeled(s) if isinstance(s, For) else [s]
    return out


def _test(cond, var):
    """``(value, holds)`` for a test ``var + k != c`` (``==``): the one value of ``var`` where it
    goes the other way, and what it gives at every other value; else None."""
    if getattr(cond, "name", None) not in _TESTS or len(cond.args) != 2:
        return None
    for a, b in (cond.args, cond.args[::-1]):
        c = const_value(b)
        base, k = split_offset(a)
        if c is not None and isinstance(base, Read) and base.ref.container is var and not base.ref.items:
            return c - k, _TESTS[cond.name]
    return None


def _tests(body, var):
    """The tests of ``var`` in ``body`` (at any depth) as ``{id(if): (value, holds)}``, and whether
    one of them holds statements writing an array."""
    found, arrays = {}, False
    for s in walk(body):
        if isinstance(s, If):
            t = _test(s.cond, var)
            if t is not None:
                found[id(s)] = t
                arrays = arrays or any(w.container.ndim for b in (s.then, s.orelse) for x in walk(b)
                                       for w in stmt_writes(x))
    return found, arrays


def _peeled(loop):
    """``loop`` as one or two loops (see the module)."""
    start, stop, step = (const_value(e) for e in (loop.start, loop.stop, loop.step))
    if None in (start, stop, step) or step == 0:
        return [loop]
    tests, arrays = _tests(loop.body, loop.var)
    if not arrays:
        return [loop]
    values = range(start, stop, step)
    apart = sorted({values.index(v) for v, _ in tests.values() if v in values})
    if not apart or len(apart) > PEEL or len(apart) * 2 > len(values):
        return [loop]
    if apart == list(range(len(apart))):                        # the first values of the range
        cut = len(apart)
        ends, rest = values[:cut], values[cut:]
    elif apart == list(range(len(values) - len(apart), len(values))):
        cut = len(values) - len(apart)
        rest, ends = values[:cut], values[cut:]
    else:
        return [loop]

    def taken(stmts):
        out = []
        for s in stmts:
            t = tests.get(id(s)) if isinstance(s, If) else None
            out += taken(s.then if t[1] else s.orelse) if t is not None else [map_blocks(s, taken)]
        return out

    def over(part, body):
        return For(loop.var, part.start, part.stop, step, body, loop.reverse, loop.loc)

    main, edge = distinct([over(rest, taken(loop.body)), over(ends, loop.body)])
    # the run's order: the edge iterations first where they open the range and it runs forwards
    first_ends = (ends.start == values.start) != loop.reverse
    return [edge, main] if first_ends else [main, edge]


__all__ = ["peel_boundary_tests", "PEEL"]
