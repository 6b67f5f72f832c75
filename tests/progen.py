"""Seeded random NumPy programs of the kind scientists write, checked against oracles.

``generate(seed)`` writes the source of one function ``f(x, A, s, k)`` (``x``: f64[n],
``A``: f64[m, m], ``s``: float, ``k``: a small int) built from the constructs flowgrad
must get right: time loops over a run-time count, index sweeps (Gauss-Seidel style, forward
and descending), ``while`` loops, ``break``/``continue`` on data, branches on data, slices
with steps (also negative), views written through, in-place slice, element, index-array and
mask updates, ``np.add.at``, ``np.where``, helpers that update an argument in place, Python
lists and tuples of values, name swaps, matrix products and reductions. Values stay bounded
(the expressions squash with ``sin``/``tanh`` and scale by factors below one), so finite
differences are a sound oracle.

``check(seed, backend)`` runs one program: plain Python/NumPy gives the value, central
differences in random directions (float64) the gradient, and flowgrad must agree on both
and leave the caller's arrays untouched. A program flowgrad refuses with a
``FlowgradError`` counts as refused, never as a pass or a mismatch.

Command line (each seed in a child process, so that a crash is recorded, not fatal)::

    python tests/progen.py --seed 0 --count 5000 --backends numpy,native --jobs 2
    python tests/progen.py --show 1234            # print one program
"""
from __future__ import annotations

import argparse
import copy
import json
import linecache
import os
import random
import subprocess
import sys
import time
import traceback

import numpy as np

# ------------------------------------------------------------------------- generation

_UNARY = ["np.sin({})", "np.cos({})", "np.tanh({})", "np.exp(0.3 * np.sin({}))",
          "np.sqrt(1.0 + {0} * {0})", "np.log(1.0 + {0} * {0})", "({0} / (1.0 + {0} * {0}))",
          "np.abs({})", "np.arctan({})"]
_BINARY = ["0.5 * ({} + {})", "({} - {}) * 0.5", "{} * {}", "np.maximum({}, {})", "np.minimum({}, {})",
           "np.sin({}) * {}", "np.tanh({} * {})"]
_COMPARE = [">", "<", ">=", "<="]


class _Gen:
    """One program under construction: the arrays and scalars in scope and the lines so far."""

    def __init__(self, seed):
        self.rng = random.Random(seed)
        self.n = self.rng.choice([6, 7, 8, 9])
        self.m = 3
        self.lines = []
        self.helpers = []
        self.arrays = {"x": self.n}          # name -> length of a 1-D float array
        self.owned = {"x"}                   # arrays that may be rebound or swapped (not views)
        self.scalars = ["s"]                 # float scalars in scope
        self.matrix = True                   # A (m x m) is in scope
        self.count = 0
        self.loop_index = None               # (name, lo_offset, hi_offset) of an index sweep

    def fresh(self, prefix):
        self.count += 1
        return f"{prefix}{self.count}"

    def emit(self, depth, text):
        self.lines.append("    " * depth + text)

    def const(self, lo=0.1, hi=0.9):
        return f"{self.rng.uniform(lo, hi):.3f}"

    # ---- reads
    def slice_of(self, name, length):
        """A subscript of `name` selecting exactly `length` elements (steps 1, 2 or -1), or None."""
        size = self.arrays[name]
        options = []
        if length <= size:
            options.append(1)
            options.append(-1)
        if 2 * (length - 1) < size:
            options.append(2)
        if not options:
            return None
        step = self.rng.choice(options)
        span = (length - 1) * abs(step) + 1
        start = self.rng.randint(0, size - span)
        if step == 1:
            if start == 0 and length == size and self.rng.random() < 0.5:
                return f"{name}[:]"
            stop = start + length
            stop_text = str(stop) if stop < size or self.rng.random() < 0.5 else ""
            if stop == size and self.rng.random() < 0.3:
                stop_text = f"len({name})"
            return f"{name}[{start or ''}:{stop_text}]"
        if step == 2:
            return f"{name}[{start}:{start + span}:2]"
        hi = start + length - 1
        lo = start - 1
        return f"{name}[{hi}:{lo if lo >= 0 else ''}:-1]"

    def array_leaf(self, length):
        names = [a for a, size in self.arrays.items() if size >= length]
        name = self.rng.choice(names)
        if self.arrays[name] == length and self.rng.random() < 0.4:
            return name
        return self.slice_of(name, length) or name

    def scalar_leaf(self):
        r = self.rng.random()
        if r < 0.35 and self.scalars:
            return self.rng.choice(self.scalars)
        if r < 0.5:
            return self.const(-0.9, 0.9)
        if self.loop_index and r < 0.8:
            name, lo, hi = self.loop_index
            off = self.rng.randint(lo, hi)
            arr = self.rng.choice([a for a, size in self.arrays.items() if size == self.n])
            return f"{arr}[{name}{' + ' + str(off) if off > 0 else (' - ' + str(-off) if off < 0 else '')}]"
        arr = self.rng.choice(list(self.arrays))
        return f"{arr}[{self.rng.randint(0, self.arrays[arr] - 1)}]"

    def expr(self, length, depth=2):
        """An elementwise expression of shape (length,), or a scalar one when length is None."""
        text, is_array = self._expr(length, depth)
        if length is not None and not is_array:
            text = f"0.5 * ({text} + {self.array_leaf(length)})"
        return text

    def _expr(self, length, depth):
        """(text, whether it has an array operand) of an expression of at most that shape."""
        r = self.rng.random()
        if depth == 0 or r < 0.25:
            if length is None or self.rng.random() < 0.15:
                return self.scalar_leaf(), False
            return self.array_leaf(length), True
        if r < 0.55:
            text, is_array = self._expr(length, depth - 1)
            return self.rng.choice(_UNARY).format(text), is_array
        if r < 0.9:
            a, a_array = self._expr(length, depth - 1)
            b, b_array = self._expr(length if self.rng.random() < 0.8 else None, depth - 1)
            if self.rng.random() < 0.5:
                a, b = b, a
            return self.rng.choice(_BINARY).format(a, b), a_array or b_array
        (c, c_array), (a, a_array), (b, b_array) = (self._expr(length, depth - 1) for _ in range(3))
        text = f"np.where({c} {self.rng.choice(_COMPARE)} {self.const(-0.3, 0.3)}, {a}, {b})"
        return text, c_array or a_array or b_array

    def scalar_expr(self, depth=2):
        r = self.rng.random()
        if r < 0.6:
            return self.expr(None, depth)
        length = self.rng.randint(1, self.n)
        red = self.rng.choice(["np.sum", "np.mean", "np.max", "np.min"])
        return f"0.3 * {red}({self.expr(length, depth - 1)})"

    # ---- statements
    def updatable(self, length=None):
        names = [a for a, size in self.arrays.items() if length is None or size >= length]
        return self.rng.choice(names)

    def stmt_slice_update(self, depth):
        dst = self.updatable()
        length = self.rng.randint(1, self.arrays[dst])
        target = self.slice_of(dst, length) or dst
        op = self.rng.choice(["=", "+=", "-=", "*="])
        value = self.expr(length, 2)
        if op == "*=":
            value = f"(1.0 + 0.2 * np.sin({value}))"
        elif op == "=":
            value = f"0.7 * {target} + 0.3 * np.tanh({value})" if self.rng.random() < 0.5 else f"np.tanh({value})"
        else:
            value = f"0.2 * np.sin({value})"
        self.emit(depth, f"{target} {op} {value}")

    def stmt_new_array(self, depth):
        name = self.fresh("t")
        r = self.rng.random()
        if r < 0.5:
            value = self.expr(self.n, 2)
            if value in self.arrays:                # a bare name would bind another name, not a new array
                value = f"1.0 * {value}"
            self.emit(depth, f"{name} = {value}")
        elif r < 0.7:
            src = self.updatable()
            self.emit(depth, f"{name} = {src}.copy()")
            self.arrays[name] = self.arrays[src]
            self.owned.add(name)
            return
        elif r < 0.85:
            self.emit(depth, f"{name} = np.zeros({'len(x)' if self.rng.random() < 0.5 else self.n})")
            self.emit(depth, f"{name}[1:] = {self.expr(self.n - 1, 1)}")
        else:
            self.emit(depth, f"{name} = np.empty_like(x)")
            self.emit(depth, f"{name}[:] = {self.expr(self.n, 1)}")
        self.arrays[name] = self.n
        self.owned.add(name)

    def stmt_view(self, depth):
        src = self.updatable()
        length = self.rng.randint(2, max(2, self.arrays[src]))
        sub = self.slice_of(src, min(length, self.arrays[src]))
        if sub is None or sub == src:
            return self.stmt_slice_update(depth)
        name = self.fresh("v")
        self.emit(depth, f"{name} = {sub}")
        self.arrays[name] = min(length, self.arrays[src])

    def index_array(self, size, count, unique):
        if unique:
            idx = self.rng.sample(range(size), count)
        else:
            idx = [self.rng.randrange(size) for _ in range(count)]
        return "np.array([" + ", ".join(map(str, idx)) + "])"

    def stmt_scatter(self, depth):
        dst = self.updatable()
        size = self.arrays[dst]
        count = self.rng.randint(1, min(size, 4))
        r = self.rng.random()
        value = self.expr(count, 1) if self.rng.random() < 0.7 else self.expr(None, 1)
        if r < 0.4:
            self.emit(depth, f"np.add.at({dst}, {self.index_array(size, count, False)}, 0.3 * np.sin({value}))")
        elif r < 0.7:
            op = self.rng.choice(["+=", "*="])
            factor = f"0.3 * np.sin({value})" if op == "+=" else f"(1.0 + 0.2 * np.cos({value}))"
            self.emit(depth, f"{dst}[{self.index_array(size, count, True)}] {op} {factor}")
        else:
            self.emit(depth, f"{dst}[{self.index_array(size, count, self.rng.random() < 0.7)}] = np.tanh({value})")

    def stmt_mask(self, depth):
        dst = self.updatable()
        cmp = self.rng.choice(_COMPARE)
        c = self.const(-0.5, 0.5)
        r = self.rng.random()
        if r < 0.5:
            self.emit(depth, f"{dst}[{dst} {cmp} {c}] *= {self.const(0.3, 0.9)}")
        else:
            mask = self.fresh("m")
            self.emit(depth, f"{mask} = {self.expr(self.arrays[dst], 1)} {cmp} {c}")
            self.emit(depth, f"{dst}[{mask}] = 0.5 * np.sin({dst}[{mask}]) + {self.const(-0.5, 0.5)}")

    def stmt_scalar(self, depth):
        name = self.fresh("c")
        if self.rng.random() < 0.3:
            arr = self.rng.choice(list(self.arrays))
            self.emit(depth, f"{name} = {arr}[{self.rng.randint(0, self.arrays[arr] - 1)}]")
        else:
            self.emit(depth, f"{name} = {self.scalar_expr()}")
        self.scalars.append(name)

    def stmt_container(self, depth):
        """A list or tuple holding values, read back after the names it was built from change."""
        name = self.fresh("r")
        items = [self.expr(None, 1), self.scalar_leaf()]
        if self.rng.random() < 0.5:
            arr = self.rng.choice(list(self.arrays))
            items.append(f"{arr}[{self.rng.randint(0, self.arrays[arr] - 1)}]")
        bracket = "[{}]" if self.rng.random() < 0.6 else "({},)"
        self.emit(depth, f"{name} = " + bracket.format(", ".join(items)))
        self.body(depth, 1)
        out = self.fresh("c")
        self.emit(depth, f"{out} = {name}[{self.rng.randrange(len(items))}] * {self.const()} + "
                         f"{name}[{self.rng.randrange(len(items))}]")
        self.scalars.append(out)

    def stmt_list_loop(self, depth):
        name = self.fresh("rows")
        count = self.rng.randint(2, 4)
        self.emit(depth, f"{name} = []")
        self.emit(depth, f"for j in range({count}):")
        arr = self.rng.choice([a for a, size in self.arrays.items() if size >= count])
        self.emit(depth + 1, f"{name}.append(np.sin({arr}[j]) * {self.scalar_leaf()})")
        out = self.fresh("c")
        self.emit(depth, f"{out} = {name}[0] + {self.const()} * {name}[-1]")
        self.scalars.append(out)

    def stmt_swap(self, depth):
        pool = [a for a in sorted(self.owned) if self.arrays.get(a) == self.n]
        if len(pool) < 2:
            return self.stmt_new_array(depth)
        a, b = self.rng.sample(pool, 2)
        self.emit(depth, f"{a}, {b} = {b}, {a}")

    def stmt_matrix(self, depth):
        m = self.m
        r = self.rng.random()
        if r < 0.3:
            name = self.fresh("t")
            self.emit(depth, f"{name} = np.tanh(A @ {self.slice_of(self.updatable(m), m)})")
            self.arrays[name] = m
            self.owned.add(name)
        elif r < 0.55:
            i = self.rng.randrange(m)
            self.emit(depth, f"A[{i}, :] = 0.8 * A[{i}, :] + 0.2 * np.sin({self.expr(m, 1)})")
        elif r < 0.75:
            j = self.rng.randrange(m)
            self.emit(depth, f"A[:, {j}] += 0.1 * np.cos({self.expr(m, 1)})")
        elif r < 0.9:
            self.emit(depth, f"A = 0.5 * np.tanh(A @ A.T) + 0.5 * A")
        else:
            name = self.fresh("c")
            self.emit(depth, f"{name} = 0.1 * np.sum(A * A) + np.sum(A[1:, ::-1] @ {self.slice_of(self.updatable(m), m)})")
            self.scalars.append(name)

    def stmt_if(self, depth):
        self.emit(depth, f"if {self.scalar_expr(1)} {self.rng.choice(_COMPARE)} {self.const(-0.3, 0.3)}:")
        self.scoped(depth + 1, self.rng.randint(1, 2))
        if self.rng.random() < 0.6:
            self.emit(depth, "else:")
            self.scoped(depth + 1, self.rng.randint(1, 2))

    def stmt_time_loop(self, depth):
        var = self.fresh("it")
        bound = self.rng.choice(["k", "k", "2", "3", "k + 1"])
        self.emit(depth, f"for {var} in range({bound}):")
        self.scoped(depth + 1, self.rng.randint(1, 3))

    def stmt_sweep(self, depth):
        """An element sweep x[i] = f(x[i - 1], x[i], x[i + 1]) forward or descending, maybe with break."""
        var = self.fresh("i")
        lo, hi = self.rng.choice([(-1, 1), (0, 1), (-1, 0), (0, 0)])
        start, stop = -lo, self.n - hi
        if self.rng.random() < 0.5:
            header = f"range({start}, {'len(x)' if self.rng.random() < 0.5 else self.n}{' - ' + str(hi) if hi else ''})"
        else:
            header = f"range({stop - 1}, {start - 1}, -1)"
        self.emit(depth, f"for {var} in {header}:")
        saved = self.loop_index
        self.loop_index = (var, lo, hi)
        full = [a for a, size in self.arrays.items() if size == self.n]
        dst = self.rng.choice(full)
        for _ in range(self.rng.randint(1, 2)):
            value = self.expr(None, 2)
            if self.rng.random() < 0.5:
                self.emit(depth + 1, f"{dst}[{var}] = 0.8 * {dst}[{var}] + 0.2 * np.sin({value})")
            else:
                self.emit(depth + 1, f"{dst}[{var}] += 0.1 * np.tanh({value})")
        if self.rng.random() < 0.3:
            self.emit(depth + 1, f"if {self.scalar_leaf()} {self.rng.choice(_COMPARE)} {self.const(-0.5, 0.5)}:")
            self.emit(depth + 2, self.rng.choice(["break", "continue"]))
            self.emit(depth + 1, f"{dst}[{var}] *= {self.const(0.8, 0.99)}")
        self.loop_index = saved

    def stmt_while(self, depth):
        var = self.fresh("j")
        self.emit(depth, f"{var} = 0")
        limit = self.rng.choice(["3", "k + 1", "len(x) // 2"])
        cond = f"{var} < {limit}"
        if self.rng.random() < 0.6:
            cond += f" and {self.scalar_leaf()} {self.rng.choice(_COMPARE)} {self.const(-0.5, 0.5)}"
        self.emit(depth, f"while {cond}:")
        self.scoped(depth + 1, self.rng.randint(1, 2))
        self.emit(depth + 1, f"{var} += 1")

    def stmt_helper(self, depth):
        name = self.fresh("h")
        n = self.n
        lines = [f"def {name}(a, b):"]
        kind = self.rng.random()
        if kind < 0.4:
            lines.append(f"    a[1:] += 0.2 * np.sin(b[:-1] * a[:-1])")
        elif kind < 0.7:
            lines.append(f"    a[{self.rng.randrange(n)}] = np.tanh(b[0] + a[1])")
        else:
            lines.append(f"    a = a * 0.5")
        lines.append(f"    return np.tanh(a * b) + {self.const(-0.5, 0.5)}")
        self.helpers.append("\n".join(lines))
        full = [a for a, size in self.arrays.items() if size == n]
        a, b = self.rng.choice(full), self.rng.choice(full)
        out = self.fresh("t")
        if a == b:
            b = f"{b}.copy()"
        self.emit(depth, f"{out} = {name}({a}, {b})")
        self.arrays[out] = n
        self.owned.add(out)

    def stmt_matrix_sweep(self, depth):
        """Nested loops over A reading the neighbours a previous pass wrote (a 2-D Gauss-Seidel sweep)."""
        i, j = self.fresh("i"), self.fresh("j")
        self.emit(depth, f"for {i} in range(1, {self.m}):")
        inner = self.rng.choice([f"range({self.m})", f"range({self.m} - 1, -1, -1)", f"range(1, {self.m})"])
        self.emit(depth + 1, f"for {j} in {inner}:")
        reads = [f"A[{i} - 1, {j}]", f"A[{i}, {j}]", f"A[{i} - 1, {self.m} - 1 - {j}]", self.scalar_leaf()]
        value = self.rng.choice(_BINARY).format(self.rng.choice(reads), self.rng.choice(reads))
        self.emit(depth + 2, f"A[{i}, {j}] = 0.6 * A[{i}, {j}] + 0.4 * np.sin({value})")

    def stmt_runtime_slice(self, depth):
        """Slices whose bounds are known only at run time (k)."""
        dst = self.rng.choice([a for a, size in self.arrays.items() if size == self.n])
        r = self.rng.random()
        if r < 0.4:
            self.emit(depth, f"{dst}[k:k + 2] += 0.2 * np.sin({self.array_leaf(2)})")
        elif r < 0.7:
            self.emit(depth, f"{dst}[:k + 1] *= {self.const(0.5, 0.95)}")
        else:
            self.emit(depth, f"{dst}[-k - 1:] = np.tanh({dst}[:k + 1] + {self.scalar_leaf()})")

    def stmt_library(self, depth):
        """NumPy calls that are not elementwise, on values of the program."""
        name = self.fresh("t")
        n = self.n
        r = self.rng.random()
        if r < 0.2:
            self.emit(depth, f"{name} = 0.3 * np.cumsum({self.expr(n, 1)})")
        elif r < 0.4:
            self.emit(depth, f"{name} = np.roll({self.expr(n, 1)}, {self.rng.choice([-2, -1, 1, 3])})")
        elif r < 0.6:
            self.emit(depth, f"{name} = np.concatenate(({self.expr(2, 1)}, {self.expr(n - 2, 1)}))")
        elif r < 0.8:
            self.emit(depth, f"{name} = np.tanh(np.outer({self.expr(self.m, 1)}, {self.expr(self.m, 1)}) @ "
                             f"({self.expr(self.m, 1)}))")
            self.arrays[name] = self.m
            self.owned.add(name)
            return
        else:
            self.emit(depth, f"{name} = np.sort({self.expr(n, 1)})[::-1] * {self.const()}")
        self.arrays[name] = n
        self.owned.add(name)

    def stmt_early_return(self, depth):
        if depth != 1:
            return self.stmt_slice_update(depth)
        self.emit(depth, f"if {self.scalar_expr(1)} > {self.const(0.2, 0.6)}:")
        self.emit(depth + 1, f"return {self.const()} * np.sum(np.sin({self.updatable()})) + s")

    STATEMENTS = [
        (stmt_slice_update, 6), (stmt_new_array, 3), (stmt_view, 2), (stmt_scatter, 2), (stmt_mask, 1),
        (stmt_scalar, 2), (stmt_container, 1), (stmt_list_loop, 1), (stmt_swap, 1), (stmt_matrix, 2),
        (stmt_if, 2), (stmt_time_loop, 2), (stmt_sweep, 3), (stmt_while, 1), (stmt_helper, 1),
        (stmt_matrix_sweep, 1), (stmt_runtime_slice, 1), (stmt_library, 1), (stmt_early_return, 0.3),
    ]

    def body(self, depth, count):
        funcs, weights = zip(*self.STATEMENTS)
        for _ in range(count):
            if depth > 3:
                self.stmt_slice_update(depth)
                continue
            self.rng.choices(funcs, weights)[0](self, depth)

    def scoped(self, depth, count):
        """Statements in a nested block: names bound there do not outlive it in our bookkeeping."""
        arrays, owned, scalars = dict(self.arrays), set(self.owned), list(self.scalars)
        self.body(depth, count)
        self.arrays, self.owned, self.scalars = arrays, owned, scalars

    def program(self):
        self.body(1, self.rng.randint(3, 7))
        terms = []
        for name in sorted(self.arrays):
            w = self.const(0.2, 1.0)
            terms.append(f"{w} * np.sum(np.sin({name}) * np.arange(1, {self.arrays[name]} + 1))")
        for name in self.scalars:
            terms.append(f"{self.const(0.2, 1.0)} * {name}")
        terms.append("0.3 * np.sum(np.cos(A))")
        self.emit(1, "return " + " + ".join(terms))
        head = "def f(x, A, s, k):"
        return "\n\n".join(self.helpers + [head + "\n" + "\n".join(self.lines)]) + "\n"


def generate(seed):
    """The source of program number `seed` (deterministic)."""
    return _Gen(seed).program()


def inputs(seed):
    """Arguments for program `seed`: x (n,), A (3, 3), s, k."""
    rng = np.random.default_rng(seed + 10_000_019)
    n = _Gen(seed).n
    return [rng.uniform(-1.0, 1.0, n), rng.uniform(-1.0, 1.0, (3, 3)), float(rng.uniform(-1, 1)),
            int(rng.integers(0, 4))]


def load(seed):
    """Compile program `seed` under a file name whose source inspect (and flowgrad) can read."""
    source = generate(seed)
    filename = f"<progen-{seed}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np, "__name__": f"progen_{seed}"}
    exec(compile(source, filename, "exec"), namespace)
    return namespace["f"]


# ------------------------------------------------------------------------------ oracle

def _value(fn, args):
    return float(fn(*copy.deepcopy(args)))


def _directional(fn, args, direction, eps):
    plus = [a + eps * d if d is not None else a for a, d in zip(args, direction)]
    minus = [a - eps * d if d is not None else a for a, d in zip(args, direction)]
    return (_value(fn, plus) - _value(fn, minus)) / (2 * eps)


def _second(fn, args, d, eps):
    """The difference of ``<grad_x, d>`` along ``d`` in ``x``: ``d' H d`` to O(eps^2)."""
    import flowgrad
    g = flowgrad.grad(fn, wrt="x", backend="numpy")
    moved = [copy.deepcopy(list(args)) for _ in range(2)]
    moved[0][0], moved[1][0] = args[0] + eps * d, args[0] - eps * d
    return float((g(*moved[0]) - g(*moved[1])) @ d) / (2 * eps)


def _unstable(fn, args, expected):
    """Whether the program amplifies rounding (a chaotic one): NumPy's value moves past the value
    tolerance when the inputs move by a few ulps, so another summation order is no defect."""
    for scale in (1 + 4e-16, 1 - 4e-16):
        moved = [a * scale if isinstance(a, (np.ndarray, float)) else a for a in args]
        if not abs(_value(fn, moved) - expected) <= 1e-9 * max(1.0, abs(expected)):
            return True
    return False


def _nested_checkpointed(fn, args, backend, innermost=False):
    """(value, gradients in x, A, s) with nested ``for`` loops reversed by binomial schedules with
    one snapshot, or None when the program has none: the outermost nested loops (not inside one
    of them), or the ``innermost`` (no other inside them)."""
    from flowgrad.api import _Compiled, _run_vjp
    from flowgrad.checkpoint import loops, schedules

    wrt = ("x", "A", "s")
    body = _Compiled(fn, args, wrt, backend, "reverse").prog.body
    nested = [(key, outer) for key, loop, outer in loops.nested_loops(body)
              if loops.checkpointable(loop, loops.state_containers(loop, loops.outside(body, loop))) is None]
    if innermost:
        around = {o.var.name for _, outer in nested for o in outer}
        keys = [key for key, _ in nested if key not in around]
    else:
        keys = [key for key, outer in nested if not any(o.var.name in dict(nested) for o in outer)]
    if not keys:
        return None
    entry = _Compiled(fn, args, wrt, backend, "reverse", {k: schedules.BINOMIAL for k in keys})
    value, pullback = _run_vjp(entry, copy.deepcopy(args), {k: 1 for k in keys})
    return float(value), [np.asarray(g) for g in pullback(1.0)]


def check(seed, backend, n_dirs=2, mode="grad"):
    """Check program `seed` on `backend`: returns (status, detail).

    mode "grad" checks ``value_and_grad``, mode "jvp" checks ``jvp`` (forward mode), mode "jac"
    ``jacfwd`` (forward mode, every input direction in one batched program), each against finite
    differences in random directions; mode "hess" checks ``hessian`` in ``x`` (forward over
    reverse, batched), ``d' H d`` against the difference of ``<grad, d>`` along a random ``d``
    (the reverse-mode gradient on numpy, itself checked by mode "grad"); mode "gg" the same
    ``d' H d`` by reverse over reverse, ``grad(lambda x: grad(f)(x) @ d)``, the inner ``grad``
    called inside the captured function; mode "unc" checks ``value_and_grad`` with
    ``allow_uncompute=True`` (invertible updates run backwards instead of taped); mode "rc" with
    ``strategy="recompute_all"`` (every top-level loop checkpointed: ``for`` loops by binomial
    schedules, ``while`` loops by online ones), which must also equal the store-all gradient to
    rounding; mode "nc" the same with nested ``for`` loops checkpointed instead (binomial, one
    snapshot; ``checkpoint.loops.apply_nested``: the outermost of them for an even seed, the
    innermost for an odd one) and the top-level loops storing every iteration ("skip" when there
    is none).

    status: "ok", "refused" (a FlowgradError), "skip" (the program itself overflows or fails
    in NumPy), "nonsmooth" (finite differences, or values, are no oracle: a kink within the
    step, or a program that amplifies rounding), "value" (flowgrad's value differs), "grad" (its derivative differs from finite
    differences), "mutated" (the caller's arrays changed) or "error" (any other exception).
    """
    import flowgrad

    fn = load(seed)
    args = inputs(seed)
    try:
        with np.errstate(all="raise"):
            expected = _value(fn, args)
    except Exception as exc:                       # the program is not a valid test
        return "skip", f"NumPy: {type(exc).__name__}: {exc}"
    if not np.isfinite(expected) or abs(expected) > 1e6:
        return "skip", f"value {expected}"
    saved = copy.deepcopy(args)
    rng = np.random.default_rng(seed)
    directions = []
    for _ in range(n_dirs):
        direction = [rng.standard_normal(np.shape(a)) for a in args[:3]] + [None]
        direction[2] = float(direction[2])
        directions.append(direction)
    try:
        if mode == "hess":
            value = _value(fn, args)
            H = flowgrad.hessian(fn, wrt="x", backend=backend)(*args)
            d = directions[0][0]
            derivatives, directions = [float(d @ H @ d)], [[d, None, None, None]]
        elif mode == "gg":
            value = _value(fn, args)
            d = directions[0][0]
            hd = flowgrad.grad(lambda x, A, s, k: np.sum(flowgrad.grad(fn, wrt="x")(x, A, s, k) * d),
                               backend=backend)(*args)
            derivatives, directions = [float(d @ hd)], [[d, None, None, None]]
        elif mode == "jvp":
            value, tangent = flowgrad.jvp(fn, args, directions[0], wrt=("x", "A", "s"), backend=backend)
            derivatives = [tangent]
            directions = directions[:1]
        else:
            if mode == "jac":
                value = _value(fn, args)
                grads = flowgrad.jacfwd(fn, wrt=("x", "A", "s"), backend=backend)(*args)
            elif mode == "nc":
                nested = _nested_checkpointed(fn, args, backend, innermost=seed % 2 == 1)
                if nested is None:
                    return "skip", "no nested loop"
                value, grads = nested
                _, stored = flowgrad.value_and_grad(fn, wrt=("x", "A", "s"), backend=backend)(*args)
                if not all(np.allclose(g, h, rtol=1e-12, atol=1e-13 * max(1.0, float(np.max(np.abs(h)))))
                           for g, h in zip(grads, stored)):
                    return "grad", "the gradient with nested loops checkpointed differs from the store-all one"
            else:
                value, grads = flowgrad.value_and_grad(fn, wrt=("x", "A", "s"), backend=backend,
                                                       allow_uncompute=mode == "unc",
                                                       strategy="recompute_all" if mode == "rc" else None)(*args)
                if mode == "rc":
                    _, stored = flowgrad.value_and_grad(fn, wrt=("x", "A", "s"), backend=backend)(*args)
                    # the same operations, replayed: equal up to an operation evaluated in another
                    # order where a value is recomputed rather than restored
                    if not all(np.allclose(g, h, rtol=1e-12, atol=1e-13 * max(1.0, float(np.max(np.abs(h)))))
                               for g, h in zip(grads, stored)):
                        return "grad", "the checkpointed gradient differs from the store-all one"
            derivatives = [sum(float(np.sum(g * d)) for g, d in zip(grads, direction[:3]))
                           for direction in directions]
    except flowgrad.FlowgradError as exc:
        return "refused", f"{type(exc).__name__}: {exc}"
    except Exception as exc:
        return "error", f"{type(exc).__name__}: {exc}\n{traceback.format_exc(limit=-4)}"
    for a, b in zip(args, saved):
        if not np.array_equal(a, b):
            return "mutated", "the caller's arguments changed"
    if not abs(value - expected) <= 1e-9 * max(1.0, abs(expected)):
        if _unstable(fn, args, expected):
            return "nonsmooth", f"NumPy's own value moves with rounding: flowgrad {value!r}, NumPy {expected!r}"
        return "value", f"flowgrad {value!r}, NumPy {expected!r}"
    for ad, direction in zip(derivatives, directions):
        ad = float(ad)
        try:
            fds = [_directional(fn, args, direction, eps) for eps in (1e-6, 1e-5)] if mode not in ("hess", "gg") \
                else [_second(fn, args, direction[0], eps) for eps in (1e-6, 1e-5)]
        except flowgrad.FlowgradError as exc:          # the oracle's own gradient is refused
            return "refused", f"oracle: {type(exc).__name__}: {exc}"
        if abs(ad - fds[0]) <= 1e-5 * max(abs(ad), abs(fds[0]), 1e-3):
            continue
        if abs(fds[0] - fds[1]) > 1e-3 * max(abs(fds[0]), abs(fds[1]), 1e-3):
            # a kink within eps, or values too large for the steps: finite differences are no oracle
            return "nonsmooth", f"finite differences {fds}, <grad, d> {ad!r}"
        return "grad", f"<grad, d> {ad!r}, finite differences {fds[0]!r} (eps 1e-5: {fds[1]!r})"
    return "ok", ""


# ------------------------------------------------------------------------ command line

def _worker(jobs, deadline):
    import warnings
    warnings.simplefilter("ignore")
    for seed, backend in jobs:
        if time.time() > deadline:
            return
        start = time.perf_counter()
        try:
            name, _, mode = backend.partition("-")
            status, detail = check(seed, name, mode=mode or "grad")
        except Exception as exc:                # a defect of the oracle itself
            status, detail = "error", f"oracle: {type(exc).__name__}: {exc}"
        print(json.dumps({"seed": seed, "backend": backend, "status": status, "detail": detail[:2000],
                          "seconds": round(time.perf_counter() - start, 2)}), flush=True)


def _run_chunk(jobs, deadline):
    """Run (seed, backend) jobs in a child process; a crash (signal, abort) is recorded and the rest
    resumes. Jobs not started by `deadline` (a time.time()) are left out."""
    done = []
    while jobs and time.time() < deadline:
        spec = ",".join(f"{s}:{b}" for s, b in jobs)
        proc = subprocess.run([sys.executable, __file__, "--worker", spec, "--deadline", str(deadline)],
                              capture_output=True, text=True)
        results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        done += results
        jobs = jobs[len(results):]
        if jobs and proc.returncode != 0:
            seed, backend = jobs.pop(0)
            done.append({"seed": seed, "backend": backend, "status": "crash",
                         "detail": f"exit {proc.returncode}: {proc.stderr[-1500:]}", "seconds": 0})
    return done


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--backends", default="numpy,native",
                        help="backends to check the gradient on; BACKEND-jvp checks forward mode, BACKEND-jac "
                             "jacfwd (all directions in one batched program), BACKEND-hess the Hessian in x, "
                             "BACKEND-gg grad of grad in x, BACKEND-unc the gradient with allow_uncompute, BACKEND-rc "
                             "with every top-level loop checkpointed (equal to store-all to rounding), BACKEND-nc "
                             "with every nested loop checkpointed instead")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--chunk", type=int, default=25)
    parser.add_argument("--out", help="write one JSON line per program and backend here")
    parser.add_argument("--show", type=int, help="print the program with this seed and exit")
    parser.add_argument("--minutes", type=float, default=1e9, help="start no program after this long")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, default=1e18, help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    backends = opts.backends.split(",")
    if opts.show is not None:
        print(generate(opts.show), end="")
        print("# inputs:", [a.tolist() if isinstance(a, np.ndarray) else a for a in inputs(opts.show)])
        return 0
    if opts.worker:
        _worker([(int(job.split(":")[0]), job.split(":")[1]) for job in opts.worker.split(",")], opts.deadline)
        return 0
    from concurrent.futures import ThreadPoolExecutor
    seeds = list(range(opts.seed, opts.seed + opts.count))
    chunks = [[(s, b) for s in seeds[i:i + opts.chunk] for b in backends]
              for i in range(0, len(seeds), opts.chunk)]
    counts = {}
    out = open(opts.out, "w") if opts.out else None
    start = time.time()
    deadline = start + 60 * opts.minutes
    with ThreadPoolExecutor(opts.jobs) as pool:
        for results in pool.map(lambda chunk: _run_chunk(chunk, deadline), chunks):
            for r in results:
                counts[(r["backend"], r["status"])] = counts.get((r["backend"], r["status"]), 0) + 1
                if out:
                    out.write(json.dumps(r) + "\n")
                    out.flush()
                if r["status"] not in ("ok", "refused", "skip", "nonsmooth"):
                    print(f"seed {r['seed']} {r['backend']}: {r['status']}: {r['detail'][:300]}", flush=True)
    if out:
        out.close()
    ran = {b: sum(c for (b2, _), c in counts.items() if b2 == b) for b in backends}
    print(f"{ran} programs from seed {opts.seed} in {time.time() - start:.0f} s")
    for backend in backends:
        row = {status: c for (b, status), c in sorted(counts.items()) if b == backend}
        print(f"  {backend}: " + ", ".join(f"{k} {v}" for k, v in row.items()))
    bad = sum(c for (b, status), c in counts.items() if status not in ("ok", "refused", "skip", "nonsmooth"))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
