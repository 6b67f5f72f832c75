"""Fortran intrinsic procedures as IR: elemental math, conversions, reductions, inquiry.

Each entry takes the lowering and the call's arguments by Fortran's keyword names. Axes:
Fortran's ``DIM=d`` of a rank-``r`` value is IR axis ``r - d`` (axes run reversed), and
``MATMUL(A, B)`` is the IR product ``B @ A`` of the reversed operands.
"""
from __future__ import annotations

import numpy as np

from ...errors import unsupported
from ...ir.core import BOOL, I64, Assign, Call, If, Read, Ref, as_expr, const_value
from .. import numpy_api
from .exprs import Text, const, convert, fortran_mod, int_div, mk, numeric_type
from .scope import Absent, Var
from .source import _fparser
from .types import F32, F64, TypeSpec, machine, selected_int_kind, selected_real_kind

_MATH = {"sqrt": "sqrt", "exp": "exp", "log": "log", "log10": "log10", "sin": "sin", "cos": "cos", "tan": "tan",
         "asin": "arcsin", "acos": "arccos", "atan": "arctan", "sinh": "sinh", "cosh": "cosh", "tanh": "tanh",
         "asinh": "arcsinh", "acosh": "arccosh", "atanh": "arctanh", "log_gamma": "gammaln"}
# FORTRAN 77's specific names
_SPECIFIC = {"dsqrt": "sqrt", "dexp": "exp", "dlog": "log", "alog": "log", "dlog10": "log10", "alog10": "log10",
             "dsin": "sin", "dcos": "cos", "dtan": "tan", "dasin": "asin", "dacos": "acos", "datan": "atan",
             "dsinh": "sinh", "dcosh": "cosh", "dtanh": "tanh", "dabs": "abs", "iabs": "abs", "datan2": "atan2",
             "dmod": "mod", "amod": "mod", "dsign": "sign", "isign": "sign", "amax1": "max", "dmax1": "max",
             "max0": "max", "amin1": "min", "dmin1": "min", "min0": "min", "idint": "int", "ifix": "int",
             "dfloat": "dble", "idnint": "nint", "dint": "aint", "dnint": "anint", "ddim": "dim", "idim": "dim",
             "derf": "erf", "dgamma": "gamma", "dlgama": "log_gamma", "algama": "log_gamma"}
# standard intrinsics (Fortran 2008) not supported here, named as intrinsics in the error, with
# fparser's Fortran 2003 list
_OTHER_INTRINSICS = {"erfc", "erfc_scaled", "bessel_j0", "bessel_j1", "bessel_jn", "bessel_y0", "bessel_y1",
                     "bessel_yn", "parity", "findloc", "iall", "iany", "iparity", "shifta", "shiftl", "shiftr",
                     "popcnt", "poppar", "leadz", "trailz", "storage_size"}

# keyword names of each intrinsic's arguments, in order
PARAMS = {
    "abs": ("a",), "sign": ("a", "b"), "mod": ("a", "p"), "modulo": ("a", "p"), "dim": ("x", "y"),
    "atan2": ("y", "x"), "atan": ("y", "x"), "dprod": ("x", "y"), "hypot": ("x", "y"), "gamma": ("x",), "erf": ("x",),
    "norm2": ("x", "dim"), "ieee_is_nan": ("x",), "ieee_is_finite": ("x",),
    "real": ("a", "kind"), "dble": ("a",), "float": ("a",), "sngl": ("a",), "int": ("a", "kind"),
    "nint": ("a", "kind"), "anint": ("a", "kind"), "aint": ("a", "kind"), "floor": ("a", "kind"),
    "ceiling": ("a", "kind"), "merge": ("tsource", "fsource", "mask"),
    "sum": ("array", "dim", "mask"), "product": ("array", "dim", "mask"), "maxval": ("array", "dim", "mask"),
    "minval": ("array", "dim", "mask"), "count": ("mask", "dim", "kind"), "any": ("mask", "dim"),
    "all": ("mask", "dim"), "maxloc": ("array", "dim", "mask"), "minloc": ("array", "dim", "mask"),
    "dot_product": ("vector_a", "vector_b"), "matmul": ("matrix_a", "matrix_b"), "transpose": ("matrix",),
    "size": ("array", "dim", "kind"), "lbound": ("array", "dim", "kind"), "ubound": ("array", "dim", "kind"),
    "shape": ("source", "kind"), "epsilon": ("x",), "huge": ("x",), "tiny": ("x",), "kind": ("x",),
    "selected_real_kind": ("p", "r", "radix"), "selected_int_kind": ("r",), "present": ("a",),
    "allocated": ("array",), "associated": ("pointer", "target"), "reshape": ("source", "shape", "pad", "order"),
    "spread": ("source", "dim", "ncopies"), "cshift": ("array", "shift", "dim"),
    "eoshift": ("array", "shift", "boundary", "dim"), "precision": ("x",), "digits": ("x",), "max": (), "min": (),
}
PARAMS.update({name: ("x",) for name in _MATH if name not in PARAMS})     # ATAN(Y, X) keeps its two
# inquiry functions: their array argument is not evaluated as a value (its bounds are what counts)
RAW = {"present", "allocated", "associated", "lbound", "ubound", "size", "shape", "kind", "epsilon", "huge", "tiny",
       "precision", "digits"}


def canonical(name):
    return _SPECIFIC.get(name, name)


def is_intrinsic(name):
    name = canonical(name)
    return name in PARAMS


def is_standard_intrinsic(name):
    """Whether ``name`` is a standard Fortran intrinsic (supported here or not)."""
    F = _fparser()[2]
    return is_intrinsic(name) or name in _OTHER_INTRINSICS or name.upper() in F.Intrinsic_Name.function_names


def _real(e, loc):
    """A real operand: an integer becomes default real, as Fortran's generic intrinsics need."""
    if e.dtype == BOOL:
        raise unsupported(loc, "LOGICAL argument of a numeric intrinsic", "convert with MERGE")
    return e if e.dtype.kind == "f" else convert(e, F32)


def _axis(lo, x, dim):
    d = const_value(dim)
    if d is None:
        raise unsupported(lo.loc, "DIM= known only at run time", "give DIM as a constant")
    r = len(x.shape)
    if not 1 <= d <= r:
        raise unsupported(lo.loc, f"DIM={d} of a rank-{r} array", "DIM must be between 1 and the rank")
    return r - d


def _kind_dtype(lo, kind, base):
    k = const_value(kind)
    if k is None:
        raise unsupported(lo.loc, "KIND= known only at run time", "give the kind as a constant")
    return TypeSpec(base, int(k)).dtype(lo.loc)


def call_intrinsic(lo, name, args, kwargs, nodes):
    """The value of intrinsic ``name``; ``args``/``kwargs`` are values (or, for ``RAW``
    intrinsics, the argument nodes ``nodes`` by position/keyword)."""
    name = canonical(name)
    loc = lo.loc
    for v in list(args) + list(kwargs.values()):
        if isinstance(v, Text) and name not in RAW:
            raise unsupported(loc, f"character argument to {name.upper()}", "strings cannot be computed with")
    params = PARAMS.get(name, ())
    if name in ("max", "min"):
        if kwargs:
            raise unsupported(loc, f"keyword arguments to {name.upper()}", "pass them positionally")
        if len(args) < 2:
            raise unsupported(loc, f"{name.upper()} of one argument", "it takes two or more")
        dt = numeric_type(*[a.dtype for a in args])
        out = convert(args[0], dt, loc)
        for a in args[1:]:
            out = mk("maximum" if name == "max" else "minimum", out, convert(a, dt, loc))
        return out
    a = dict(zip(params, args))
    for k, v in kwargs.items():
        if k not in params:
            raise unsupported(loc, f"keyword {k}= of {name.upper()}", f"it takes {', '.join(params)}")
        a[k] = v
    fn = _HANDLERS.get(name)
    if fn is None:
        raise unsupported(loc, f"intrinsic {name.upper()}", "it is not supported yet")
    return fn(lo, a)


def _math(opname):
    def handler(lo, a):
        return mk(opname, _real(a["x"], lo.loc))
    return handler


def _abs(lo, a):
    return mk("abs", a["a"])


def _sign(lo, a):
    x, y = a["a"], a["b"]
    dt = numeric_type(x.dtype, y.dtype)
    x, y = convert(x, dt), convert(y, dt)
    ax = mk("abs", x)
    return mk("where", _negative(y), mk("negative", ax), ax)


def _negative(y):
    """Whether ``y`` is below zero or, a REAL, negative zero: SIGN(1.0, -0.0) is -1.0 where the
    processor has signed zeros, as gfortran's does. -0.0 < 0 is false; its sign shows in
    ATAN2(-0.0, -1.0) = -pi (ATAN2(+0.0, -1.0) = pi), which native code evaluates at zero only."""
    below = mk("less", y, const(0, y.dtype))
    if y.dtype.kind != "f":
        return below
    zero = const(0, y.dtype)
    return mk("logical_or", below, mk("logical_and", mk("equal", y, zero),
                                      mk("less", mk("arctan2", y, const(-1, y.dtype)), zero)))


def _mod(lo, a):
    x, p = a["a"], a["p"]
    dt = numeric_type(x.dtype, p.dtype)
    return fortran_mod(convert(x, dt), convert(p, dt))


def _modulo(lo, a):
    x, p = a["a"], a["p"]
    dt = numeric_type(x.dtype, p.dtype)
    return mk("mod", convert(x, dt), convert(p, dt))


def _dim(lo, a):
    dt = numeric_type(a["x"].dtype, a["y"].dtype)
    return mk("maximum", mk("subtract", convert(a["x"], dt), convert(a["y"], dt)), const(0, dt))


def _atan(lo, a):
    """ATAN(X), or ATAN(Y, X) as ATAN2."""
    if "y" in a and "x" in a:
        return _atan2(lo, a)
    return mk("arctan", _real(a.get("y", a.get("x")), lo.loc))


def _atan2(lo, a):
    y, x = _real(a["y"], lo.loc), _real(a["x"], lo.loc)
    dt = numeric_type(y.dtype, x.dtype)
    return mk("arctan2", convert(y, dt), convert(x, dt))


def _hypot(lo, a):
    x, y = _real(a["x"], lo.loc), _real(a["y"], lo.loc)
    dt = numeric_type(x.dtype, y.dtype)
    return mk("hypot", convert(x, dt), convert(y, dt))


def _gamma(lo, a):
    """GAMMA(X) = ±exp(LOG_GAMMA(X)): negative where X < 0 has an odd floor (between -1 and 0,
    -3 and -2, ...)."""
    x = _real(a["x"], lo.loc)
    negative = mk("logical_and", mk("less", x, const(0, x.dtype)),
                  mk("not_equal", mk("mod", mk("floor", x), const(2, x.dtype)), const(0, x.dtype)))
    magnitude = mk("exp", mk("gammaln", x))
    return mk("where", negative, mk("negative", magnitude), magnitude)


def _erf(lo, a):
    """ERF(X): the IR's error function call (SciPy's erf; ``math.erf`` in native code)."""
    x = lo.whole(_real(a["x"], lo.loc))
    out = lo.temp("erf", x.dtype, x.shape)
    lo.emit(Call("erf", [x], [out], {}, loc=lo.loc))
    return Read(Ref(out) if out.ndim else Ref(out, ()))


def _norm2(lo, a):
    """NORM2(X [, DIM]): the Euclidean norm, of the whole array or along DIM."""
    x = _real(a["x"], lo.loc)
    axis = None if a.get("dim") is None else _axis(lo, x, a["dim"])
    return mk("sqrt", numpy_api.reduce(lo, "sum", mk("multiply", x, x), axis, False, lo.loc))


def _dprod(lo, a):
    return mk("multiply", convert(a["x"], F64), convert(a["y"], F64))


def _to_real(default):
    def handler(lo, a):
        # REAL(x) without KIND= is default real (single precision), whatever x's kind
        dt = default if a.get("kind") is None else _kind_dtype(lo, a["kind"], "real")
        return convert(a["a"], dt, lo.loc)
    return handler


def _int(lo, a):
    x = a["a"]
    return x if x.dtype == I64 else convert(x, I64, lo.loc)


def _rounded(x):
    """Nearest whole number, halves away from zero (NINT, ANINT), in ``x``'s dtype."""
    t = convert(convert(x, I64), x.dtype)
    half = mk("equal", mk("abs", mk("subtract", x, t)), const(0.5, x.dtype))
    return mk("where", half, mk("add", t, mk("sign", x)), mk("round", x))


def _nint(lo, a):
    x = _real(a["a"], lo.loc)
    return convert(_rounded(x), I64)


def _anint(lo, a):
    x = _real(a["a"], lo.loc)
    out = _rounded(x)
    return out if a.get("kind") is None else convert(out, _kind_dtype(lo, a["kind"], "real"))


def _aint(lo, a):
    x = _real(a["a"], lo.loc)
    out = convert(convert(x, I64), x.dtype)
    return out if a.get("kind") is None else convert(out, _kind_dtype(lo, a["kind"], "real"))


def _floor(name):
    def handler(lo, a):
        x = a["a"]
        if x.dtype == I64:
            return x
        return convert(mk(name, x), I64)
    return handler


def _merge(lo, a):
    t, f, m = a["tsource"], a["fsource"], a["mask"]
    if t.dtype == BOOL and f.dtype == BOOL:
        return mk("where", m, t, f)
    dt = numeric_type(t.dtype, f.dtype)
    return mk("where", m, convert(t, dt), convert(f, dt))


def _reduction(name, fill):
    def handler(lo, a):
        x = a["array"]
        if x.shape == ():
            raise unsupported(lo.loc, f"{name.upper()} of a scalar", "its argument must be an array")
        if a.get("mask") is not None:
            x = mk("where", a["mask"], x, fill(x.dtype))
        axis = None if a.get("dim") is None else _axis(lo, x, a["dim"])
        op_name = {"sum": "sum", "product": "prod", "maxval": "max", "minval": "min"}[name]
        if name in ("maxval", "minval"):
            return _extreme(lo, op_name, x, axis, fill(x.dtype))
        return numpy_api.reduce(lo, op_name, x, axis, False, lo.loc)
    return handler


def _extreme(lo, op_name, x, axis, fill):
    """MAXVAL/MINVAL: over no elements (a section such as x(k1:k2) with k2 < k1) -HUGE or HUGE, as
    Fortran defines them, where NumPy's max has no value."""
    count = const(1)
    for e in (x.shape if axis is None else (x.shape[axis],)):
        count = mk("multiply", count, as_expr(e))
    if (const_value(count) or 0) > 0:
        return numpy_api.reduce(lo, op_name, x, axis, False, lo.loc)
    some, value = lo.collect(numpy_api.reduce, lo, op_name, x, axis, False, lo.loc)
    out = lo.temp(op_name, value.dtype, value.shape)
    ref = Ref(out) if out.ndim else Ref(out, ())
    some.append(Assign(ref, value, loc=lo.loc))
    lo.emit(If(mk("greater", count, const(0)), some, [Assign(ref, fill, loc=lo.loc)], loc=lo.loc))
    return Read(ref)


def _count(lo, a):
    m = a["mask"]
    axis = None if a.get("dim") is None else _axis(lo, m, a["dim"])
    return numpy_api.reduce(lo, "sum", convert_bool(m), axis, False, lo.loc)


def convert_bool(m):
    return mk("where", m, const(1), const(0))


def _any(lo, a):
    return mk("greater", _count(lo, {"mask": a["mask"], "dim": a.get("dim")}), const(0))


def _all(lo, a):
    return mk("equal", _count(lo, {"mask": mk("logical_not", a["mask"]), "dim": a.get("dim")}), const(0))


def _loc(name):
    """MAXLOC/MINLOC: the first position of the extreme, Fortran subscripts counted from 1 (0 where
    MASK selects no element). Along ``DIM`` one position per remaining element; else the
    subscripts of the extreme, unravelled from its array element order position (the IR's flat
    position: axes run reversed)."""
    def handler(lo, a):
        x, mask = a["array"], a.get("mask")
        if x.shape == ():
            raise unsupported(lo.loc, f"{name.upper()} of a scalar", "its argument must be an array")
        axis = None if a.get("dim") is None else _axis(lo, x, a["dim"])
        arg, found = ("argmax" if name == "maxloc" else "argmin"), None
        if mask is not None:
            x, found = _first_extreme(lo, name, x, mask, axis)
            arg = "argmax"

        def position(p):
            return p if found is None else mk("where", found, p, const(0))
        if axis is not None:
            return position(mk("add", numpy_api.reduce(lo, arg, lo.whole(x), axis, False, lo.loc), const(1)))
        flat = numpy_api.reduce(lo, arg, lo.whole(x), None, False, lo.loc)
        subscripts, stride = [], const(1)
        for extent in reversed(x.shape):
            subscripts.append(position(mk("add", fortran_mod(int_div(flat, stride), as_expr(extent)), const(1))))
            stride = mk("multiply", stride, as_expr(extent))
        return lo.construct(subscripts)
    return handler


def _first_extreme(lo, name, x, mask, axis):
    """(1 where an element is selected by ``mask`` and equals the extreme of the selected ones,
    else 0; whether ``mask`` selects any element), over the whole array or along ``axis``: the
    first 1 is MAXLOC's or MINLOC's answer, exactly, whatever values the others hold."""
    dt = np.dtype(x.dtype)
    limits = np.finfo(dt) if dt.kind == "f" else np.iinfo(dt)
    bound = (-np.inf if name == "maxloc" else np.inf) if dt.kind == "f" else (
        limits.min if name == "maxloc" else limits.max)
    selected = mk("where", mask, x, const(bound, dt))
    extreme = numpy_api.reduce(lo, "max" if name == "maxloc" else "min", lo.whole(selected), axis, True, lo.loc)
    key = convert_bool(mk("logical_and", mask, mk("equal", x, extreme)))
    return key, _any(lo, {"mask": mask, "dim": None if axis is None else const(len(x.shape) - axis)})


def _dot(lo, a):
    x, y = a["vector_a"], a["vector_b"]
    if x.dtype == BOOL:
        return _any(lo, {"mask": mk("logical_and", x, y)})
    dt = numeric_type(x.dtype, y.dtype)
    return numpy_api.reduce(lo, "sum", mk("multiply", convert(x, dt), convert(y, dt)), None, False, lo.loc)


def _matmul(lo, a):
    x, y = a["matrix_a"], a["matrix_b"]
    dt = numeric_type(x.dtype, y.dtype)
    x, y = lo.whole(convert(x, dt)), lo.whole(convert(y, dt))
    return numpy_api.matmul(lo, y, x, lo.loc)


def _transpose(lo, a):
    x = lo.whole(a["matrix"])
    return numpy_api._transpose(lo, lo.loc, x)


# ---------------------------------------------------------------- inquiry


def _bounds_of(lo, node):
    """(lower bounds, extents) per Fortran dimension of an array argument node."""
    F = _fparser()[2]
    if isinstance(node, F.Name):
        b = lo.lookup(str(node).lower(), create=False)
        if isinstance(b, Var) and b.is_array:
            if b.view is None:
                raise unsupported(lo.loc, f"bounds of unallocated array {node}", "ALLOCATE it first")
            return b.view.lbounds, b.view.extents
    if isinstance(node, F.Data_Ref):
        kind, target = lo.designate(node)
        if kind == "view":
            return target.lbounds, target.extents
    v = lo.value(node)
    r = len(v.shape)
    return [const(1)] * r, [v.shape[r - 1 - d] for d in range(r)]


def _size(lo, a, nodes):
    lbs, ext = _bounds_of(lo, nodes["array"])
    if nodes.get("dim") is not None:
        d = const_value(lo.int_value(nodes["dim"]))
        if d is None or not 1 <= d <= len(ext):
            raise unsupported(lo.loc, "SIZE with this DIM=", "give DIM as a constant within the rank")
        return ext[d - 1]
    n = const(1)
    for e in ext:
        n = mk("multiply", n, e)
    return n


def _bound(upper):
    def handler(lo, a, nodes):
        lbs, ext = _bounds_of(lo, nodes["array"])
        vals = [mk("subtract", mk("add", lb, e), 1) if upper else lb for lb, e in zip(lbs, ext)]
        if nodes.get("dim") is not None:
            d = const_value(lo.int_value(nodes["dim"]))
            if d is None or not 1 <= d <= len(vals):
                raise unsupported(lo.loc, "LBOUND/UBOUND with this DIM=", "give DIM as a constant within the rank")
            return vals[d - 1]
        return lo.construct(vals)
    return handler


def _shape(lo, a, nodes):
    return lo.construct(_bounds_of(lo, nodes["source"])[1])


def _type_arg(lo, node):
    v = lo.value(node)
    return v.dtype


def _machine(name):
    def handler(lo, a, nodes):
        dt = _type_arg(lo, nodes["x"])
        value = machine(name, dt)
        return const(value, dt if dt.kind == "f" else I64)
    return handler


def _kind(lo, a, nodes):
    v = lo.ex(nodes["x"])
    if isinstance(v, Text):
        return const(1)
    dt = v.dtype
    return const(dt.itemsize if dt.kind == "f" else 4)


def _precision(lo, a, nodes):
    dt = _type_arg(lo, nodes["x"])
    return const({4: 6, 8: 15}[dt.itemsize])


def _digits(lo, a, nodes):
    dt = _type_arg(lo, nodes["x"])
    return const({4: 24, 8: 53}[dt.itemsize] if dt.kind == "f" else 31)


def _selected_real_kind(lo, a):
    vals = [None if a.get(k) is None else const_value(a[k]) for k in ("p", "r")]
    if any(v is None for v, k in zip(vals, ("p", "r")) if a.get(k) is not None):
        raise unsupported(lo.loc, "SELECTED_REAL_KIND of values known only at run time", "use constants")
    return const(selected_real_kind(*vals))


def _selected_int_kind(lo, a):
    r = const_value(a["r"])
    if r is None:
        raise unsupported(lo.loc, "SELECTED_INT_KIND of a value known only at run time", "use a constant")
    return const(selected_int_kind(r))


def _present(lo, a, nodes):
    F = _fparser()[2]
    node = nodes["a"]
    if not isinstance(node, F.Name):
        raise unsupported(lo.loc, "PRESENT of a non-name", "pass the dummy argument's name")
    b = lo.lookup(str(node).lower(), create=False)
    return const(not isinstance(b, Absent))


def _allocated(lo, a, nodes):
    kind, target = None, None
    F = _fparser()[2]
    node = nodes["array"]
    if isinstance(node, F.Name):
        b = lo.lookup(str(node).lower(), create=False)
        return const(isinstance(b, Var) and b.view is not None)
    kind, target = lo.designate(node)
    return const(kind == "view")


def _associated(lo, a, nodes):
    return const(True)


def _reshape(lo, a):
    """RESHAPE; with ORDER, the elements fill the result in permuted subscript order: the
    result is the source reshaped to the permuted shape, its axes then permuted back."""
    src, shape = a["source"], a["shape"]
    if a.get("pad") is not None:
        raise unsupported(lo.loc, "RESHAPE with PAD=", "reshape without it")
    dims = lo.const_values(shape)
    if dims is None:
        raise unsupported(lo.loc, "RESHAPE to a shape known only at run time", "give the shape as constants")
    if a.get("order") is not None:
        order = lo.const_values(a["order"])
        n = len(dims)
        if order is None or sorted(int(k) for k in order) != list(range(1, n + 1)):
            raise unsupported(lo.loc, f"RESHAPE with ORDER={order}", f"give a permutation of 1..{n} as constants")
        order = [int(k) for k in order]
        permuted = _reshape(lo, {"source": src, "shape": lo.const_array(np.array([dims[k - 1] for k in order]))})
        # IR axes run reversed: IR axis j of the result is Fortran dimension n - j
        return numpy_api._transpose(lo, lo.loc, lo.whole(permuted), [n - 1 - order.index(n - j) for j in range(n)])
    src = lo.whole(src)
    if isinstance(src, Read) and src.ref.container in lo.const_arrays:
        value = lo.const_arrays[src.ref.container]
        return lo.const_array(np.reshape(np.ravel(value, order="F"), tuple(int(d) for d in dims), order="F"))
    out = lo.temp("reshape", src.dtype, tuple(const(int(d)) for d in reversed(dims)))
    lo.emit(Call("reshape", [src], [out], {"shape": out.shape}, loc=lo.loc))
    return Read(Ref(out))


def _spread(lo, a):
    src, dim, n = a["source"], const_value(a["dim"]), a["ncopies"]
    r = len(src.shape)
    if dim is None or not 1 <= dim <= r + 1:
        raise unsupported(lo.loc, "SPREAD with this DIM=", "give DIM as a constant")
    axis = r + 1 - dim              # the new IR axis
    shape = list(src.shape)
    shape.insert(axis, mk("maximum", n, 0))
    out = lo.temp("spread", src.dtype, tuple(shape))
    from ...ir.core import Assign, NewAxis, Slice
    src = lo.whole(src)
    items = list(src.ref.items)
    if src.ref.perm is not None:
        src = lo.materialize(src, "t")
        items = list(src.ref.items)
    pos = [k for k, it in enumerate(items) if isinstance(it, Slice)]
    at = pos[axis] if axis < len(pos) else len(items)
    items.insert(at, NewAxis())
    lo.emit(Assign(Ref(out), Read(Ref(src.ref.container, items)), loc=lo.loc))
    return Read(Ref(out))


def _shift(circular):
    """CSHIFT and EOSHIFT by a constant shift: the array's two parts along the axis, swapped
    (CSHIFT) or one of them replaced by the boundary value (EOSHIFT)."""
    def handler(lo, a):
        from ...ir.core import Assign, Slice
        x, shift = lo.whole(a["array"]), a["shift"]
        if shift.shape != () or const_value(shift) is None:
            raise unsupported(lo.loc, "CSHIFT/EOSHIFT by a shift known only at run time", "shift by a constant")
        shift = const_value(shift)
        axis = _axis(lo, x, a.get("dim", const(1)))
        n = const_value(x.shape[axis])
        if n is None:
            raise unsupported(lo.loc, "CSHIFT/EOSHIFT along an axis of length known only at run time",
                              "use a DO loop")
        src = x if x.ref.is_whole() else lo.materialize(x, "t")
        c = src.ref.container
        out = lo.temp("shifted", x.dtype, x.shape)

        def part(ref_c, start, size):
            items = [Slice(0, d, 1) for d in ref_c.shape]
            items[axis] = Slice(start, size, 1)
            return Ref(ref_c, items)
        s = shift % n if circular else max(-n, min(n, shift))
        if circular:
            if s:
                lo.emit(Assign(part(out, 0, n - s), Read(part(c, s, n - s)), loc=lo.loc))
                lo.emit(Assign(part(out, n - s, s), Read(part(c, 0, s)), loc=lo.loc))
            else:
                lo.emit(Assign(Ref(out), Read(Ref(c)), loc=lo.loc))
            return Read(Ref(out))
        fill = convert(a["boundary"], x.dtype) if a.get("boundary") is not None else const(0, x.dtype)
        lo.emit(Assign(Ref(out), fill, loc=lo.loc))
        if s >= 0 and n - s:
            lo.emit(Assign(part(out, 0, n - s), Read(part(c, s, n - s)), loc=lo.loc))
        elif s < 0 and n + s:
            lo.emit(Assign(part(out, -s, n + s), Read(part(c, 0, n + s)), loc=lo.loc))
        return Read(Ref(out))
    return handler


_HANDLERS = {
    "abs": _abs, "sign": _sign, "mod": _mod, "modulo": _modulo, "dim": _dim, "atan": _atan, "atan2": _atan2,
    "dprod": _dprod, "hypot": _hypot, "gamma": _gamma, "erf": _erf, "norm2": _norm2,
    "ieee_is_nan": _math("isnan"), "ieee_is_finite": _math("isfinite"), "real": _to_real(F32),
    "float": _to_real(F32), "sngl": _to_real(F32), "dble": _to_real(F64),
    "int": _int, "nint": _nint, "anint": _anint, "aint": _aint, "floor": _floor("floor"),
    "ceiling": _floor("ceil"), "merge": _merge,
    "sum": _reduction("sum", lambda dt: const(0, dt)), "product": _reduction("product", lambda dt: const(1, dt)),
    "maxval": _reduction("maxval", lambda dt: const(-machine("huge", dt), dt)),
    "minval": _reduction("minval", lambda dt: const(machine("huge", dt), dt)),
    "count": _count, "any": _any, "all": _all, "maxloc": _loc("maxloc"), "minloc": _loc("minloc"),
    "dot_product": _dot, "matmul": _matmul, "transpose": _transpose,
    "selected_real_kind": _selected_real_kind, "selected_int_kind": _selected_int_kind,
    "reshape": _reshape, "spread": _spread, "cshift": _shift(True), "eoshift": _shift(False),
}
_HANDLERS.update({name: _math(opname) for name, opname in _MATH.items() if name != "atan"})
_RAW_HANDLERS = {"size": _size, "lbound": _bound(False), "ubound": _bound(True), "shape": _shape,
                 "epsilon": _machine("epsilon"), "huge": _machine("huge"), "tiny": _machine("tiny"), "kind": _kind,
                 "present": _present, "allocated": _allocated, "associated": _associated,
                 "precision": _precision, "digits": _digits}


def call_raw(lo, name, nodes_by_key):
    return _RAW_HANDLERS[canonical(name)](lo, None, nodes_by_key)


__all__ = ["call_intrinsic", "call_raw", "is_intrinsic", "is_standard_intrinsic", "canonical", "PARAMS", "RAW"]
