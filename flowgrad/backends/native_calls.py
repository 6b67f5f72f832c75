"""The native backend's lowering of ``Call`` statements (``CALL_LOWERING``): reductions with
register accumulators, BLAS products and loops for matrix-vector ones, solves and kept LU
factorisations, gathers and scatters, einsum, and the checkpoint-schedule helpers. Each
lowering is ``fn(low, call, indent)`` over a ``native.Lowering``.
"""
from __future__ import annotations

import numpy as np

from ..ir.core import Call, NewAxis, Read, Ref, const_value, iter_reads, op, same_expr, same_ref
from ..autodiff.rules import is_gram
from .numpy import dtype_src


def new_array(shape, dtype, zeros=False):
    """Source allocating an array (``shape``: the source of a tuple), made afresh on every call: not
    marked for huge pages (see ``native_runtime.huge_pages``)."""
    return f"np.{'zeros' if zeros else 'empty'}({shape}, dtype={dtype_src(dtype)})"


def _scalar_type(dt):
    dt = np.dtype(dt)
    return {"f": f"np.{dt.name}", "c": f"np.{dt.name}", "i": "np.int64", "u": "np.int64", "b": "np.bool_"}[dt.kind]


def _out(low, s, ind):
    """Allocate a Call's (whole) output container."""
    c = s.outputs[0]
    if c.ndim and low.needs_allocation(c):
        low.allocate(c, ind)
    return c


def _reduce_axes(call, ndim):
    axes = call.attrs.get("axis")
    if axes is None:
        return tuple(range(ndim))
    return axes if isinstance(axes, tuple) else (axes,)


_INIT = {"sum": "0", "prod": "1", "max": "-np.inf", "min": "np.inf"}
_COMBINE = {"sum": "{a} + {b}", "prod": "{a} * {b}", "max": "max({a}, {b})", "min": "min({a}, {b})"}
# the reductions by how they combine: ``max_const`` (a softmax's shift, a constant to the
# derivative) is a maximum to the lowering, and so joins the nest computing its operand
_REDUCING = {"sum": "sum", "prod": "prod", "max": "max", "min": "min", "max_const": "max"}


def reduction_start(s):
    """``(initial value, combine format)`` of reduction call ``s`` (sum/prod/max/min)."""
    c = s.outputs[0]
    op = "sum" if s.op == "sum_to" else _REDUCING[s.op]
    init = _INIT[op]
    if c.dtype.kind in "iub" and op in ("max", "min"):
        init = "-(1 << 62)" if op == "max" else "(1 << 62)"
    elif c.dtype.kind == "f" and op in ("sum", "prod"):
        init += ".0"
    return init, _COMBINE[op]


def whole_reduction(s):
    """The expression that call ``s`` reduces to one value over its own shape, else None."""
    if s.outputs[0].ndim:
        return None
    x = s.inputs[0] if s.inputs else None
    if s.op in _REDUCING and s.attrs.get("axis") is None:
        return x
    if s.op == "sum_to" and len(x.shape) == len(s.attrs["full"]) and \
            all(same_expr(a, b) for a, b in zip(x.shape, s.attrs["full"])):
        return x                      # not broadcast: each element counted once
    return None


def row_reduction(s):
    """The expression call ``s`` reduces along its last axis only, to one value per row (a
    softmax's row maximum, its adjoint's row sums), else None."""
    c = s.outputs[0]
    x = s.inputs[0] if s.inputs else None
    if x is None or len(x.shape) < 2 or not c.ndim:
        return None
    if s.op in _REDUCING:
        if [a % len(x.shape) for a in _reduce_axes(s, len(x.shape))] != [len(x.shape) - 1]:
            return None
        return x
    full = s.attrs.get("full")
    if s.op == "sum_to" and len(full) == len(x.shape) == c.ndim and const_value(c.shape[-1]) == 1 and \
            const_value(full[-1]) != 1 and all(same_expr(a, b) for a, b in zip(x.shape, full)) and \
            all(same_expr(a, b) for a, b in zip(c.shape[:-1], full[:-1])):
        return x
    return None


def lead_reduction(s):
    """``(expression, r)``: call ``s`` reduces its expression along its ``r`` leading axes only, to
    an array over the trailing ones (a column sum; the adjoint of ``A @ x`` for ``x``,
    ``sum_to(A * g[:, newaxis])``), else None."""
    c = s.outputs[0]
    x = s.inputs[0] if s.inputs else None
    if x is None or len(x.shape) < 2 or not c.ndim:
        return None
    n = len(x.shape)
    if s.op in _REDUCING:
        axes = sorted(a % n for a in _reduce_axes(s, n))
        r = len(axes)
        if axes != list(range(r)) or r >= n:
            return None
    elif s.op == "sum_to" and len(s.attrs["full"]) == n and all(
            same_expr(a, b) for a, b in zip(x.shape, s.attrs["full"])):
        r = n - c.ndim if c.ndim < n else next((k for k, d in enumerate(c.shape) if const_value(d) != 1), n)
        if not 0 < r < n or (c.ndim == n and const_value(x.shape[r - 1]) == 1):
            return None
    else:
        return None
    lead, trail = c.shape[:c.ndim - (n - r)], c.shape[c.ndim - (n - r):]
    if any(const_value(d) != 1 for d in lead) or len(lead) not in (0, r) or \
            not all(same_expr(a, b) for a, b in zip(trail, x.shape[r:])):
        return None
    return x, r


def _lower_reduction(low, s, ind):
    x = low.hoist(s.inputs[0], s.inputs[0].shape, ind)
    c = _out(low, s, ind)
    red = _reduce_axes(s, len(x.shape))
    keep = s.attrs.get("keepdims", False)
    init, combine = reduction_start(s)
    if c.ndim == 0:
        [(_, x)], space = low.collapse([(None, x)], x.shape, ind)
        run = _accumulate(low, x, space, None, combine, init, ind)
        low.line(f"{c.name} = {_scalar_type(c.dtype)}({run})", ind)
        return
    names, inner = low.nest(c.shape, ind, "o")
    low.line(f"{c.name}[{', '.join(names)}] = {init}", inner)

    def target(names):
        out_idx = []
        for k, n in enumerate(names):
            if k not in red:
                out_idx.append(n)
            elif keep:
                out_idx.append("0")
        return f"{c.name}[{', '.join(out_idx)}]"
    _accumulate(low, x, x.shape, target, combine, init, ind, reduced=red)


def _accumulate(low, x, shape, target, combine, init, ind, reduced=None):
    """``target(names) = combine(target(names), x[names])`` over ``shape``; ``reduced`` are the
    axes ``target`` does not index. With ``reduced`` None every axis is reduced into a local
    running value (started at ``init``), whose name is returned; ``target`` is unused. When the
    innermost axis is reduced its loop keeps the running value in a local: the generated
    functions may reassociate floating-point sums (``fastmath={'reassoc'}``), so the compiler
    splits it over vector lanes (measured 2.6x over four hand-written accumulators on a
    contiguous row, on par on a strided column)."""
    last = len(shape) - 1
    if reduced is not None and sorted(reduced) == [0] and last == 1 and _columns(x):
        # a column sum of arrays read transposed (``A.T @ g``'s adjoint for ``g``: ``A @ g``)
        # walks their rows: the reduced axis innermost, into a local running value
        i, j, acc = low.fresh("i"), low.fresh("j"), low.fresh("run")
        low.line(f"for {j} in range({low.src(shape[1])}):", ind)
        low.line(f"{acc} = {init}", ind + 1)
        low.line(f"for {i} in range({low.src(shape[0])}):", ind + 1)
        low.line(f"{acc} = {combine.format(a=acc, b=low.elem(x, [i, j], shape))}", ind + 2)
        t = target([i, j])
        low.line(f"{t} = {combine.format(a=t, b=acc)}", ind + 1)
        return None
    if reduced is not None and last not in reduced:
        names, inner = low.nest(shape, ind)
        t = target(names)
        low.line(f"{t} = {combine.format(a=t, b=low.elem(x, names, shape))}", inner)
        return None
    acc = low.fresh("run")
    if reduced is None:
        low.line(f"{acc} = {init}", ind)
        if last < 0:
            low.line(f"{acc} = {combine.format(a=acc, b=low.elem(x, [], shape))}", ind)
            return acc
    outer, inner = low.nest(shape[:-1], ind)
    if reduced is not None:
        low.line(f"{acc} = {init}", inner)
    j = low.fresh("j")
    low.line(f"for {j} in range({low.src(shape[-1])}):", inner)
    low.line(f"{acc} = {combine.format(a=acc, b=low.elem(x, outer + [j], shape))}", inner + 1)
    if reduced is None:
        return acc
    t = target(outer + [None])
    low.line(f"{t} = {combine.format(a=t, b=acc)}", inner)
    return None


def _columns(x):
    """Whether every matrix expression ``x`` reads is a transposed view (and there is one; a
    vector broadcast along an axis is not a matrix)."""
    views = [r.ref for r in iter_reads(x) if len(r.ref.shape) == 2 and not any(
        isinstance(it, NewAxis) for it in r.ref.items)]
    return bool(views) and all(v.perm == (1, 0) for v in views)


def _lower_argext(low, s, ind):
    """argmax / argmin, over the whole array (a flat position) or along one axis, as NumPy: the
    first position of the extreme, and the first NaN where there is one."""
    x = s.inputs[0]
    c = _out(low, s, ind)
    axis = s.attrs.get("axis")
    axis = None if axis is None else (axis[0] if isinstance(axis, tuple) else axis)
    better = ">" if s.op == "argmax" else "<"
    best, arg, v = low.fresh("best"), low.fresh("arg"), low.fresh("v")

    def scan(names, at, inner):
        low.line(f"{v} = {low.elem(x, names, x.shape)}", inner)
        low.line(f"if {v} {better} {best} or ({v} != {v} and {best} == {best}):", inner)
        low.line(f"{best} = {v}", inner + 1)
        low.line(f"{arg} = {at}", inner + 1)

    start = "-np.inf" if s.op == "argmax" else "np.inf"
    if axis is None:
        pos = low.fresh("pos")
        low.line(f"{best} = {start}", ind)
        low.line(f"{arg} = 0", ind)
        low.line(f"{pos} = 0", ind)
        names, inner = low.nest(x.shape, ind)
        scan(names, pos, inner)
        low.line(f"{pos} += 1", inner)
        low.line(f"{c.name} = {arg}", ind)
        return
    rest = [d for k, d in enumerate(x.shape) if k != axis]
    names, inner = low.nest(rest, ind)
    p = low.fresh("p")
    low.line(f"{best} = {start}", inner)
    low.line(f"{arg} = 0", inner)
    low.line(f"for {p} in range({low.src(x.shape[axis])}):", inner)
    scan(names[:axis] + [p] + names[axis:], p, inner + 1)
    low.line(f"{c.name}[{', '.join(names)}] = {arg}" if c.ndim else f"{c.name} = {arg}", inner)


def _operand_array(low, e, ind):
    """An array expression for a BLAS operand (a contiguous view or a materialised temporary).
    The transpose of a whole matrix is passed as it is: BLAS reads Fortran order directly."""
    if isinstance(e, Read):
        r = e.ref
        if r.perm == (1, 0) and Ref(r.container).is_whole() and same_ref(Ref(r.container, r.items), Ref(r.container)):
            return f"{r.container.name}.T"
        return f"np.ascontiguousarray({low.view_src(r)})" if not r.is_whole() else low.view_src(r)
    tmp = low.fresh("opnd")
    dtype = e.dtype if e.dtype.kind == "c" else np.float64
    low.line(f"{tmp} = np.empty({low.shape_tuple(e.shape)}, dtype={dtype_src(dtype)})", ind)
    names, inner = low.nest(e.shape, ind)
    low.line(f"{tmp}[{', '.join(names)}] = {low.elem(e, names, e.shape)}", inner)
    return tmp


def _blas_views(a, b):
    """Whether a product of ``a`` and ``b`` passes their views to BLAS as they lie: float64
    matrices (``matmul_into`` and ``matmul_acc`` check the strides at run time)."""
    return len(a.shape) == len(b.shape) == 2 and a.dtype == b.dtype == np.float64


def _blas_operand(low, e, ind):
    """A view for ``matmul_into`` or ``matmul_acc`` as it lies (they check its strides, and copy a
    layout BLAS cannot walk); any other expression materialised."""
    return low.view_src(e.ref) if isinstance(e, Read) else _operand_array(low, e, ind)


def _lower_matmul_tn_flat(low, s, ind):
    a, g = s.inputs
    c = s.outputs[0]
    if _blas_views(a, g) and c.dtype == np.float64 and \
            not any(r.ref.container is c for e in (a, g) for r in iter_reads(e)):
        _out(low, s, ind)
        va, vg = _blas_operand(low, a, ind), _blas_operand(low, g, ind)
        low.line(f"_rt.matmul_into({va}.T, {vg}, {c.name})", ind)
        return
    sa, sg = _operand_array(low, a, ind), _operand_array(low, g, ind)
    product = (f"np.ascontiguousarray({sa}).reshape(-1, {low.src(a.shape[-1])}).T, "
               f"np.ascontiguousarray({sg}).reshape(-1, {low.src(g.shape[-1])})")
    if c.name in low.allocated_at_start:
        low.line(f"np.dot({product}, {c.name})", ind)      # into the buffer: no fresh result array
    else:
        low.line(f"{c.name} = np.dot({product})", ind)


def lower_product_sum(low, s, dst, ind):
    """``dst += a @ b`` for a ``matmul`` of two matrices, or ``dst += a.T @ g`` for a
    ``matmul_tn_flat`` call, whose product is only added to ``dst`` (a view with contiguous rows):
    one BLAS call adding to ``dst``."""
    a, b = s.inputs
    if s.op == "matmul_tn_flat" and not _blas_views(a, b):       # a batch: its rows flattened
        sa, sb = _operand_array(low, a, ind), _operand_array(low, b, ind)
        sa = f"np.ascontiguousarray({sa}).reshape(-1, {low.src(a.shape[-1])}).T"
        sb = f"np.ascontiguousarray({sb}).reshape(-1, {low.src(b.shape[-1])})"
    else:
        # views as they are: BLAS reads one with contiguous rows or columns through its leading
        # dimension (``matmul_acc`` checks the strides, and copies any other)
        sa, sb = _blas_operand(low, a, ind), _blas_operand(low, b, ind)
        if s.op == "matmul_tn_flat":
            sa = f"{sa}.T"
    low.line(f"_rt.matmul_acc({sa}, {sb}, {low.view_src(dst)})", ind)


def _lower_matmul(low, s, ind):
    a, b = s.inputs
    c = s.outputs[0]
    if min(len(a.shape), len(b.shape)) == 1 and max(len(a.shape), len(b.shape)) <= 2 and \
            not all(isinstance(e, Read) and e.ref.is_whole() for e in (a, b)):
        _out(low, s, ind)
        _lower_matvec(low, a, b, c, ind)
        return
    sa, sb = _operand_array(low, a, ind), _operand_array(low, b, ind)
    if len(a.shape) > 2 and len(b.shape) == 2:
        # (..., n, k) @ (k, m): one GEMM over the flattened leading axes
        low.line(f"{c.name} = np.dot(np.ascontiguousarray({sa}).reshape(-1, {low.src(a.shape[-1])}), "
                 f"np.ascontiguousarray({sb})).reshape({low.shape_tuple(c.shape)})", ind)
        return
    if is_gram(a, b) and c.dtype == np.float64:
        if c.name in low.allocated_at_start:                  # its buffer stays the one it names
            low.line(f"{c.name}[:, :] = _rt.linalg.gram({sb})", ind)
        else:
            low.line(f"{c.name} = _rt.linalg.gram({sb})", ind)
        return
    if _blas_views(a, b) and c.dtype == np.float64 and \
            not any(r.ref.container is c for e in (a, b) for r in iter_reads(e)):
        # views as they are: BLAS reads one with contiguous rows or columns through its leading
        # dimension (``matmul_into`` checks the strides, and copies any other)
        _out(low, s, ind)
        va, vb = (low.view_src(e.ref) if isinstance(e, Read) else src for e, src in ((a, sa), (b, sb)))
        low.line(f"_rt.matmul_into({va}, {vb}, {c.name})", ind)
        return
    if len(a.shape) <= 2 and len(b.shape) <= 2:
        if c.ndim == 0:
            low.line(f"{c.name} = {_scalar_type(c.dtype)}(np.dot({sa}, {sb}))", ind)
        elif len(a.shape) == 2 and len(b.shape) == 2 and c.name in low.allocated_at_start:
            low.line(f"np.dot({sa}, {sb}, {c.name})", ind)      # into the buffer: no fresh result array
        else:
            low.line(f"{c.name} = np.dot({sa}, {sb})", ind)
        return
    _out(low, s, ind)
    # batched: each operand's view is indexed by the batch element first and only that matrix is
    # made contiguous (a whole-operand copy per batch element would cost batch-size times more)
    def batched(e):
        return len(e.shape) - (2 if len(e.shape) > 1 else 1) > 0

    srcs = []
    for e, src in ((a, sa), (b, sb)):
        if batched(e):
            srcs.append(low.view_src(e.ref) if isinstance(e, Read) else src)
        else:
            srcs.append(low.fresh("opnd"))
            low.line(f"{srcs[-1]} = {src}", ind)
    sa, sb = srcs
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
    def matrix(src, e):
        """One batch element's matrix: a whole container's (transposed or not) is used where it
        lies, C or Fortran order both suit BLAS; other views are copied contiguous."""
        if isinstance(e, Read) and len(e.shape) > 2 and same_ref(Ref(e.ref.container, e.ref.items),
                                                                Ref(e.ref.container)):
            nd = len(e.shape)
            if e.ref.perm is None:
                return pick(e.ref.container.name, e)
            if e.ref.perm == tuple(range(nd - 2)) + (nd - 1, nd - 2):
                return pick(e.ref.container.name, e) + ".T"
        return f"np.ascontiguousarray({pick(src, e)})"
    out = f"{c.name}[{', '.join(names)}]"
    if len(a.shape) > 1 and len(b.shape) > 1:
        low.line(f"np.dot({matrix(sa, a)}, {matrix(sb, b)}, {out})", inner)
    else:
        low.line(f"{out} = np.dot({matrix(sa, a)}, {matrix(sb, b)})", inner)


_JAM = 4       # rows of ``v @ M`` per pass over the result


def _lower_matvec(low, a, b, c, ind):
    """A product with a vector operand, as loops reading the operands where they are: BLAS would
    need a contiguous copy of a strided view, which costs as much as the product itself (one
    pass over the matrix either way). A transposed matrix times a vector (``B[:k, :].T @ x``) is
    ``x @ B[:k, :]``: its rows are added, not its strided columns summed."""
    if len(a.shape) == 2 and len(b.shape) == 1 and isinstance(a, Read) and a.ref.perm == (1, 0):
        a, b = b, Read(Ref(a.ref.container, a.ref.items))
    if len(a.shape) == 1 and len(b.shape) == 2:
        # v @ M: rows of M scaled and added, the inner loop along M's rows, four rows per pass
        # (each element of the result is loaded and stored once per four rows, not per row)
        names, inner = low.nest(c.shape, ind, "z")
        low.line(f"{c.name}[{names[0]}] = 0.0", inner)
        rows, cols = low.src(b.shape[0]), low.src(b.shape[1])
        r, z, whole = low.fresh("r"), low.fresh("z"), low.fresh("n4")
        low.line(f"{whole} = {rows} - {rows} % {_JAM}", ind)
        low.line(f"for {r} in range(0, {whole}, {_JAM}):", ind)
        at = [r] + [f"({r} + {k})" for k in range(1, _JAM)]
        scale = [low.fresh("v") for _ in at]
        for v, row in zip(scale, at):
            low.line(f"{v} = {low.elem(a, [row], a.shape)}", ind + 1)
        low.line(f"for {z} in range({cols}):", ind + 1)
        terms = " + ".join(f"{v} * {low.elem(b, [row, z], b.shape)}" for v, row in zip(scale, at))
        low.line(f"{c.name}[{z}] += {terms}", ind + 2)
        low.line(f"for {r} in range({whole}, {rows}):", ind)
        low.line(f"for {z} in range({cols}):", ind + 1)
        low.line(f"{c.name}[{z}] += {low.elem(a, [r], a.shape)} * {low.elem(b, [r, z], b.shape)}", ind + 2)
        return
    if c.ndim == 0:
        run = _accumulate(low, op("multiply", a, b), a.shape, None, "{a} + {b}", "0.0", ind)
        low.line(f"{c.name} = {_scalar_type(c.dtype)}({run})", ind)
        return
    # M @ v: one dot product per row
    names, inner = low.nest(c.shape, ind, "z")
    low.line(f"{c.name}[{names[0]}] = 0.0", inner)
    _accumulate(low, op("multiply", a, b), a.shape, lambda names: f"{c.name}[{names[0]}]", "{a} + {b}",
                "0.0", ind, reduced={1})


def _lower_solve(low, s, ind):
    a, b = s.inputs
    c = s.outputs[0]
    # Numba's LAPACK results are in Fortran order; containers are kept in C order (flat views)
    low.line(f"{c.name} = np.ascontiguousarray(np.linalg.solve({_operand_array(low, a, ind)}, "
             f"{_operand_array(low, b, ind)}))", ind)


def _lower_linalg(low, s, ind):
    """det, slogdet, cholesky: Numba's LAPACK wrappers (their matrices come back in Fortran order)."""
    a = _operand_array(low, s.inputs[0], ind)
    if s.op == "det":
        low.line(f"{s.outputs[0].name} = np.linalg.det(np.ascontiguousarray({a}))", ind)
    elif s.op == "slogdet":
        low.line(f"{s.outputs[0].name}, {s.outputs[1].name} = np.linalg.slogdet(np.ascontiguousarray({a}))", ind)
    else:
        low.line(f"{s.outputs[0].name} = np.ascontiguousarray(np.linalg.cholesky(np.ascontiguousarray({a})))", ind)


def _lower_lu_factor(low, s, ind):
    for c in s.outputs:
        _out(low, Call(s.op, s.inputs, [c]), ind)
    lu, piv = s.outputs
    low.line(f"_rt.lu_factor_into({_operand_array(low, s.inputs[0], ind)}, {lu.name}, {piv.name})", ind)


def _lower_lu_solve(low, s, ind):
    lu, piv, b = s.inputs
    c = _out(low, s, ind)
    low.line(f"_rt.lu_solve_into({low.view_src(lu.ref)}, {low.view_src(piv.ref)}, "
             f"{_operand_array(low, b, ind)}, {c.name}, {s.attrs.get('trans', 0)})", ind)


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
    if c.ndim:
        names, inner = low.nest(c.shape, ind, "z")
        low.line(f"{c.name}[{', '.join(names)}] = 0", inner)
    else:                         # the adjoint of a 0-d operand (``np.einsum('i,->i', x, s)``)
        low.line(f"{c.name} = 0.0", ind)
    ins, out = spec.split("->")
    terms = ins.split(",")
    full = ",".join(terms + [out]) + "->" + out

    def body(name, _terms, _out, inner):
        factors = [_operand_elem(low, g, out, name)] if out else [low.src(g)]
        factors += [_operand_elem(low, o, t, name) for j, (o, t) in enumerate(zip(ops, terms)) if j != k]
        target = f"{c.name}[{', '.join(name[ch] for ch in terms[k])}]" if c.ndim else c.name
        low.line(f"{target} += {' * '.join(factors)}", inner)
    _einsum_loops(low, full, ops + [g], body, ind)


def _lower_argsort(low, s, ind):
    c = _out(low, s, ind)
    low.line(f"_rt.argsort_last({low.view_src(s.inputs[0].ref)}, {c.name})", ind)


def _lower_searchsorted(low, s, ind):
    c = _out(low, s, ind)
    a, v = (low.view_src(e.ref) for e in s.inputs)
    low.line(f"_rt.searchsorted_into({a}, {v}, {c.name}, {s.attrs['side'] == 'right'})", ind)


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
            src_idx.append(low.wrap(low.elem(arr, adv_names, bshape), low.src(src_shape[k])))
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


def _indexable(low, e, ind):
    """A name to index the array ``e`` reads by its own positions: the container's, or a view
    of it (passes may hand a gather a view where the frontend gave it a whole array)."""
    if e.ref.is_whole():
        return e.ref.container.name
    name = low.fresh("src")
    low.line(f"{name} = {low.view_src(e.ref)}", ind)
    return name


def _lower_gather(low, s, ind):
    x, *arrays = s.inputs
    c = _out(low, s, ind)
    src = _indexable(low, x, ind)
    names, src_idx, inner = _advanced(low, s, x.shape, arrays, ind)
    target = f"{c.name}[{', '.join(names)}]" if c.ndim else c.name
    low.line(f"{target} = {src}[{', '.join(src_idx)}]", inner)


def _apart_from(low, v, y, ind):
    """Value ``v`` of a scatter into ``y``, copied first where it reads ``y``: NumPy evaluates
    the right side of ``y[i] = y[j]`` (and the values of ``np.add.at(y, i, y[i])``) before it
    writes any element."""
    if any(r.ref.container is y for r in iter_reads(v)):
        return low.materialise(v, ind)
    return v


def _lower_scatter(low, s, ind, accumulate=False):
    v, *arrays = s.inputs
    y = s.outputs[0]
    v = _apart_from(low, v, y, ind)
    names, src_idx, inner = _advanced(low, s, y.shape, arrays, ind)
    shape = s.attrs["value_shape"]
    value = low.elem(v, names, shape)
    low.line(f"{y.name}[{', '.join(src_idx)}] {'+=' if accumulate else '='} {value}", inner)


def _lower_add_at(low, s, ind):
    _lower_scatter(low, s, ind, accumulate=True)


def _lower_gather_last(low, s, ind):
    g, *arrays = s.inputs
    c = _out(low, s, ind)
    src = _indexable(low, g, ind)
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
    low.line(f"{target} = {src}[{', '.join(src_idx)}] if {probe}[{', '.join(src_idx)}] == "
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
            v = _apart_from(low, v, y, ind)
        k = low.fresh("k")
        # NumPy's error when the mask picks another number of elements than there are values
        counted = kind != "gather" and v.shape != ()
        n = low.src(v.shape[0]) if counted else None
        message = "'NumPy boolean array indexing assignment cannot assign {} input values to the {} output " \
                  "values where the mask is true'"
        low.line(f"{k} = 0", ind)
        names, inner = low.nest(shape, ind)
        low.line(f"if {low.elem(m, names, shape)}:", inner)
        if counted:
            low.line(f"if {k} >= {n}:", inner + 1)
            low.line(f"raise ValueError({message[:-1]} (or more)', {n}, {k} + 1)", inner + 2)
        if kind == "gather":
            low.line(f"{c.name}[{k}] = {low.elem(x, names, shape)}", inner + 1)
        else:
            value = low.src(v) if v.shape == () else low.elem(v, [k], v.shape)
            op = "+=" if kind == "add" else "="
            low.line(f"{y.name}[{', '.join(names)}] {op} {value}", inner + 1)
        low.line(f"{k} += 1", inner + 1)
        if counted:
            low.line(f"if {k} != {n}:", ind)
            low.line(f"raise ValueError({message}, {n}, {k})", ind + 1)
    return lower


def _lower_sum_to(low, s, ind):
    """Sum the input, broadcast over the ``full`` iteration space, down to the output's shape."""
    c = s.outputs[0]
    full = s.attrs["full"]
    x = low.hoist(s.inputs[0], full, ind)
    if c.ndim == 0:
        [(_, x)], space = low.collapse([(None, x)], full, ind)
        run = _accumulate(low, x, space, None, "{a} + {b}", "0.0", ind)
        low.line(f"{c.name} = {run}", ind)
        return
    _out(low, s, ind)
    names, inner = low.nest(c.shape, ind, "z")
    low.line(f"{c.name}[{', '.join(names)}] = 0.0", inner)
    lead = len(full) - c.ndim
    kept = {lead + k for k in range(c.ndim)
            if not (const_value(c.shape[k]) == 1 and const_value(full[lead + k]) != 1)}

    def target(names):
        return f"{c.name}[{', '.join(names[lead + k] if lead + k in kept else '0' for k in range(c.ndim))}]"
    _accumulate(low, x, full, target, "{a} + {b}", "0.0", ind,
                reduced={k for k in range(len(full)) if k not in kept})


def _lower_bincount(low, s, ind):
    """A pass over ``x`` adding each weight (or 1) into its bin, as NumPy refusing negative values."""
    x, weights = s.inputs[0], s.inputs[1:]
    c = _out(low, s, ind)
    names, inner = low.nest(c.shape, ind, "z")
    low.line(f"{c.name}[{names[0]}] = 0", inner)
    names, inner = low.nest(x.shape, ind)
    at = low.fresh("bin")
    low.line(f"{at} = {low.elem(x, names, x.shape)}", inner)
    low.line(f"if {at} < 0:", inner)
    low.line("raise ValueError(\"'list' argument must have no negative elements\")", inner + 1)
    low.line(f"{c.name}[{at}] += {low.elem(weights[0], names, x.shape) if weights else '1'}", inner)


def _lower_trip_count(low, s, ind):
    start, stop, step = (low.src(e) for e in s.inputs)
    low.line(f"{s.outputs[0].name} = _rt.trip_count({start}, {stop}, {step})", ind)


def _lower_ckpt_slots(low, s, ind):
    kind, trips, param = (low.src(e) for e in s.inputs)
    low.line(f"{s.outputs[0].name} = _rt.ckpt_slots({kind}, {trips}, {param})", ind)


def _lower_ckpt_schedule(low, s, ind):
    """The schedule is built in Python (object mode), once per execution of the loop."""
    kind, trips, param = (low.src(e) for e in s.inputs)
    sched, rows, nf, at = s.outputs
    low.line(f"with numba.objmode({sched.name}='int64[:, :]', {nf.name}='int64', {at.name}='int64'):", ind)
    low.line(f"{sched.name}, _, {nf.name}, {at.name} = _ckpt.schedule_rows({kind}, {trips}, {param})", ind + 1)
    low.line(f"{rows.name} = {sched.name}.shape[0]", ind)


def _lower_ckpt_rows(low, s, ind):
    """Rows built in Python (object mode) as the backward sweep reaches them: one segment's of an
    online schedule (``ckpt_segment``), or a whole schedule's (``ckpt_rows``)."""
    args = ", ".join(low.src(e) for e in s.inputs)
    sched, rows = s.outputs
    fn = {"ckpt_segment": "segment_rows", "ckpt_rows": "all_rows"}[s.op]
    low.line(f"with numba.objmode({sched.name}='int64[:, :]'):", ind)
    low.line(f"{sched.name}, _ = _ckpt.{fn}({args})", ind + 1)
    low.line(f"{rows.name} = {sched.name}.shape[0]", ind)


def _lower_check_sizes(low, s, ind):
    """``passes.checks``: the message goes with the sizes; ``Kernel`` fills them in."""
    sizes = [low.src(e) for e in s.inputs]
    differ = " or ".join(f"{a} != {b}" for a, b in zip(sizes[::2], sizes[1::2]))
    low.line(f"if {differ}:", ind)
    low.line(f"raise ValueError({s.attrs['message']!r}, {', '.join(sizes)})", ind + 1)
    low.line(f"{s.outputs[0].name} = True", ind)


def _lower_check_index(low, s, ind):
    """Indices checked ahead of their loop (``Facts.hoist_check``): ``_rt.wrap`` raises."""
    xs = [low.src(e) for e in s.inputs]
    for k in range(0, len(xs), 3):
        for i in xs[k:k + 2]:
            low.line(low.wrap(i, xs[k + 2]), ind)
    low.line(f"{s.outputs[0].name} = True", ind)


# the core family's lowerings; ``flowgrad.registry`` composes every family into ``CALL_LOWERING``
CORE_LOWERING = {
    "check_index": _lower_check_index, "check_sizes": _lower_check_sizes, "trip_count": _lower_trip_count, "ckpt_slots": _lower_ckpt_slots, "ckpt_schedule": _lower_ckpt_schedule,
    "ckpt_segment": _lower_ckpt_rows, "ckpt_rows": _lower_ckpt_rows,
    "sum": _lower_reduction, "prod": _lower_reduction, "max": _lower_reduction, "min": _lower_reduction,
    "argmax": _lower_argext, "argmin": _lower_argext, "matmul": _lower_matmul, "solve": _lower_solve,
    "matmul_tn_flat": _lower_matmul_tn_flat, "lu_factor": _lower_lu_factor, "lu_solve": _lower_lu_solve,
    "reshape": _lower_reshape, "cumsum": _lower_cumsum, "triu": _lower_tri, "tril": _lower_tri,
    "einsum": _lower_einsum, "einsum_vjp": _lower_einsum_vjp, "eye": _lower_eye, "arange": _lower_arange,
    "argsort": _lower_argsort, "searchsorted": _lower_searchsorted, "det": _lower_linalg,
    "slogdet": _lower_linalg, "cholesky": _lower_linalg,
    "gather": _lower_gather, "gather_last": _lower_gather_last, "add_at": _lower_add_at,
    "scatter": _lower_scatter, "mask_gather": _lower_mask("gather"), "mask_scatter": _lower_mask("scatter"),
    "mask_add": _lower_mask("add"), "sum_to": _lower_sum_to, "bincount": _lower_bincount,
}

# every family's lowerings, composed by ``flowgrad.registry`` (the one place that writes it)
CALL_LOWERING = dict(CORE_LOWERING)
