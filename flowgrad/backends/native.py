"""Native backend: the IR lowered to explicit loop nests in Python source, compiled by Numba.

Every array statement becomes a loop nest over its destination, with the whole expression
tree evaluated per element (fused, no temporaries). A statement whose destination overlaps
what it reads at a different position first evaluates into a temporary (NumPy semantics).
Matrix products and solves stay BLAS/LAPACK calls; reductions, gathers, scatters, einsum and
the like become loops. Tapes are flat, growable buffers. The generated source is written to
a cache directory and compiled with ``numba.njit(cache=True)``, so a new process reuses the
machine code.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import sys

import numpy as np

from ..errors import FlowgradError
from ..ir.core import (Assign, Call, Const, For, If, Index, NewAxis, Op, Pop, Push, Read, Slice,
                       While, const_value, iter_reads, same_expr, same_ref)
from .numpy import dtype_src

_INFIX = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "floor_divide": "//",
          "mod": "%", "power": "**", "less": "<", "less_equal": "<=", "greater": ">",
          "greater_equal": ">=", "equal": "==", "not_equal": "!="}
_FUNC = {"abs": "np.abs", "round": "np.rint", "maximum": "np.maximum", "minimum": "np.minimum"}
_CAST = {"float64": "np.float64", "float32": "np.float32", "int64": "np.int64", "int32": "np.int32",
         "bool": "np.bool_"}


def _scalar_type(dt):
    dt = np.dtype(dt)
    return {"f": f"np.{dt.name}", "i": "np.int64", "u": "np.int64", "b": "np.bool_"}[dt.kind]


class Lowering:
    """Emits Numba-compilable source for a list of IR statements."""

    def __init__(self, containers):
        self.containers = containers
        self.lines = []
        self.counter = 0
        self.allocated_at_start = set()

    # ------------------------------------------------------------ helpers

    def fresh(self, hint):
        self.counter += 1
        return f"_{hint}{self.counter}"

    def line(self, text, ind):
        self.lines.append("    " * ind + text)

    def src(self, e):
        """Source of a scalar (0-d) expression."""
        return self.elem(e, [], ())

    def elem(self, e, idx, space):
        """Source of expression ``e``'s element at iteration-space position ``idx`` (broadcasting)."""
        if isinstance(e, Const):
            v = e.value
            if isinstance(v, float) and not np.isfinite(v):
                return "np.nan" if np.isnan(v) else ("np.inf" if v > 0 else "-np.inf")
            return repr(v)
        if isinstance(e, Read):
            return self.read(e.ref, idx, space)
        if isinstance(e, Op):
            args = [self.elem(a, idx, space) for a in e.args]
            name = e.name
            if name in _INFIX:
                return f"({args[0]} {_INFIX[name]} {args[1]})"
            if name == "negative":
                return f"(-{args[0]})"
            if name == "logical_and":
                return f"({args[0]} and {args[1]})"
            if name == "logical_or":
                return f"({args[0]} or {args[1]})"
            if name == "logical_not":
                return f"(not {args[0]})"
            if name == "where":
                return f"({args[1]} if {args[0]} else {args[2]})"
            if name == "square":
                return f"({args[0]} * {args[0]})"
            if name in _CAST:
                return f"{_CAST[name]}({args[0]})"
            return f"{_FUNC.get(name, 'np.' + name)}({', '.join(args)})"
        raise TypeError(f"cannot lower {e!r}")

    def read(self, ref, idx, space):
        c = ref.container
        if c.ndim == 0:
            return c.name
        return f"{c.name}[{', '.join(self.container_index(ref, idx, space))}]"

    def container_index(self, ref, idx, space):
        """Container indices of a view element, the view broadcast against ``space``."""
        vshape = ref.shape
        r, k = len(vshape), len(space)
        view_idx = []
        for a in range(r):
            sa = k - r + a
            if const_value(vshape[a]) == 1 and (sa < 0 or const_value(space[sa]) != 1):
                view_idx.append("0")
            else:
                view_idx.append(idx[sa])
        if ref.perm is not None:
            under = [None] * r
            for a, p in enumerate(ref.perm):
                under[p] = view_idx[a]
            view_idx = under
        out, it = [], iter(view_idx)
        for item in ref.items:
            if isinstance(item, Index):
                out.append(self.src(item.at))
            elif isinstance(item, NewAxis):
                next(it)
            else:
                i = next(it)
                start, step = const_value(item.start), const_value(item.step)
                term = i if step == 1 else f"{i} * {self.src(item.step)}"
                out.append(term if start == 0 else f"{self.src(item.start)} + {term}")
        return out

    def extents(self, shape):
        return [self.src(d) for d in shape]

    def nest(self, shape, ind, hint="i"):
        """Open loops over ``shape``; returns (index names, inner indent)."""
        names = []
        for ext in self.extents(shape):
            n = self.fresh(hint)
            self.line(f"for {n} in range({ext}):", ind)
            names.append(n)
            ind += 1
        return names, ind

    def view_src(self, ref):
        """A NumPy-style view of a Ref, for BLAS and LAPACK calls."""
        c = ref.container
        if c.ndim == 0:
            return c.name
        if ref.is_whole():
            return c.name
        parts = []
        for it in ref.items:
            if isinstance(it, Index):
                parts.append(self.src(it.at))
            elif isinstance(it, NewAxis):
                parts.append("np.newaxis")
            else:
                start, size, step = self.src(it.start), self.src(it.size), self.src(it.step)
                if const_value(it.step) == 1:
                    parts.append(f"{start}:{start} + {size}")
                else:
                    parts.append(f"{start}:_rt.slice_end({start}, {size}, {step}):{step}")
        text = f"{c.name}[{', '.join(parts)}]"
        if ref.perm is not None:
            text = f"np.transpose({text}, {ref.perm!r})" if len(ref.perm) > 2 else f"{text}.T"
        return text

    # ------------------------------------------------------------ statements

    def block(self, stmts, ind):
        if not stmts:
            self.line("pass", ind)
        k = 0
        while k < len(stmts):
            group = [stmts[k]]
            if self.fusable(stmts[k]):
                while k + len(group) < len(stmts) and self.joins(group, stmts[k + len(group)]):
                    group.append(stmts[k + len(group)])
            if len(group) > 1:
                self.fused(group, ind)
            else:
                self.stmt(stmts[k], ind)
            k += len(group)

    def fusable(self, s):
        # a whole write that allocates (a transient of run-time shape) rebinds its container, which
        # must not happen before an earlier statement of the group has read the old array
        if not (isinstance(s, Assign) and s.dst.container.ndim > 0 and len(s.dst.shape) > 0):
            return False
        allocates = s.dst.is_whole() and not s.accumulate and self.needs_allocation(s.dst.container)
        return not allocates and not self.needs_temp(s)

    def joins(self, group, s):
        """Whether ``s`` can run in the same loop nest as ``group`` (adjacent statements over the
        same iteration space whose dependences stay element-wise)."""
        if not self.fusable(s):
            return False
        shape = group[0].dst.shape
        if len(s.dst.shape) != len(shape) or not all(same_expr(a, b) for a, b in zip(s.dst.shape, shape)):
            return False
        for g in group:
            if g.dst.container is s.dst.container and not same_ref(g.dst, s.dst):
                return False
            for later, earlier in ((s, g), (g, s)):
                for r in iter_reads(later.expr):
                    if r.ref.container is earlier.dst.container and not same_ref(r.ref, earlier.dst):
                        return False
                for ie in later.dst.index_exprs():
                    if any(r.ref.container is earlier.dst.container for r in iter_reads(ie)):
                        return False
        return True

    def fused(self, group, ind):
        """One loop nest running several element-wise statements in order, per element."""
        shape = group[0].dst.shape
        names, inner = self.nest(shape, ind)
        for s in group:
            target = self.read(s.dst, names, shape)
            self.line(f"{target} {'+=' if s.accumulate else '='} {self.elem(s.expr, names, shape)}", inner)

    def stmt(self, s, ind):
        if isinstance(s, Assign):
            self.assign(s, ind)
        elif isinstance(s, Call):
            CALL_LOWERING[s.op](self, s, ind)
        elif isinstance(s, For):
            self.for_loop(s, ind)
        elif isinstance(s, While):
            self.line(f"while {self.src(s.cond)}:", ind)
            self.block(s.body, ind + 1)
        elif isinstance(s, If):
            self.line(f"if {self.src(s.cond)}:", ind)
            self.block(s.then, ind + 1)
            if s.orelse:
                self.line("else:", ind)
                self.block(s.orelse, ind + 1)
        elif isinstance(s, Push):
            self.push(s, ind)
        elif isinstance(s, Pop):
            self.pop(s, ind)
        else:
            raise TypeError(f"cannot lower {s!r}")

    def for_loop(self, s, ind):
        start, stop, step = self.src(s.start), self.src(s.stop), self.src(s.step)
        if not s.reverse:
            rng = f"range({start}, {stop})" if const_value(s.step) == 1 else f"range({start}, {stop}, {step})"
            self.line(f"for {s.var.name} in {rng}:", ind)
            self.block(s.body, ind + 1)
            return
        trips = self.fresh("trips")
        k = self.fresh("k")
        self.line(f"{trips} = _rt.trip_count({start}, {stop}, {step})", ind)
        self.line(f"for {k} in range({trips}):", ind)
        self.line(f"{s.var.name} = {start} + ({trips} - 1 - {k}) * {step}", ind + 1)
        self.block(s.body, ind + 1)

    def needs_temp(self, s):
        """Whether the right side reads the destination at other positions than it writes."""
        dst = s.dst
        if not dst.shape:
            return False      # one element: the right side is computed before the store
        for r in iter_reads(s.expr):
            if r.ref.container is dst.container and dst.container.ndim:
                if not (same_ref(r.ref, dst) and len(r.ref.shape) == len(dst.shape)):
                    return True
        return False

    def assign(self, s, ind):
        c = s.dst.container
        if c.ndim == 0:
            op = "+=" if s.accumulate else "="
            value = self.src(s.expr)
            if not s.accumulate:
                value = f"{_scalar_type(c.dtype)}({value})"
            self.line(f"{c.name} {op} {value}", ind)
            return
        allocate = s.dst.is_whole() and not s.accumulate and self.needs_allocation(c)
        alloc_line = f"{c.name} = np.empty({self.shape_tuple(c.shape)}, dtype={dtype_src(c.dtype)})"
        shape = s.dst.shape
        expr = s.expr
        reads_self = any(r.ref.container is c for r in iter_reads(expr))
        if self.needs_temp(s) or (allocate and reads_self):
            # the right side is evaluated in full before the destination is (re)allocated or written
            tmp = self.fresh("tmp")
            self.line(f"{tmp} = np.empty({self.shape_tuple(shape)}, dtype={dtype_src(c.dtype)})", ind)
            names, inner = self.nest(shape, ind)
            self.line(f"{tmp}[{', '.join(names)}] = {self.elem(expr, names, shape)}", inner)
            if allocate:
                self.line(alloc_line, ind)
            names, inner = self.nest(shape, ind)
            target = self.read(s.dst, names, shape)
            self.line(f"{target} {'+=' if s.accumulate else '='} {tmp}[{', '.join(names)}]", inner)
            return
        if allocate:
            self.line(alloc_line, ind)
        names, inner = self.nest(shape, ind)
        target = self.read(s.dst, names, shape)
        self.line(f"{target} {'+=' if s.accumulate else '='} {self.elem(expr, names, shape)}", inner)

    def needs_allocation(self, c):
        """Whether a whole write must allocate: only transients whose shape is known late."""
        return c.kind != "arg" and c.name not in self.allocated_at_start

    def shape_tuple(self, shape):
        return "(" + "".join(f"{x}, " for x in self.extents(shape)) + ")"

    def dynamic_whole(self, ref):
        """A whole container whose shape varies at run time: tapes record its actual extents."""
        return ref.is_whole() and ref.container.ndim and self.needs_allocation(ref.container)

    def push(self, s, ind):
        tape, top = s.tape.name, s.tape.name + "_top"
        shape = s.ref.shape
        if self.dynamic_whole(s.ref):
            c = s.ref.container
            self.line(f"if {top} + {c.name}.size + {c.ndim} > {tape}.shape[0]:", ind)
            self.line(f"{tape} = _rt.grow({tape}, {top} + {c.name}.size + {c.ndim})", ind + 1)
            self.line(f"{tape}[{top}:{top} + {c.name}.size] = np.ascontiguousarray({c.name}).ravel()", ind)
            self.line(f"{top} += {c.name}.size", ind)
            for d in range(c.ndim):
                self.line(f"{tape}[{top} + {d}] = {c.name}.shape[{d}]", ind)
            self.line(f"{top} += {c.ndim}", ind)
            return
        size = " * ".join(self.extents(shape)) or "1"
        self.line(f"if {top} + {size} > {tape}.shape[0]:", ind)
        self.line(f"{tape} = _rt.grow({tape}, {top} + {size})", ind + 1)
        if not shape:
            self.line(f"{tape}[{top}] = {self.read(s.ref, [], ())}", ind)
            self.line(f"{top} += 1", ind)
            return
        self.copy_tape(s.ref, tape, top, True, ind)

    def copy_tape(self, ref, tape, cursor, to_tape, ind):
        """Copy a view to (or from) ``tape`` at ``cursor`` in C order, advancing the cursor; whole
        rows at a time where the view's last axis is a plain slice."""
        shape = ref.shape
        rows = self.row_slices(ref)
        if rows is not None:
            names, inner = self.nest(shape[:-1], ind)
            width = self.src(shape[-1])
            view, buf = rows(names), f"{tape}[{cursor}:{cursor} + {width}]"
            step = width
        else:
            names, inner = self.nest(shape, ind)
            view, buf = self.read(ref, names, shape), f"{tape}[{cursor}]"
            step = "1"
        self.line(f"{buf} = {view}" if to_tape else f"{view} = {buf}", inner)
        self.line(f"{cursor} += {step}", inner)

    def row_slices(self, ref):
        """For a view whose last axis is a plain forward slice of its container: a function giving
        the source of one row (the outer view indices fixed) as a slice, so tapes copy whole rows."""
        if ref.perm is not None:
            return None
        view_items = [it for it in ref.items if not isinstance(it, Index)]
        if not view_items or not isinstance(view_items[-1], Slice) or any(isinstance(it, NewAxis)
                                                                          for it in view_items):
            return None
        last = view_items[-1]
        if const_value(last.step) is None or const_value(last.step) <= 0:
            return None
        pos = max(k for k, it in enumerate(ref.items) if it is last)
        if any(not isinstance(it, Index) for it in ref.items[pos + 1:]):
            return None

        def row(outer):
            shape = ref.shape
            idx = self.container_index(ref, list(outer) + ["0"], shape)
            start = self.src(last.start)
            step = const_value(last.step)
            # the entry for the last axis: replace it by the slice over that axis
            out = []
            for k, it in enumerate(ref.items):
                if it is last:
                    stop = f"{start} + {self.src(last.size)}" + (f" * {step}" if step != 1 else "")
                    out.append(f"{start}:{stop}" + (f":{step}" if step != 1 else ""))
                else:
                    out.append(idx[k])
            return f"{ref.container.name}[{', '.join(out)}]"
        return row

    def pop(self, s, ind):
        tape, top = s.tape.name, s.tape.name + "_top"
        shape = s.ref.shape
        if self.dynamic_whole(s.ref):
            c = s.ref.container
            dims = [self.fresh("d") for _ in range(c.ndim)]
            self.line(f"{top} -= {c.ndim}", ind)
            for d, n in enumerate(dims):
                self.line(f"{n} = int({tape}[{top} + {d}])", ind)
            self.line(f"{top} -= {' * '.join(dims)}", ind)
            self.line(f"{c.name} = {tape}[{top}:{top} + {' * '.join(dims)}].copy().reshape(({', '.join(dims)},))",
                      ind)
            return
        if not shape:
            self.line(f"{top} -= 1", ind)
            self.line(f"{self.read(s.ref, [], ())} = {tape}[{top}]", ind)
            return
        size = " * ".join(self.extents(shape))
        start = self.fresh("p")
        self.line(f"{top} -= {size}", ind)
        self.line(f"{start} = {top}", ind)
        self.copy_tape(s.ref, tape, start, False, ind)


# ---------------------------------------------------------------- Call lowerings


def _out(low, s, ind):
    """Allocate a Call's (whole) output container."""
    c = s.outputs[0]
    if c.ndim and low.needs_allocation(c):
        low.line(f"{c.name} = np.empty({low.shape_tuple(c.shape)}, dtype={dtype_src(c.dtype)})", ind)
    return c


def _reduce_axes(call, ndim):
    axes = call.attrs.get("axis")
    if axes is None:
        return tuple(range(ndim))
    return axes if isinstance(axes, tuple) else (axes,)


_INIT = {"sum": "0", "prod": "1", "max": "-np.inf", "min": "np.inf"}
_COMBINE = {"sum": "{a} + {b}", "prod": "{a} * {b}", "max": "max({a}, {b})", "min": "min({a}, {b})"}


def _lower_reduction(low, s, ind):
    x = s.inputs[0]
    c = _out(low, s, ind)
    red = _reduce_axes(s, len(x.shape))
    keep = s.attrs.get("keepdims", False)
    init = _INIT[s.op]
    if c.dtype.kind in "iub" and s.op in ("max", "min"):
        init = "-(1 << 62)" if s.op == "max" else "(1 << 62)"
    if c.ndim == 0:
        acc = low.fresh("acc")
        low.line(f"{acc} = {init}", ind)
        names, inner = low.nest(x.shape, ind)
        low.line(f"{acc} = {_COMBINE[s.op].format(a=acc, b=low.elem(x, names, x.shape))}", inner)
        low.line(f"{c.name} = {_scalar_type(c.dtype)}({acc})", ind)
        return
    names, inner = low.nest(c.shape, ind, "o")
    low.line(f"{c.name}[{', '.join(names)}] = {init}", inner)
    names, inner = low.nest(x.shape, ind)
    out_idx = []
    kept = iter(range(c.ndim))
    for k, n in enumerate(names):
        if k in red:
            if keep:
                out_idx.append("0")
                next(kept)
        else:
            out_idx.append(n)
            next(kept)
    target = f"{c.name}[{', '.join(out_idx)}]"
    low.line(f"{target} = {_COMBINE[s.op].format(a=target, b=low.elem(x, names, x.shape))}", inner)


def _lower_argext(low, s, ind):
    x = s.inputs[0]
    c = _out(low, s, ind)
    if s.attrs.get("axis") is not None or c.ndim:
        raise FlowgradError(f"{s.loc}: the native backend supports {s.op} over the whole array only")
    best, arg, pos = low.fresh("best"), low.fresh("arg"), low.fresh("pos")
    low.line(f"{best} = {'-np.inf' if s.op == 'argmax' else 'np.inf'}", ind)
    low.line(f"{arg} = 0", ind)
    low.line(f"{pos} = 0", ind)
    names, inner = low.nest(x.shape, ind)
    v = low.fresh("v")
    low.line(f"{v} = {low.elem(x, names, x.shape)}", inner)
    low.line(f"if {v} {'>' if s.op == 'argmax' else '<'} {best}:", inner)
    low.line(f"{best} = {v}", inner + 1)
    low.line(f"{arg} = {pos}", inner + 1)
    low.line(f"{pos} += 1", inner)
    low.line(f"{c.name} = {arg}", ind)


def _operand_array(low, e, ind):
    """An array expression for a BLAS operand (a contiguous view or a materialised temporary)."""
    if isinstance(e, Read):
        return f"np.ascontiguousarray({low.view_src(e.ref)})" if not e.ref.is_whole() else low.view_src(e.ref)
    tmp = low.fresh("opnd")
    low.line(f"{tmp} = np.empty({low.shape_tuple(e.shape)}, dtype=np.float64)", ind)
    names, inner = low.nest(e.shape, ind)
    low.line(f"{tmp}[{', '.join(names)}] = {low.elem(e, names, e.shape)}", inner)
    return tmp


def _lower_matmul_tn_flat(low, s, ind):
    a, g = s.inputs
    c = s.outputs[0]
    sa, sg = _operand_array(low, a, ind), _operand_array(low, g, ind)
    low.line(f"{c.name} = np.dot(np.ascontiguousarray({sa}).reshape(-1, {low.src(a.shape[-1])}).T, "
             f"np.ascontiguousarray({sg}).reshape(-1, {low.src(g.shape[-1])}))", ind)


def _lower_matmul(low, s, ind):
    a, b = s.inputs
    c = s.outputs[0]
    sa, sb = _operand_array(low, a, ind), _operand_array(low, b, ind)
    if len(a.shape) > 2 and len(b.shape) == 2:
        # (..., n, k) @ (k, m): one GEMM over the flattened leading axes
        low.line(f"{c.name} = np.dot(np.ascontiguousarray({sa}).reshape(-1, {low.src(a.shape[-1])}), "
                 f"np.ascontiguousarray({sb})).reshape({low.shape_tuple(c.shape)})", ind)
        return
    if len(a.shape) <= 2 and len(b.shape) <= 2:
        if c.ndim == 0:
            low.line(f"{c.name} = np.float64(np.dot({sa}, {sb}))", ind)
        else:
            low.line(f"{c.name} = np.dot({sa}, {sb})", ind)
        return
    _out(low, s, ind)
    batch = c.shape[:-2] if len(a.shape) > 1 and len(b.shape) > 1 else c.shape[:-1]
    names, inner = low.nest(batch, ind, "b")

    def pick(src, e):
        nb = len(e.shape) - (2 if len(e.shape) > 1 else 1)
        if nb <= 0:
            return src
        lead = names[len(names) - nb:]
        idx = [("0" if const_value(e.shape[k]) == 1 and const_value(batch[len(batch) - nb + k]) != 1 else n)
               for k, n in enumerate(lead)]
        return f"{src}[{', '.join(idx)}]"
    low.line(f"{c.name}[{', '.join(names)}] = np.dot(np.ascontiguousarray({pick(sa, a)}), "
             f"np.ascontiguousarray({pick(sb, b)}))", inner)


def _lower_solve(low, s, ind):
    a, b = s.inputs
    c = s.outputs[0]
    low.line(f"{c.name} = np.linalg.solve({_operand_array(low, a, ind)}, {_operand_array(low, b, ind)})", ind)


def _lower_reshape(low, s, ind):
    x = s.inputs[0]
    c = s.outputs[0]
    low.line(f"{c.name} = np.ascontiguousarray({_operand_array(low, x, ind)}).reshape("
             f"{low.shape_tuple(c.shape)}).copy()", ind)


def _lower_cumsum(low, s, ind):
    x = s.inputs[0]
    c = _out(low, s, ind)
    axis = s.attrs["axis"]
    names, inner = low.nest(x.shape, ind)
    prev = list(names)
    prev[axis] = f"{names[axis]} - 1"
    low.line(f"if {names[axis]} == 0:", inner)
    low.line(f"{c.name}[{', '.join(names)}] = {low.elem(x, names, x.shape)}", inner + 1)
    low.line("else:", inner)
    low.line(f"{c.name}[{', '.join(names)}] = {c.name}[{', '.join(prev)}] + {low.elem(x, names, x.shape)}",
             inner + 1)


def _lower_tri(low, s, ind):
    x = s.inputs[0]
    c = _out(low, s, ind)
    names, inner = low.nest(x.shape, ind)
    i, j = names[-2], names[-1]
    keep = f"{j} - {i} >= {s.attrs['k']}" if s.op == "triu" else f"{j} - {i} <= {s.attrs['k']}"
    low.line(f"{c.name}[{', '.join(names)}] = {low.elem(x, names, x.shape)} if {keep} else 0.0", inner)


def _einsum_loops(low, subscripts, operands, out_expr_fn, ind, k_target=None):
    """A loop nest over every einsum letter; ``out_expr_fn(letter_index)`` gives the statement."""
    ins, out = subscripts.split("->")
    terms = ins.split(",")
    dims = {}
    for t, o in zip(terms, operands):
        for ch, d in zip(t, o.shape):
            if ch not in dims or const_value(dims[ch]) == 1:
                dims[ch] = d
    letters = list(dict.fromkeys("".join(terms) + out))
    name = {}
    for ch in letters:
        n = low.fresh("e" + ch)
        low.line(f"for {n} in range({low.src(dims[ch])}):", ind)
        name[ch] = n
        ind += 1
    out_expr_fn(name, terms, out, ind)


def _lower_einsum(low, s, ind):
    c = _out(low, s, ind)
    spec = s.attrs["subscripts"]
    if c.ndim:
        names, inner = low.nest(c.shape, ind, "z")
        low.line(f"{c.name}[{', '.join(names)}] = 0", inner)
    else:
        low.line(f"{c.name} = 0.0", ind)
    ops = list(s.inputs)

    def body(name, terms, out, inner):
        prod = " * ".join(_operand_elem(low, o, t, name) for o, t in zip(ops, terms))
        target = f"{c.name}[{', '.join(name[ch] for ch in out)}]" if c.ndim else c.name
        low.line(f"{target} += {prod}", inner)
    _einsum_loops(low, spec, ops, body, ind)


def _operand_elem(low, o, term, name):
    idx = [name[ch] for ch in term]
    return low.elem(o, idx, o.shape)


def _lower_einsum_vjp(low, s, ind):
    c = _out(low, s, ind)
    spec, k = s.attrs["subscripts"], s.attrs["k"]
    g, ops = s.inputs[0], list(s.inputs[1:])
    names, inner = low.nest(c.shape, ind, "z")
    low.line(f"{c.name}[{', '.join(names)}] = 0", inner)
    ins, out = spec.split("->")
    terms = ins.split(",")
    full = ",".join(terms + [out]) + "->" + out

    def body(name, _terms, _out, inner):
        factors = [_operand_elem(low, g, out, name)] if out else [low.src(g)]
        factors += [_operand_elem(low, o, t, name) for j, (o, t) in enumerate(zip(ops, terms)) if j != k]
        target = f"{c.name}[{', '.join(name[ch] for ch in terms[k])}]"
        low.line(f"{target} += {' * '.join(factors)}", inner)
    _einsum_loops(low, full, ops + [g], body, ind)


def _lower_eye(low, s, ind):
    c = _out(low, s, ind)
    names, inner = low.nest(c.shape, ind)
    low.line(f"{c.name}[{names[0]}, {names[1]}] = 1.0 if {names[1]} - {names[0]} == {s.attrs['k']} else 0.0",
             inner)


def _lower_arange(low, s, ind):
    c = _out(low, s, ind)
    start, _, step = (low.src(e) for e in s.inputs)
    names, inner = low.nest(c.shape, ind)
    low.line(f"{c.name}[{names[0]}] = {start} + {names[0]} * {step}", inner)


def _advanced(low, s, src_shape, arrays, ind):
    """Loops over an advanced index's result; returns (result index names, source index sources, indent)."""
    spec = s.attrs["spec"]
    adv_shapes = [a.shape for a in arrays]
    from ..ir.core import broadcast_shapes
    bshape = broadcast_shapes(*adv_shapes) if adv_shapes else ()
    adv_pos = [k for k, it in enumerate(spec) if it[0] in ("array", "int")]
    adjacent = adv_pos == list(range(adv_pos[0], adv_pos[0] + len(adv_pos))) if adv_pos else True
    basic = [k for k, it in enumerate(spec) if it[0] == "slice"]
    # result layout: the broadcast advanced block sits at the first advanced position when adjacent
    layout = []
    if adjacent:
        layout = [("basic", k) for k in basic if k < adv_pos[0]] + [("adv", j) for j in range(len(bshape))] + \
                 [("basic", k) for k in basic if k > adv_pos[-1]]
    else:
        layout = [("adv", j) for j in range(len(bshape))] + [("basic", k) for k in basic]
    extents = []
    slices = {}
    for kind, k in layout:
        if kind == "adv":
            extents.append(bshape[k])
        else:
            _, start, stop, step = spec[k]
            sl = low.fresh("sl")
            low.line(f"{sl} = _rt.slice_indices({_opt(low, start)}, {_opt(low, stop)}, {_opt(low, step)}, "
                     f"{low.src(src_shape[k])})", ind)
            slices[k] = sl
            extents.append(_Raw(f"{sl}[3]"))
    names = []
    for ext in extents:
        n = low.fresh("r")
        low.line(f"for {n} in range({ext.text if isinstance(ext, _Raw) else low.src(ext)}):", ind)
        names.append(n)
        ind += 1
    adv_names = [n for (kind, _), n in zip(layout, names) if kind == "adv"]
    basic_name = {k: n for (kind, k), n in zip(layout, names) if kind == "basic"}
    src_idx, arr_iter = [], iter(arrays)
    for k, it in enumerate(spec):
        if it[0] == "array":
            arr = next(arr_iter)
            src_idx.append(f"_rt.wrap({low.elem(arr, adv_names, bshape)}, {low.src(src_shape[k])})")
        elif it[0] == "int":
            src_idx.append(low.src(it[1]))
        else:
            sl = slices[k]
            src_idx.append(f"{sl}[0] + {basic_name[k]} * {sl}[2]")
    return names, src_idx, ind


class _Raw:
    def __init__(self, text):
        self.text = text


def _opt(low, e):
    return "None" if e is None else low.src(e)


def _lower_gather(low, s, ind):
    x, *arrays = s.inputs
    c = _out(low, s, ind)
    names, src_idx, inner = _advanced(low, s, x.shape, arrays, ind)
    target = f"{c.name}[{', '.join(names)}]" if c.ndim else c.name
    low.line(f"{target} = {x.ref.container.name}[{', '.join(src_idx)}]", inner)


def _lower_scatter(low, s, ind, accumulate=False):
    v, *arrays = s.inputs
    y = s.outputs[0]
    names, src_idx, inner = _advanced(low, s, y.shape, arrays, ind)
    shape = s.attrs["value_shape"]
    value = low.elem(v, names, shape)
    low.line(f"{y.name}[{', '.join(src_idx)}] {'+=' if accumulate else '='} {value}", inner)


def _lower_add_at(low, s, ind):
    _lower_scatter(low, s, ind, accumulate=True)


def _lower_gather_last(low, s, ind):
    g, *arrays = s.inputs
    c = _out(low, s, ind)
    y_shape = g.shape
    probe = low.fresh("probe")
    count = low.fresh("n")
    low.line(f"{probe} = np.full({low.shape_tuple(y_shape)}, -1, dtype=np.int64)", ind)
    low.line(f"{count} = 0", ind)
    names, src_idx, inner = _advanced(low, s, y_shape, arrays, ind)
    low.line(f"{probe}[{', '.join(src_idx)}] = {count}", inner)
    low.line(f"{count} += 1", inner)
    low.line(f"{count} = 0", ind)
    names, src_idx, inner = _advanced(low, s, y_shape, arrays, ind)
    target = f"{c.name}[{', '.join(names)}]" if c.ndim else c.name
    low.line(f"{target} = {g.ref.container.name}[{', '.join(src_idx)}] if {probe}[{', '.join(src_idx)}] == "
             f"{count} else 0.0", inner)
    low.line(f"{count} += 1", inner)


def _lower_mask(kind):
    def lower(low, s, ind):
        if kind == "gather":
            x, m = s.inputs
            c = _out(low, s, ind)
            shape = x.shape
        else:
            v, m = s.inputs
            y = s.outputs[0]
            shape = y.shape
        k = low.fresh("k")
        low.line(f"{k} = 0", ind)
        names, inner = low.nest(shape, ind)
        low.line(f"if {low.elem(m, names, shape)}:", inner)
        if kind == "gather":
            low.line(f"{c.name}[{k}] = {low.elem(x, names, shape)}", inner + 1)
        else:
            value = low.src(v) if v.shape == () else low.elem(v, [k], v.shape)
            op = "+=" if kind == "add" else "="
            low.line(f"{y.name}[{', '.join(names)}] {op} {value}", inner + 1)
        low.line(f"{k} += 1", inner + 1)
    return lower


def _lower_sum_to(low, s, ind):
    """Sum the input, broadcast over the ``full`` iteration space, down to the output's shape."""
    x = s.inputs[0]
    c = s.outputs[0]
    full = s.attrs["full"]
    if c.ndim == 0:
        acc = low.fresh("acc")
        low.line(f"{acc} = 0.0", ind)
        names, inner = low.nest(full, ind)
        low.line(f"{acc} += {low.elem(x, names, full)}", inner)
        low.line(f"{c.name} = {acc}", ind)
        return
    _out(low, s, ind)
    names, inner = low.nest(c.shape, ind, "z")
    low.line(f"{c.name}[{', '.join(names)}] = 0.0", inner)
    names, inner = low.nest(full, ind)
    lead = len(full) - c.ndim
    out_idx = []
    for k in range(c.ndim):
        n = names[lead + k]
        out_idx.append("0" if const_value(c.shape[k]) == 1 and const_value(full[lead + k]) != 1 else n)
    low.line(f"{c.name}[{', '.join(out_idx)}] += {low.elem(x, names, full)}", inner)


def _lower_trip_count(low, s, ind):
    start, stop, step = (low.src(e) for e in s.inputs)
    low.line(f"{s.outputs[0].name} = _rt.trip_count({start}, {stop}, {step})", ind)


def _lower_ckpt_slots(low, s, ind):
    kind, trips, param = (low.src(e) for e in s.inputs)
    low.line(f"{s.outputs[0].name} = _rt.ckpt_slots({kind}, {trips}, {param})", ind)


def _lower_ckpt_schedule(low, s, ind):
    """The schedule is built in Python (object mode), once per execution of the loop's backward."""
    kind, trips, param = (low.src(e) for e in s.inputs)
    sched, rows = s.outputs
    low.line(f"with numba.objmode({sched.name}='int64[:, :]'):", ind)
    low.line(f"{sched.name} = _ckpt.schedule({kind}, {trips}, {param})", ind + 1)
    low.line(f"{rows.name} = {sched.name}.shape[0]", ind)


CALL_LOWERING = {
    "trip_count": _lower_trip_count, "ckpt_slots": _lower_ckpt_slots, "ckpt_schedule": _lower_ckpt_schedule,
    "sum": _lower_reduction, "prod": _lower_reduction, "max": _lower_reduction, "min": _lower_reduction,
    "argmax": _lower_argext, "argmin": _lower_argext, "matmul": _lower_matmul, "solve": _lower_solve,
    "matmul_tn_flat": _lower_matmul_tn_flat,
    "reshape": _lower_reshape, "cumsum": _lower_cumsum, "triu": _lower_tri, "tril": _lower_tri,
    "einsum": _lower_einsum, "einsum_vjp": _lower_einsum_vjp, "eye": _lower_eye, "arange": _lower_arange,
    "gather": _lower_gather, "gather_last": _lower_gather_last, "add_at": _lower_add_at,
    "scatter": _lower_scatter, "mask_gather": _lower_mask("gather"), "mask_scatter": _lower_mask("scatter"),
    "mask_add": _lower_mask("add"), "sum_to": _lower_sum_to,
}


# ---------------------------------------------------------------- whole functions


HEADER = ("import numpy as np\nimport numba\nfrom flowgrad.backends import native_runtime as _rt\n"
          "from flowgrad.checkpoint import schedules as _ckpt\n\n"
          "_jit = numba.njit(cache=True, error_model='numpy')\n\n")


def _static_shape(c, params):
    """Whether a container's shape can be evaluated at function entry."""
    param_set = set(params)
    for d in c.shape:
        for r in iter_reads(d):
            if r.ref.container not in param_set:
                return False
    return True


def _written(stmts):
    from ..ir.core import stmt_writes, walk
    return {w.container for s in walk(stmts) for w in stmt_writes(s)}


def _prologue(low, prog, containers, tapes, ind, written):
    params = prog.params + list(prog.inputs)
    for p in prog.params:
        if p.ndim and p in written:        # the caller's arrays are never modified
            low.line(f"{p.name} = {p.name}.copy()", ind)
    for c in sorted(containers, key=lambda c: c.name):
        if c.kind == "arg" or c in tapes:
            continue
        if c.ndim == 0:
            low.line(f"{c.name} = {_scalar_type(c.dtype)}(0)", ind)
        elif _static_shape(c, params):
            low.line(f"{c.name} = np.empty({low.shape_tuple(c.shape)}, dtype={dtype_src(c.dtype)})", ind)
            low.allocated_at_start.add(c.name)
        else:
            low.line(f"{c.name} = np.empty({(0,) * c.ndim!r}, dtype={dtype_src(c.dtype)})", ind)
    for t in tapes:
        low.line(f"{t.name} = np.empty(1024, dtype={dtype_src(t.dtype)})", ind)
        low.line(f"{t.name}_top = 0", ind)


def emit_forward(prog) -> str:
    low = Lowering(prog.containers)
    names = ", ".join(p.name for p in prog.params)
    low.line("@_jit", 0)
    low.line(f"def {prog.name}({names}):", 0)
    _prologue(low, prog, [c for c in prog.containers.values()], [], 1, _written(prog.body))
    low.block(prog.body, 1)
    low.line(f"return {prog.results[0].name}", 1)
    return HEADER + "\n".join(low.lines) + "\n"


def emit_grad(prog, gp, wrt) -> str:
    """``<name>_grad(*params, cotangent) -> (result, (grads...))``: forward and backward in one function."""
    low = Lowering(gp.containers)
    names = ", ".join([p.name for p in prog.params] + [gp.cotangent.name])
    low.line("@_jit", 0)
    low.line(f"def {prog.name}_grad({names}):", 0)
    tapes = list(gp.tapes.values())
    containers = [c for c in gp.containers.values() if c is not gp.cotangent]
    _prologue(low, prog, containers, tapes, 1, _written(gp.forward + gp.backward))
    low.block(gp.forward, 1)
    low.block(gp.backward, 1)
    outs = []
    for w in wrt:
        g = gp.grads.get(w)
        if g is None:
            outs.append(f"np.zeros({low.shape_tuple(w.shape)}, dtype={dtype_src(w.dtype)})" if w.ndim
                        else "0.0")
        elif g.ndim == 0:
            outs.append(f"np.full((1,), {g.name})")
        else:
            outs.append(g.name)
    wrapped = [o if w.ndim else (o if o.startswith("np.full") else f"np.full((1,), {o})")
               for o, w in zip(outs, wrt)]
    low.line(f"return {prog.results[0].name}, ({''.join(o + ', ' for o in wrapped)})", 1)
    return HEADER + "\n".join(low.lines) + "\n"


def cache_dir() -> str:
    base = os.environ.get("FLOWGRAD_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "flowgrad")
    os.makedirs(base, exist_ok=True)
    return base


def compile_source(src: str, name: str):
    """Write generated source to the cache (atomically, named by its hash) and import ``name`` from it."""
    import numba
    from .. import __version__
    key = hashlib.sha256(f"{src}\0{__version__}\0{np.__version__}\0{numba.__version__}".encode()).hexdigest()[:24]
    modname = f"flowgrad_gen_{key}"
    path = os.path.join(cache_dir(), modname + ".py")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            f.write(src)
        os.replace(tmp, path)
    if modname in sys.modules:
        return getattr(sys.modules[modname], name)
    spec = importlib.util.spec_from_file_location(modname, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[modname] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def available() -> bool:
    return importlib.util.find_spec("numba") is not None
