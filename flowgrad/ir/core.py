"""The data-centric IR: containers, references (memlets), expressions and statements.

Every statement names exactly which part of which container it reads and writes.
Integer expressions (indices, bounds, shapes) use the same expression nodes as data.
"""
from __future__ import annotations

import copy

import numpy as np

from .dtypes import ComplexOperandError, complex_dtype, is_inexact, real_dtype, refuse_complex  # noqa: F401

F64 = np.dtype(np.float64)
I64 = np.dtype(np.int64)
BOOL = np.dtype(np.bool_)
C128 = np.dtype(np.complex128)


def is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f"


# ---------------------------------------------------------------- containers


class Container:
    """A named array or scalar. kind: 'arg' (parameter), 'transient' or 'tape'. ``weak``: a
    scalar holding a Python int or float, weak in promotion as NEP 50 makes Python scalars
    (``x32 * s`` stays float32)."""

    __slots__ = ("name", "dtype", "shape", "kind", "weak")

    def __init__(self, name: str, dtype, shape: tuple, kind: str = "transient", weak=False):
        self.name = name
        self.dtype = np.dtype(dtype)
        self.shape = tuple(as_expr(d) for d in shape)
        self.kind = kind
        self.weak = weak and not self.shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __repr__(self):
        return f"Container({self.name})"


# ---------------------------------------------------------------- subsets


class Index:
    """One position along a dimension (the dimension disappears)."""

    __slots__ = ("at",)

    def __init__(self, at):
        self.at = as_expr(at)


class Slice:
    """``size`` positions start, start+step, ... along a dimension."""

    __slots__ = ("start", "size", "step")

    def __init__(self, start, size, step=1):
        self.start = as_expr(start)
        self.size = as_expr(size)
        self.step = as_expr(step)


class NewAxis:
    """A length-1 axis inserted into the view."""

    __slots__ = ()


class Ref:
    """A memlet: a container and a subset, optionally with its axes permuted.

    ``items`` has one Index or Slice per container dimension (in order), with
    NewAxis entries interleaved; ``perm`` permutes the resulting view's axes.
    """

    __slots__ = ("container", "items", "perm")

    def __init__(self, container: Container, items=None, perm=None):
        self.container = container
        if items is None:
            items = tuple(Slice(0, d, 1) for d in container.shape)
        self.items = tuple(items)
        perm = tuple(perm) if perm is not None else None
        self.perm = None if perm == tuple(range(len(perm or ()))) else perm

    @property
    def shape(self) -> tuple:
        dims = []
        for it in self.items:
            if isinstance(it, Slice):
                dims.append(it.size)
            elif isinstance(it, NewAxis):
                dims.append(Const(1))
        if self.perm is not None:
            dims = [dims[p] for p in self.perm]
        return tuple(dims)

    @property
    def dtype(self):
        return self.container.dtype

    def is_whole(self) -> bool:
        """True when the reference covers its container exactly, in order."""
        if self.perm is not None or len(self.items) != self.container.ndim:
            return False
        for it, d in zip(self.items, self.container.shape):
            if not (isinstance(it, Slice) and const_value(it.start) == 0 and const_value(it.step) == 1
                    and same_expr(it.size, d)):
                return False
        return True

    def index_exprs(self):
        """The integer expressions this reference's position depends on."""
        for it in self.items:
            if isinstance(it, Index):
                yield it.at
            elif isinstance(it, Slice):
                yield it.start
                yield it.size
                yield it.step

    def with_container(self, container: Container) -> "Ref":
        return Ref(container, self.items, self.perm)


# ---------------------------------------------------------------- expressions


class Expr:
    """Base of expression nodes. Operators build elementwise ``Op`` nodes."""

    __slots__ = ()

    def __add__(self, o):
        return op("add", self, o)

    def __radd__(self, o):
        return op("add", o, self)

    def __sub__(self, o):
        return op("subtract", self, o)

    def __rsub__(self, o):
        return op("subtract", o, self)

    def __mul__(self, o):
        return op("multiply", self, o)

    def __rmul__(self, o):
        return op("multiply", o, self)

    def __truediv__(self, o):
        return op("divide", self, o)

    def __rtruediv__(self, o):
        return op("divide", o, self)

    def __pow__(self, o):
        return op("power", self, o)

    def __neg__(self):
        return op("negative", self)


class Const(Expr):
    """A scalar constant. ``weak``: a Python literal, which takes its partner's dtype (NEP 50)."""

    __slots__ = ("value", "dtype", "weak")

    def __init__(self, value, dtype=None, weak=None):
        if dtype is None:
            if isinstance(value, np.generic):      # a NumPy scalar keeps its dtype (np.float32(2.0))
                dtype = value.dtype
            elif isinstance(value, (bool, np.bool_)):
                dtype = BOOL
            elif isinstance(value, (int, np.integer)):
                dtype = I64
            elif isinstance(value, complex):
                dtype = C128
            else:
                dtype = F64
        self.dtype = np.dtype(dtype)
        self.value = self.dtype.type(value).item()
        self.weak = (not isinstance(value, np.generic)) if weak is None else weak

    shape = ()


class Read(Expr):
    """The current values of a Ref."""

    __slots__ = ("ref",)

    def __init__(self, ref: Ref):
        self.ref = ref

    @property
    def shape(self):
        return self.ref.shape

    @property
    def dtype(self):
        return self.ref.container.dtype


class Op(Expr):
    """An elementwise primitive (see ``ELEMENTWISE``) over broadcast operands."""

    __slots__ = ("name", "args", "dtype", "shape")

    def __init__(self, name, args, dtype, shape):
        self.name = name
        self.args = tuple(args)
        self.dtype = np.dtype(dtype)
        self.shape = shape

    @property
    def weak(self):
        """Python's arithmetic on Python scalars gives a Python scalar (see ``is_weak``)."""
        args = self.args[1:] if self.name == "where" else self.args      # not the test
        return not self.shape and self.name in _WEAK_OPS and all(is_weak(a) for a in args)


class Take(Expr):
    """Elements of a whole container at positions read from integer arrays (NumPy's ``x[i, j]``
    with index arrays ``i``, ``j`` broadcast to one shape): element ``p`` is
    ``source[index[0][p], index[1][p], ...]``, a negative position counting from the end.

    Made only by ``passes.take`` just before native lowering, from a gather whose one consumer
    reads it element by element; the autodiff and the other passes never see it.
    """

    __slots__ = ("source", "index", "dtype", "shape")

    def __init__(self, source: Ref, index):
        self.source = source
        self.index = tuple(index)
        self.dtype = source.container.dtype
        self.shape = broadcast_shapes(*[i.shape for i in self.index])


def is_cheap(e) -> bool:
    """Whether ``e`` uses only ``CHEAP_OPS``."""
    return not isinstance(e, Op) or (e.name in CHEAP_OPS and all(is_cheap(a) for a in e.args))


CASTS = {"float64": np.float64, "float32": np.float32, "int64": np.int64, "int32": np.int32, "bool": np.bool_,
         "complex128": np.complex128, "complex64": np.complex64}

def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, (bool, int, float, complex, np.generic)):
        return Const(x)
    raise TypeError(f"cannot make an IR expression of {x!r}")


def const_value(e):
    """The Python value of a constant expression, else None."""
    return e.value if isinstance(e, Const) else None


def is_weak(e):
    """Whether ``e`` is a Python scalar in NumPy's promotion (NEP 50): a Python literal, a scalar
    holding a Python int or float argument, or Python arithmetic on such values."""
    if isinstance(e, Read):
        return e.ref.container.weak and not e.shape
    return isinstance(e, (Const, Op)) and e.weak


def result_dtype(args, kind):
    """NumPy 2 promotion with Python scalars weak (NEP 50, ``is_weak``)."""
    strong = [a.dtype for a in args if not is_weak(a)]
    weak = [a.dtype for a in args if is_weak(a)]
    if strong:
        dt = np.result_type(*strong)
        for w in weak:
            if w.kind == "c" and dt.kind != "c":
                dt = complex_dtype(dt)           # float32 * 1j is complex64, an integer's complex128
            elif w.kind == "f" and dt.kind in "biu":
                dt = F64
            elif w.kind in "iu" and dt.kind == "b":
                dt = I64
    else:
        dt = np.result_type(*weak)
    if kind in ("float", "real_float") and dt.kind in "biu":
        dt = F64
    if kind in ("real", "real_float"):
        dt = real_dtype(dt)
    return np.dtype(dt)


def broadcast_shapes(*shapes):
    """Broadcast symbolic shapes; dims that are not provably 1 or equal are taken as equal."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(ndim):
        dim = None
        for s in shapes:
            k = axis - (ndim - len(s))
            if k < 0:
                continue
            d = s[k]
            if dim is None or const_value(dim) == 1:
                dim = d
            elif const_value(d) == 1 or same_expr(d, dim):
                continue
            elif isinstance(d, Const) and isinstance(dim, Const):
                raise ValueError(f"shapes {fmt_shape(shapes[0])} and {fmt_shape(s)} do not broadcast")
            elif isinstance(d, Const):
                dim = d
        out.append(dim)
    return tuple(out)


def fmt_shape(shape):
    from .printer import expr_text
    return "(" + ", ".join(expr_text(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"


_FOLD = {
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "floor_divide": lambda a, b: a // b if b else None, "mod": lambda a, b: a % b if b else None,
    "maximum": max, "minimum": min, "negative": lambda a: -a,
    "less": lambda a, b: a < b, "less_equal": lambda a, b: a <= b, "greater": lambda a, b: a > b,
    "greater_equal": lambda a, b: a >= b, "equal": lambda a, b: a == b, "not_equal": lambda a, b: a != b,
    "logical_and": lambda a, b: bool(a and b), "logical_or": lambda a, b: bool(a or b),
    "logical_not": lambda a: not a,
}


def op(name, *args, dtype=None) -> Expr:
    """Build an elementwise node, folding integer constants and trivial identities."""
    args = tuple(as_expr(a) for a in args)
    if name in ("add", "multiply") and len(args) == 2 and all(a.dtype == BOOL for a in args):
        name = "logical_or" if name == "add" else "logical_and"      # NumPy's bool + bool, bool * bool
    arity, kind = ELEMENTWISE[name]
    if len(args) != arity:
        raise TypeError(f"{name} takes {arity} operands")
    refuse_complex(name, args[1:] if name == "where" else args)
    if kind == "cast":
        dt = np.dtype(CASTS[name])
    elif kind == "bool":
        dt = BOOL
    elif kind == "where":
        dt = result_dtype(args[1:], "same")
    else:
        dt = result_dtype(args, kind)
    folded = _fold(name, args, dt)
    # an operation on arrays makes a new array: folded to a bare read (x + 0, maximum(x, x),
    # a cast to x's own dtype) it would alias x where it is bound to a name
    if folded is not None and not (isinstance(folded, Read) and folded.shape):
        return folded
    return Op(name, args, dt, broadcast_shapes(*(a.shape for a in args)))


def _fold(name, args, dt):
    vals = [const_value(a) for a in args]
    if all(v is not None for v in vals) and dt.kind in "biu" and name in _FOLD:
        r = _FOLD[name](*vals)
        if r is not None:
            return Const(r, dt, weak=all(a.weak for a in args))
    if len(args) == 2 and dt.kind in "iu":
        a, b = args
        shape = broadcast_shapes(a.shape, b.shape)

        def same(x):               # an operand that is the result as it is (bool * 1 is not: int64)
            return x.dtype == dt and len(x.shape) == len(shape)
        if name in ("add", "subtract") and (vals[1] is not None or (name == "add" and vals[0] is not None)):
            x, c = (a, vals[1]) if vals[1] is not None else (b, vals[0])
            base, k = split_offset(x)
            if k and same(base):     # (i + 2) - 1 -> i + 1: equal extents compare equal
                k += c if name == "add" else -c
                if k == 0:
                    return base
                return Op("add" if k > 0 else "subtract", (base, Const(abs(k), dt, weak=True)), dt, base.shape)
        if name == "add":
            if vals[0] == 0 and same(b):
                return b
            if vals[1] == 0 and same(a):
                return a
        if name == "subtract" and vals[1] == 0 and same(a):
            return a
        if name == "subtract" and not shape:
            d = difference(a, b)          # (i + 32) - i -> 32: a window's extent is a constant
            if d is not None:
                return Const(d, dt, weak=False)
        if name == "multiply":
            if vals[0] == 1 and same(b):
                return b
            if vals[1] == 1 and same(a):
                return a
            if 0 in vals and not shape:
                return Const(0)
        if name == "floor_divide" and vals[1] == 1 and same(a):
            return a
    if name in ("maximum", "minimum") and len(args) == 2:
        # maximum(a, maximum(a, b)) -> maximum(a, b): sizes clipped twice compare equal
        for x, y in (args, args[::-1]):
            if isinstance(y, Op) and y.name == name and y.dtype == dt and \
                    any(same_expr(x, z) for z in y.args):
                return y
        if same_expr(args[0], args[1]) and args[0].dtype == dt:
            return args[0]
    if name in CASTS and args[0].dtype == dt:
        return args[0]
    return None


def split_offset(e):
    """``(base, k)`` with integer expression ``e`` equal to ``base + k`` for a constant ``k``."""
    if isinstance(e, Op) and e.name in ("add", "subtract") and e.dtype.kind in "iu":
        k = const_value(e.args[1])
        if k is not None:
            return e.args[0], (k if e.name == "add" else -k)
        if e.name == "add" and const_value(e.args[0]) is not None:
            return e.args[1], const_value(e.args[0])
    return e, 0


def difference(a, b):
    """The constant ``a - b`` of two integer expressions when it is one, else None."""
    va, vb = const_value(a), const_value(b)
    if va is not None and vb is not None:
        return va - vb
    (x, ka), (y, kb) = split_offset(a), split_offset(b)
    return ka - kb if same_expr(x, y) else None


DISJOINT = "disjoint"


def view_offsets(a: Ref, b: Ref):
    """How view ``b`` of a container lies against view ``a`` of it: ``DISJOINT`` when they fix
    one index to different values (no shared element), a dict ``{item position: b's start -
    a's start}`` over their slices when ``b`` is ``a`` shifted by constants (same kinds of item,
    steps and extents), else None."""
    if a.perm is not None or b.perm is not None or len(a.items) != len(b.items):
        return None
    out = {}
    for pos, (x, y) in enumerate(zip(a.items, b.items)):
        if type(x) is not type(y):
            return None
        if isinstance(x, NewAxis):
            continue
        if isinstance(x, Index):
            d = difference(y.at, x.at)
            if d is None:
                return None
            if d:
                return DISJOINT
            continue
        if not (same_expr(x.step, y.step) and same_expr(x.size, y.size)):
            return None
        out[pos] = difference(y.start, x.start)
        if out[pos] is None:
            return None
    return out


def loop_range(s):
    """The least and the greatest value the variable of ``for`` loop ``s`` takes, each as
    ``(expression, constant offset)`` (``(stop, -1)``: one below ``stop``), or None when the
    step's sign is unknown or a bound reads what the loop writes."""
    step = const_value(s.step)
    if not step:
        return None
    written = {s.var} | {w.container for t in walk(s.body) for w in stmt_writes(t)}
    if any(r.ref.container in written for e in (s.start, s.stop) for r in iter_reads(e)):
        return None
    start, stop = s.start, s.stop
    if step > 0 and isinstance(stop, Op) and stop.name == "maximum" and len(stop.args) == 2:
        # range(a, maximum(a, n)) runs only where n > a, and then stops at n
        for x, y in (stop.args, stop.args[::-1]):
            if same_expr(x, start):
                stop = y
    return ((start, 0), (stop, -1)) if step > 0 else ((stop, 1), (start, 0))


def shifted(e, var):
    """Whether ``e`` is ``var``, ``var + k`` or ``var - k`` for a constant ``k``."""
    if isinstance(e, Read):
        return e.ref.container is var
    return isinstance(e, Op) and e.name in ("add", "subtract") and len(e.args) == 2 and \
        shifted(e.args[0], var) and isinstance(e.args[1], Const)


def loop_span(ref, loop):
    """The elements view ``ref`` covers over all the iterations of ``loop`` (of unit step): an
    index the loop's variable moves (``var + k``) becomes a slice over the loop's range; None
    where the view depends on the loop otherwise."""
    if ref.perm is not None or const_value(loop.step) != 1 or loop_range(loop) is None:
        return None
    varying = {w.container for s in walk(loop.body) for w in stmt_writes(s)} - {loop.var}
    items = []
    for it in ref.items:
        exprs = [it.at] if isinstance(it, Index) else [it.start, it.size, it.step] if isinstance(it, Slice) else []
        read = {r.ref.container for e in exprs for r in iter_reads(e)}
        if read & varying:
            return None
        if loop.var not in read:
            items.append(it)
        elif isinstance(it, Index) and shifted(it.at, loop.var):
            start = op("add", loop.start, op("subtract", it.at, scalar(loop.var)))
            items.append(Slice(start, op("maximum", Const(0), op("subtract", loop.stop, loop.start)), 1))
        else:
            return None
    return Ref(ref.container, items)


def _indices_differ(p, q, ranges):
    """Whether integer expressions ``p`` and ``q`` provably differ, ``ranges`` giving the values
    loop variables take (``loop_range``): ``j`` of ``range(0, i)`` is never ``i``."""
    d = difference(p, q)
    if d is not None:
        return d != 0
    for x, y in ((p, q), (q, p)):
        base, k = split_offset(x)
        bounds = ranges.get(base.ref.container) if isinstance(base, Read) and not base.ref.items else None
        if bounds is None:
            continue
        (lo, klo), (hi, khi) = bounds
        below, above = difference(hi, y), difference(lo, y)
        if below is not None and below + khi + k < 0 or above is not None and above + klo + k > 0:
            return True
    return False


def apart(a: Ref, b: Ref, ranges=None) -> bool:
    """Whether views ``a`` and ``b`` of one container provably share no element: along some
    axis they fix different positions, one fixes a position outside the other's unit-step
    slice, their unit-step slices do not meet, or one ends where the other starts or below
    (``A[0:i, j]`` and ``A[i, i:n]``). ``ranges`` maps loop variables to their ``loop_range``."""
    ranges = ranges or {}
    xs = [it for it in a.items if not isinstance(it, NewAxis)]
    ys = [it for it in b.items if not isinstance(it, NewAxis)]
    for x, y in zip(xs, ys):
        if isinstance(x, Index) and isinstance(y, Index):
            if _indices_differ(x.at, y.at, ranges):
                return True
        elif isinstance(x, Index) or isinstance(y, Index):
            at, sl = (x.at, y) if isinstance(x, Index) else (y.at, x)
            d, n = difference(at, sl.start), const_value(sl.size)
            if const_value(sl.step) == 1 and d is not None and (d < 0 or n is not None and d >= n):
                return True
        elif isinstance(x, Slice) and isinstance(y, Slice) and const_value(x.step) == 1 and const_value(y.step) == 1:
            d, nx, ny = difference(y.start, x.start), const_value(x.size), const_value(y.size)
            if d is not None and (nx is not None and d >= nx or ny is not None and -d >= ny):
                return True
        if _below(x, y) or _below(y, x):
            return True
    return False


def _below(x, y):
    """Whether every position of item ``x`` lies below every position of item ``y`` (unit-step
    slices): ``x`` ends where ``y`` starts, or below."""
    end, start = _end(x), _start(y)
    if end is None or start is None:
        return False
    d = difference(start, end)
    return d is not None and d >= 0


def _start(it):
    if isinstance(it, Index):
        return it.at
    return it.start if isinstance(it, Slice) and const_value(it.step) == 1 else None


def _end(it):
    """One past the last position of item ``it``: a slice ``start:+maximum(0, n)`` ends below
    ``start + n`` (it is empty where ``n`` is not positive)."""
    if isinstance(it, Index):
        return op("add", it.at, Const(1))
    if not isinstance(it, Slice) or const_value(it.step) != 1:
        return None
    size = it.size
    if isinstance(size, Op) and size.name == "maximum" and len(size.args) == 2:
        zero = [k for k, arg in enumerate(size.args) if const_value(arg) == 0]
        if zero:
            size = size.args[1 - zero[0]]
    return op("add", it.start, size)


def substitute(e, c, by: Expr):
    """``e`` with every read of scalar ``c`` (in values, indices and view bounds) replaced by
    expression ``by``."""
    if isinstance(e, Read):
        if e.ref.container is c and not e.ref.items:
            return by
        items = []
        for it in e.ref.items:
            if isinstance(it, Index):
                it = Index(substitute(it.at, c, by))
            elif isinstance(it, Slice):
                it = Slice(*(substitute(x, c, by) for x in (it.start, it.size, it.step)))
            items.append(it)
        return Read(Ref(e.ref.container, items, e.ref.perm))
    if isinstance(e, Op):
        return op(e.name, *(substitute(a, c, by) for a in e.args))
    return e


def same_expr(a: Expr, b: Expr) -> bool:
    """Structural equality of expressions."""
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    if isinstance(a, Const):
        return a.value == b.value and a.dtype == b.dtype
    if isinstance(a, Read):
        return same_ref(a.ref, b.ref)
    if isinstance(a, Op):
        return a.name == b.name and len(a.args) == len(b.args) and all(
            same_expr(x, y) for x, y in zip(a.args, b.args))
    if isinstance(a, Take):
        return same_ref(a.source, b.source) and len(a.index) == len(b.index) and all(
            same_expr(x, y) for x, y in zip(a.index, b.index))
    return False


def same_ref(a: Ref, b: Ref) -> bool:
    if a.container is not b.container or a.perm != b.perm or len(a.items) != len(b.items):
        return False
    for x, y in zip(a.items, b.items):
        if type(x) is not type(y):
            return False
        if isinstance(x, Index) and not same_expr(x.at, y.at):
            return False
        if isinstance(x, Slice) and not (same_expr(x.start, y.start) and same_expr(x.size, y.size)
                                         and same_expr(x.step, y.step)):
            return False
    return True


def iter_reads(e: Expr):
    """Every Read in an expression, including those inside index expressions."""
    if isinstance(e, Read):
        yield e
        for ie in e.ref.index_exprs():
            yield from iter_reads(ie)
    elif isinstance(e, Op):
        for a in e.args:
            yield from iter_reads(a)
    elif isinstance(e, Take):
        yield Read(e.source)
        for a in e.index:
            yield from iter_reads(a)


def data_reads(e: Expr):
    """Reads whose values flow into the result (not conditions of where, not indices)."""
    if isinstance(e, Read):
        yield e
    elif isinstance(e, Op):
        if ELEMENTWISE[e.name][1] == "bool" or e.name in ("floor", "ceil", "round", "sign"):
            return
        args = e.args[1:] if e.name == "where" else e.args
        for a in args:
            yield from data_reads(a)
    elif isinstance(e, Take):
        yield Read(e.source)


def scalar(container: Container) -> Read:
    return Read(Ref(container, ()))


# ---------------------------------------------------------------- statements


class Stmt:
    __slots__ = ()


class Assign(Stmt):
    """``dst = expr`` (or ``dst += expr``), NumPy semantics: the right side is evaluated first."""

    __slots__ = ("dst", "expr", "accumulate", "loc")

    def __init__(self, dst: Ref, expr: Expr, accumulate=False, loc=None):
        self.dst, self.expr, self.accumulate, self.loc = dst, as_expr(expr), accumulate, loc


class Call(Stmt):
    """A non-elementwise operation (see ``flowgrad.autodiff.rules.CALLS``).

    Inputs are Reads or Consts; each output is a whole transient container it overwrites.
    """

    __slots__ = ("op", "inputs", "outputs", "attrs", "loc")

    def __init__(self, op: str, inputs, outputs, attrs=None, loc=None):
        self.op, self.inputs, self.outputs = op, tuple(as_expr(i) for i in inputs), tuple(outputs)
        self.attrs = dict(attrs or {})
        self.loc = loc


class For(Stmt):
    """``for var in range(start, stop, step)`` (bounds evaluated once); ``reverse`` walks it backwards."""

    __slots__ = ("var", "start", "stop", "step", "body", "reverse", "loc")

    def __init__(self, var: Container, start, stop, step, body, reverse=False, loc=None):
        self.var = var
        self.start, self.stop, self.step = as_expr(start), as_expr(stop), as_expr(step)
        self.body, self.reverse, self.loc = list(body), reverse, loc


class While(Stmt):
    """``while cond: body``; cond is a scalar boolean expression recomputed by the body."""

    __slots__ = ("cond", "body", "loc")

    def __init__(self, cond: Expr, body, loc=None):
        self.cond, self.body, self.loc = cond, list(body), loc


class If(Stmt):
    """``if cond: then else: orelse`` on a scalar boolean expression."""

    __slots__ = ("cond", "then", "orelse", "loc")

    def __init__(self, cond: Expr, then, orelse=(), loc=None):
        self.cond, self.then, self.orelse, self.loc = cond, list(then), list(orelse), loc


class Push(Stmt):
    """Save the current values of ``ref`` on ``tape`` (last in, first out).

    ``copy=False`` when the write being undone rebinds the whole container to fresh memory,
    so the old memory itself can be kept.
    """

    __slots__ = ("tape", "ref", "loc", "copy")

    def __init__(self, tape: Container, ref: Ref, loc=None, copy=True):
        self.tape, self.ref, self.loc, self.copy = tape, ref, loc, copy


class Pop(Stmt):
    """Restore ``ref`` from the last entry of ``tape``. ``local``: None, or the variable of the
    loop at the top of whose body it stands where only the statements after it in the same pass
    read what it restores (``autodiff.restores.read_in_pass``): a backend serving those reads from
    the tape need not store the values."""

    __slots__ = ("tape", "ref", "loc", "local")

    def __init__(self, tape: Container, ref: Ref, loc=None, local=None):
        self.tape, self.ref, self.loc, self.local = tape, ref, loc, local


class Program:
    """A captured function: parameters, containers, a body and its results."""

    def __init__(self, name, params, body, results, containers, inputs=(), outputs=()):
        self.name = name
        self.params = list(params)          # argument containers, in call order
        self.body = list(body)
        self.results = list(results)        # containers returned by the forward function
        self.containers = dict(containers)  # name -> Container, every container used
        self.inputs = list(inputs)          # extra inputs (e.g. the cotangent seed)
        self.outputs = list(outputs)        # extra outputs (e.g. gradients)

    def __str__(self):
        from .printer import program_text
        return program_text(self)


# ---------------------------------------------------------------- walking


def walk(stmts):
    """Every statement, depth first, in program order."""
    for s in stmts:
        yield s
        for body in child_blocks(s):
            yield from walk(body)


def written_only_by(stmts, pred):
    """The containers every write of which in ``stmts`` (nested blocks included) is a statement
    ``s`` with ``pred(s, container)`` true."""
    writers = {}
    for s in walk(stmts):
        for w in stmt_writes(s):
            writers.setdefault(w.container, []).append(s)
    return {c for c, ws in writers.items() if all(pred(s, c) for s in ws)}


def map_blocks(s, fn):
    """``s`` rebuilt with ``fn`` applied to each of its nested statement lists (``s`` itself if it
    has none)."""
    if isinstance(s, For):
        return For(s.var, s.start, s.stop, s.step, fn(s.body), s.reverse, s.loc)
    if isinstance(s, While):
        return While(s.cond, fn(s.body), s.loc)
    if isinstance(s, If):
        return If(s.cond, fn(s.then), fn(s.orelse), s.loc)
    return s


def distinct(stmts, seen=None):
    """``stmts`` with no statement object in two places: a simple statement met again (a gradient
    program's backward sweep replays a forward definition by sharing it) is copied, compound
    ones are rebuilt. Passes that key their work by statement identity need each occurrence apart."""
    seen = set() if seen is None else seen
    out = []
    for s in stmts:
        if child_blocks(s):
            out.append(map_blocks(s, lambda body: distinct(body, seen)))
            continue
        if id(s) in seen:
            s = copy.copy(s)
        seen.add(id(s))
        out.append(s)
    return out


def child_blocks(s):
    if isinstance(s, (For, While)):
        return (s.body,)
    if isinstance(s, If):
        return (s.then, s.orelse)
    return ()


def stmt_writes(s):
    """Refs written by a simple statement."""
    if isinstance(s, Assign):
        return (s.dst,)
    if isinstance(s, Call):
        return tuple(Ref(c) for c in s.outputs)
    if isinstance(s, Pop):
        return (s.ref,)
    if isinstance(s, For):
        return (Ref(s.var, ()),)
    return ()


def touches(s, c):
    """Whether statement ``s`` (nested blocks included) reads or writes container ``c``."""
    return any(r.ref.container is c for t in walk([s]) for r in stmt_reads(t)) or \
        any(w.container is c for t in walk([s]) for w in stmt_writes(t))


# Calls that update their output in place (``y[idx] = v``) rather than overwrite it: they read
# it too. Filled from the rule table (``CallRule.inplace`` in autodiff.rules), where each op is
# declared once.
INPLACE_CALLS = set()


def stmt_reads(s):
    """Reads of a statement's own expressions (not of nested blocks), indices included; a call
    updating its output in place (``INPLACE_CALLS``) reads that output too."""
    out = []
    if isinstance(s, Assign):
        out += iter_reads(s.expr)
        for ie in s.dst.index_exprs():
            out += iter_reads(ie)
        if s.accumulate:
            out.append(Read(s.dst))
    elif isinstance(s, Call):
        for e in s.inputs:
            out += iter_reads(e)
        for v in s.attrs.values():
            if isinstance(v, Expr):
                out += iter_reads(v)
            elif isinstance(v, tuple):
                for x in v:
                    if isinstance(x, Expr):
                        out += iter_reads(x)
        for c in s.outputs:
            for d in c.shape:
                out += iter_reads(d)
        if s.op in INPLACE_CALLS:
            out.append(Read(Ref(s.outputs[0])))
    elif isinstance(s, For):
        for e in (s.start, s.stop, s.step):
            out += iter_reads(e)
    elif isinstance(s, (While, If)):
        out += iter_reads(s.cond)
    elif isinstance(s, Push):
        out.append(Read(s.ref))
        for ie in s.ref.index_exprs():
            out += iter_reads(ie)
    elif isinstance(s, Pop):
        for ie in s.ref.index_exprs():
            out += iter_reads(ie)
    if isinstance(s, Assign) and s.dst.is_whole():
        for d in s.dst.container.shape:
            out += iter_reads(d)
    return out


class _Renamer:
    """Statements and expressions rebuilt with containers replaced (``rename``)."""

    def __init__(self, mapping):
        self.mapping = mapping

    def expr(self, e):
        if isinstance(e, Read):
            return Read(self.ref(e.ref))
        if isinstance(e, Op):
            return Op(e.name, tuple(self.expr(a) for a in e.args), e.dtype, tuple(self.expr(d) for d in e.shape))
        if isinstance(e, Take):
            return Take(self.ref(e.source), [self.expr(i) for i in e.index])
        if isinstance(e, Const):
            return e
        raise ValueError(f"cannot rename in {type(e).__name__}")

    def item(self, it):
        if isinstance(it, Index):
            return Index(self.expr(it.at))
        if isinstance(it, Slice):
            return Slice(self.expr(it.start), self.expr(it.size), self.expr(it.step))
        return it

    def ref(self, r):
        return Ref(self.mapping.get(r.container, r.container), tuple(self.item(it) for it in r.items), r.perm)

    def attr(self, v):
        if isinstance(v, Expr):
            return self.expr(v)
        if isinstance(v, tuple):
            return tuple(self.attr(x) for x in v)
        if isinstance(v, (Container, Stmt, list)):
            raise ValueError("cannot rename in a call holding statements or containers")
        return v

    def stmt(self, s):
        m = self.mapping
        if isinstance(s, Assign):
            return Assign(self.ref(s.dst), self.expr(s.expr), s.accumulate, s.loc)
        if isinstance(s, Call):
            return Call(s.op, [self.expr(e) for e in s.inputs], [m.get(c, c) for c in s.outputs],
                        {k: self.attr(v) for k, v in s.attrs.items()}, s.loc)
        if isinstance(s, For):
            return For(m.get(s.var, s.var), self.expr(s.start), self.expr(s.stop), self.expr(s.step),
                       self.block(s.body), s.reverse, s.loc)
        if isinstance(s, While):
            return While(self.expr(s.cond), self.block(s.body), s.loc)
        if isinstance(s, If):
            return If(self.expr(s.cond), self.block(s.then), self.block(s.orelse), s.loc)
        raise ValueError(f"cannot rename in {type(s).__name__}")

    def block(self, body):
        return [self.stmt(s) for s in body]


def rename(stmts, mapping):
    """``stmts`` rebuilt with each container in ``mapping`` (Container -> Container) replaced,
    in what they read and write, loop variables included. For captured statements: a call whose
    attributes hold statements or containers raises ValueError (nothing to rename them by)."""
    return _Renamer(mapping).block(stmts)


def rename_expr(e, mapping):
    """Expression ``e`` with the containers in ``mapping`` replaced (see ``rename``)."""
    return _Renamer(mapping).expr(e)


class _RefMapper(_Renamer):
    def __init__(self, fn):
        super().__init__({})
        self.fn = fn

    def ref(self, r):
        return self.fn(super().ref(r))


def map_refs(stmts, fn):
    """``stmts`` rebuilt with every Ref they read or write (index expressions' reads included)
    replaced by ``fn(ref)``; calls as in ``rename``."""
    return _RefMapper(fn).block(stmts)


def map_expr_refs(e, fn):
    """Expression ``e`` with every Ref it reads replaced by ``fn(ref)`` (see ``map_refs``)."""
    return _RefMapper(fn).expr(e)


def stmt_containers(s):
    """Containers a simple statement reads or writes: tapes it pushes or pops, and the
    containers the shapes of what it touches read."""
    out = {r.ref.container for r in stmt_reads(s)} | {w.container for w in stmt_writes(s)}
    if isinstance(s, (Push, Pop)):
        out.add(s.tape)
    for c in list(out):
        out.update(r.ref.container for d in c.shape for r in iter_reads(d))
    return out


def reads_besides_sum(s):
    """``stmt_reads(s)`` without the read of its own destination that a sum ``x += e`` makes."""
    reads = stmt_reads(s)
    if isinstance(s, Assign) and s.accumulate:
        del reads[next(k for k, r in enumerate(reads) if r.ref is s.dst)]
    return reads


# the elementwise primitives, views of their declarations (``ir.elements``, which builds on the above)
from .elements import ELEMENTS  # noqa: E402

ELEMENTWISE = {n: (e.arity, e.kind) for n, e in ELEMENTS.items()}     # name -> (arity, result kind)
CHEAP_OPS = frozenset(n for n, e in ELEMENTS.items() if e.cheap)      # free to evaluate again
_WEAK_OPS = frozenset(n for n, e in ELEMENTS.items() if e.weak)       # Python scalars in, a Python scalar out
