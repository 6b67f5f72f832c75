"""The derivative-rule table: one entry per primitive, next to its forward semantics and cost.

Elementwise primitives are declared in ``ir.elements`` with their partial derivatives as IR
expressions (tangent and adjoint code both follow from them); this module presents them as the
tables the differentiation reads. Non-elementwise ``Call`` operations give their forward
semantics (a NumPy expression for the reference backend), their cost, their adjoint (vjp) and their
tangent (jvp). ``coverage()`` lists what the tables know.
"""
from __future__ import annotations

import numpy as np

from ..ir.core import ELEMENTWISE, Assign, Call, Const, Container, NewAxis, Read, Ref, Slice, map_blocks, op, same_ref
from ..ir.elements import ELEMENTS

# ------------------------------------------------------------- elementwise partials
# Each: (g, out, *args) -> one adjoint expression per operand (None: no derivative). The elementwise primitives' rules are declared with them (``ir.elements``); these are views.
PARTIALS = {n: e.partials for n, e in ELEMENTS.items() if e.partials is not None}
# Piecewise-constant or boolean results: derivative zero almost everywhere, so no adjoint flows.
ZERO_DERIVATIVE = frozenset(n for n, e in ELEMENTS.items() if e.zero)
# Elementwise primitives that need no partials, and why: ``missing_rules`` (and its test) holds
# every other one to having them.
NO_PARTIALS = {n: e.exempt for n, e in ELEMENTS.items() if e.exempt}
# FLOPs per element; transcendental functions count as several.
ELEMENTWISE_FLOPS = {n: e.flops for n, e in ELEMENTS.items()}


# ------------------------------------------------------------- non-elementwise operations


class CallRule:
    """A Call op: NumPy forward semantics, cost in FLOPs, its adjoint and its tangent.

    numpy(ins, attrs) -> source of a NumPy expression producing a fresh array (or tuple).
    vjp(ctx, call, gouts) -> statements accumulating into the inputs' adjoints.
    jvp(ctx, call, touts) -> statements writing the outputs' tangents ``touts`` (None: an output
    without one) from ``ctx.tangent(input)`` (None: an input without one); see ``autodiff.forward``.
    inplace: outputs[0] is also read and updated (not overwritten wholesale).
    complex: it takes complex operands (on both backends, its vjp in JAX's convention); a call of
    another op on complex values is refused (``passes.complex_calls``).
    exempt: why the op needs neither tangent nor adjoint (integer results, run-time checks,
    bookkeeping created after differentiation); empty for a differentiable op.
    adjoint_of: for a call that is another op's adjoint (it appears only in gradient programs), that
    op: it needs a tangent (forward over reverse: ``hvp``, ``hessian``); an adjoint of its own, where
    it has one, serves reverse over reverse (``grad`` of a function calling ``grad``), else that is
    refused by name.
    expand(call) -> statements: for a call standing for statements of its own (a fixed point's
    iteration, ``flowgrad.implicit``), which differentiation takes as one operation with its own
    rules; after differentiation the pipelines put the statements in its place (``passes.expand``),
    so no backend lowers the call itself.
    formula(ctx, call) -> statements: for an adjoint call a faster routine computes, its value in
    primitives (writing ``call.outputs``), which reverse mode differentiates in its place
    (``expand_formulas``: reverse over reverse) where the call has no adjoint of its own.
    """

    def __init__(self, numpy, vjp=None, flops=None, inplace=False, doc="", complex=False, jvp=None, exempt="",
                 adjoint_of=None, expand=None, formula=None):
        self.numpy, self.vjp, self.inplace, self.doc, self.complex = numpy, vjp, inplace, doc, complex
        self.jvp, self.exempt, self.adjoint_of, self.expand, self.formula = jvp, exempt, adjoint_of, expand, formula
        self.flops = flops or (lambda call, size: size(call.outputs[0].shape))


def _axes_items(ndim, axes):
    """Ref items re-inserting reduced axes as NewAxis, for broadcasting a reduction's adjoint."""
    return [NewAxis() if k in axes else None for k in range(ndim)]


def _expand(ref_container, in_ndim, axes, keepdims):
    """A Read of a reduction's output (or adjoint) broadcastable against its input."""
    if keepdims or not axes:
        return Read(Ref(ref_container))
    items, it = [], iter(Ref(ref_container).items)
    for k in range(in_ndim):
        items.append(NewAxis() if k in axes else next(it))
    return Read(Ref(ref_container, items))


def _vjp_sum(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    axes, keep = call.attrs["axis"], call.attrs["keepdims"]
    axes = tuple(range(len(x.shape))) if axes is None else axes
    return ctx.accumulate(x, _expand(g, len(x.shape), axes, keep))


def _prod_others(ctx, call):
    """(statements, expression): the partial of a product by each factor, the product of the
    others: of the non-zero factors ``p`` over it when no factor is zero, ``p`` for the one zero
    factor when there is exactly one, else zero (``prod / x`` would be 0 / 0 at a zero)."""
    (x,) = call.inputs
    axes, keep = call.attrs["axis"], call.attrs["keepdims"]
    axes = tuple(range(len(x.shape))) if axes is None else axes
    zero = op("equal", x, 0.0)
    nonzero = op("where", zero, 1.0, x)
    p = ctx.temp(call.outputs[0].shape, call.outputs[0].dtype, "prod_nonzero")
    zeros = ctx.temp(call.outputs[0].shape, np.float64, "zeros")
    stmts = [Call("prod", [nonzero], [p], dict(call.attrs)),
             Call("sum", [op("float64", zero)], [zeros], dict(call.attrs))]
    p, zeros = _expand(p, len(x.shape), axes, keep), _expand(zeros, len(x.shape), axes, keep)
    return stmts, op("where", zero, op("where", op("equal", zeros, 1.0), p, 0.0),
                     op("where", op("equal", zeros, 0.0), p / nonzero, 0.0))


def _vjp_prod(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    axes, keep = call.attrs["axis"], call.attrs["keepdims"]
    axes = tuple(range(len(x.shape))) if axes is None else axes
    stmts, others = _prod_others(ctx, call)
    return stmts + ctx.accumulate(x, _expand(g, len(x.shape), axes, keep) * others)


def _vjp_extreme(ctx, call, gouts):
    """max/min: the adjoint is shared equally among the positions that attain the extreme."""
    (x,), (g,) = call.inputs, gouts
    axes, keep = call.attrs["axis"], call.attrs["keepdims"]
    axes = tuple(range(len(x.shape))) if axes is None else axes
    hit = op("float64", op("equal", x, _expand(call.outputs[0], len(x.shape), axes, keep)))
    count = ctx.temp(call.outputs[0].shape, np.float64, "count")
    stmts = [Call("sum", [hit], [count], {"axis": call.attrs["axis"], "keepdims": keep})]
    share = _expand(g, len(x.shape), axes, keep) / _expand(count, len(x.shape), axes, keep)
    return stmts + ctx.accumulate(x, hit * share)


def _swap_last(r):
    """The Read ``r`` with its last two axes swapped (a view, no copy)."""
    n = len(r.shape)
    perm = list(range(n))
    perm[-2], perm[-1] = perm[-1], perm[-2]
    base = r.ref.perm or tuple(range(n))
    return Read(Ref(r.ref.container, r.ref.items, tuple(base[p] for p in perm)))


def _untransposed(r):
    """The view a matrix operand read transposed (``B[:k, :].T``) reads, untransposed; else None.
    Its adjoint is computed transposed and added in the view's own layout, row by row (or by
    BLAS adding into it), where the operand's adjoint would be added through strided columns."""
    if isinstance(r, Read) and len(r.shape) == 2 and r.ref.perm == (1, 0) and \
            not any(isinstance(it, NewAxis) for it in r.ref.items):
        return Read(Ref(r.ref.container, r.ref.items))
    return None


def _plain_vector(r):
    """Whether ``r`` reads a vector view as it lies (no new axis, no permutation)."""
    return isinstance(r, Read) and len(r.shape) == 1 and r.ref.perm is None and \
        not any(isinstance(it, NewAxis) for it in r.ref.items)


def is_gram(a, b):
    """Whether ``a @ b`` is a real Gram matrix: ``a`` is the transpose of the matrix ``b`` reads."""
    if not (isinstance(a, Read) and isinstance(b, Read) and len(a.shape) == len(b.shape) == 2):
        return False
    if a.dtype.kind != "f" or a.ref.container is not b.ref.container or {a.ref.perm, b.ref.perm} != {None, (1, 0)}:
        return False
    return same_ref(Ref(a.ref.container, a.ref.items), Ref(b.ref.container, b.ref.items))


def _vjp_matmul(ctx, call, gouts):
    (a, b), (g,) = call.inputs, gouts
    ga, gb = Read(Ref(g)), Read(Ref(g))
    stmts = []
    na, nb = len(a.shape), len(b.shape)
    if is_gram(a, b) and ctx.active(b):
        # c = b.T @ b: b's adjoint b @ (g + g.T), one product where the two operands' would be two;
        # for c = a @ a.T, a's adjoint (g + g.T) @ a, written in a's own layout (the same values)
        both = ctx.temp(g.shape, g.dtype, "gsym")
        if a.ref.perm is None:
            return [Assign(Ref(both), ga + _swap_last(gb))] + ctx.via_temp(a, "matmul", [Read(Ref(both)), a])
        return [Assign(Ref(both), ga + _swap_last(gb))] + ctx.via_temp(b, "matmul", [b, Read(Ref(both))])
    if na == 1 and nb == 1:
        return ctx.accumulate(a, ga * b) + ctx.accumulate(b, gb * a)
    # a whole matrix read transposed times a vector (mvt's A.T @ y2): the adjoints go in the
    # matrix's own layout, so that the native lowering runs them in one pass over A and g_A with
    # the adjoints of the other products of A (mvt's gradient 7.4 -> 5.8 ms). Not a part of a
    # matrix in a loop (symm's B[b:i, :].T @ a): its transposed write already runs row by row,
    # and a rank-one update in the own layout is stacked into products (``outer``), which ran
    # slower there (0.27 -> 0.31 ms)
    untransposed = _untransposed(a)
    column_major = nb == 1 and _plain_vector(b) and untransposed is not None and untransposed.ref.is_whole()
    if ctx.active(a):
        if column_major:  # a matrix read transposed: ga.T = b[:, None] * g[None, :], in its own layout
            contrib = Read(Ref(b.ref.container, list(b.ref.items) + [NewAxis()])) * \
                Read(Ref(g, [NewAxis()] + list(Ref(g).items)))
            stmts += ctx.accumulate(untransposed, contrib)
        elif nb == 1:     # (..., n, k) @ (k,) -> (..., n): ga = g[..., None] * b
            contrib = Read(Ref(g, list(Ref(g).items) + [NewAxis()])) * b
            stmts += ctx.accumulate(a, contrib)
        elif na == 1 and nb == 2:     # (k,) @ (k, m) -> (m,): ga = b @ g
            stmts += ctx.via_temp(a, "matmul", [b, ga], shape=a.shape)
        elif na == 1:     # (k,) @ (..., k, m) -> (..., m): ga = sum over the batch of b @ g per matrix
            items = list(Ref(g).items)
            per = ctx.temp(g.shape[:-1] + a.shape, a.dtype, "gvec")
            stmts.append(Call("sum", [b * Read(Ref(g, items[:-1] + [NewAxis()] + items[-1:]))], [per],
                              {"axis": (nb - 1,), "keepdims": False}))
            stmts += ctx.accumulate(a, Read(Ref(per)))
        elif na == nb == 2 and untransposed is not None:
            # a matrix read transposed: its adjoint (g @ b.T).T = b @ g.T, in its own layout
            stmts += ctx.via_temp(untransposed, "matmul", [b, _swap_last(ga)], shape=a.shape[::-1])
        else:
            stmts += ctx.via_temp(a, "matmul", [ga, _swap_last(b)], shape=g.shape[:-2] + a.shape[-2:])
    if ctx.active(b):
        if na == 1:       # (k,) @ (..., k, m): gb = a[:, None] * g[..., None, :]
            items = list(Ref(g).items)
            gexp = Read(Ref(g, items[:-1] + [NewAxis()] + items[-1:]))
            aexp = Read(Ref(a.ref.container, list(a.ref.items) + [NewAxis()], None)) if a.ref.perm is None \
                else None
            if aexp is None:
                raise NotImplementedError("matmul adjoint of a permuted vector")
            stmts += ctx.accumulate(b, aexp * gexp)
        elif column_major:  # the rows of the matrix a reads transposed, each times g: one pass in its layout
            per = ctx.temp(b.shape, b.dtype, "gvec")
            stmts.append(Call("sum", [untransposed * Read(Ref(g, [NewAxis()] + list(Ref(g).items)))], [per],
                              {"axis": (1,), "keepdims": False}))
            stmts += ctx.accumulate(b, Read(Ref(per)))
        elif nb == 1:     # (..., n, k) @ (k,): gb = sum over batch and n of a * g[..., None]
            contrib = a * Read(Ref(g, list(Ref(g).items) + [NewAxis()]))
            stmts += ctx.accumulate(b, contrib)
        elif na == nb == 2 and _untransposed(b) is not None:
            # read transposed: (a.T @ g).T = g.T @ a, in its own layout
            stmts += ctx.via_temp(_untransposed(b), "matmul", [_swap_last(gb), a], shape=b.shape[::-1])
        elif nb == 2:     # (..., n, k) @ (k, m): gb = a.reshape(-1, k).T @ g.reshape(-1, m), one GEMM
            stmts += ctx.via_temp(b, "matmul_tn_flat", [a, gb], shape=b.shape)
        else:
            stmts += ctx.via_temp(b, "matmul", [_swap_last(a), gb], shape=g.shape[:-2] + b.shape[-2:])
    return stmts


def _vjp_matmul_tn_flat(ctx, call, gouts):
    """t = a.reshape(-1, k).T @ g.reshape(-1, m) (the adjoint of matmul's right operand): a's
    adjoint is g @ t's adjoint transposed, g's is a @ t's adjoint, every row of the batch at once."""
    (a, g), (gt,) = call.inputs, gouts
    tb = Read(Ref(gt))
    return ctx.via_temp(a, "matmul", [g, _swap_last(tb)], shape=a.shape) + \
        ctx.via_temp(g, "matmul", [a, tb], shape=g.shape)


def _vjp_solve(ctx, call, gouts):
    (a, b), (g,) = call.inputs, gouts
    x = call.outputs[0]
    gb = ctx.temp(x.shape, x.dtype, "gsolve")
    stmts = [Call("solve", [_swap_last(a), Read(Ref(g))], [gb])]
    stmts += ctx.accumulate(b, Read(Ref(gb)))
    if ctx.active(a):
        if len(b.shape) == 1:
            items = list(Ref(gb).items)
            contrib = -(Read(Ref(gb, items + [NewAxis()])) * Read(Ref(x, [NewAxis()] + list(Ref(x).items))))
            stmts += ctx.accumulate(a, contrib)
        else:
            xt = _swap_last(Read(Ref(x)))
            stmts += ctx.via_temp(a, "matmul", [Read(Ref(gb)), xt], scale=-1.0)
    return stmts


def _identity(ctx, a):
    """(a statement making an identity matrix the size of square ``a``, a Read of it)."""
    n = a.shape[-1]
    e = ctx.temp((n, n), np.float64, "eye")
    return Call("eye", [], [e], {"n": n, "m": n, "k": 0}), Read(Ref(e))


def _inverse_transpose(ctx, a, scale):
    """``adjoint(a) += scale * inv(a).T``, the adjoint of det (``scale``: g * det) and of
    slogdet's log |det| (``scale``: g)."""
    make, eye = _identity(ctx, a)
    return [make] + ctx.via_temp(a, "solve", [_swap_last(a), eye], scale=scale)


def _vjp_det(ctx, call, gouts):
    (a,), (g,) = call.inputs, gouts
    return _inverse_transpose(ctx, a, Read(Ref(g, ())) * Read(Ref(call.outputs[0], ())))


def _vjp_slogdet(ctx, call, gouts):
    (a,), (_, g) = call.inputs, gouts        # the sign is piecewise constant
    return [] if g is None else _inverse_transpose(ctx, a, Read(Ref(g, ())))


def cholesky_adjoint(ctx, lt, g):
    """``(statements, value)``: the adjoint the lower triangle of ``A`` receives from ``L =
    cholesky(A)`` (``lt`` and ``g``: Reads of L and its adjoint), in primitives. With ``P =
    Phi(L^T gL)`` (the lower triangle, diagonal halved) and ``S = L^-T P L^-1``, the symmetric
    adjoint is ``(S + S^T) / 2``; the lower triangle stands for both halves, so it gets ``S + S^T``
    below the diagonal, ``S`` on it, and the upper triangle nothing (Murray, 2016,
    "Differentiation of the Cholesky decomposition")."""
    shape, dt = lt.shape, lt.dtype
    make, eye = _identity(ctx, lt)
    m, low, p, x, st, both, tri = (ctx.temp(shape, dt, h) for h in ("chm", "chl", "chp", "chx", "chs", "chb", "cht"))
    stmts = [make, Call("matmul", [_swap_last(lt), g], [m]),
             Call("tril", [Read(Ref(m))], [low], {"k": 0}),
             Assign(Ref(p), Read(Ref(low)) - 0.5 * Read(Ref(m)) * eye),
             _solve_upper(lt, Read(Ref(p)), x),
             _solve_upper(lt, _swap_last(Read(Ref(x))), st),                            # S^T
             Assign(Ref(both), Read(Ref(st)) + _swap_last(Read(Ref(st)))),
             Call("tril", [Read(Ref(both))], [tri], {"k": 0})]
    return stmts, Read(Ref(tri)) - Read(Ref(st)) * eye


def _vjp_cholesky(ctx, call, gouts):
    """The adjoint of cholesky (``cholesky_adjoint``); for one float64 matrix computed by the
    blocked reverse mode (``cholesky_vjp``, ``linalg_ops``), about a sixth of the formula's work."""
    (a,), (g,) = call.inputs, gouts
    lt = Read(Ref(call.outputs[0]))
    if len(a.shape) == 2 and a.dtype == np.float64 and g.dtype == np.float64:
        return ctx.via_temp(a, "cholesky_vjp", [lt, Read(Ref(g))])
    stmts, value = cholesky_adjoint(ctx, lt, Read(Ref(g)))
    return stmts + ctx.accumulate(a, value)


def _solve_upper(lt, b, out):
    """``out = L^-T b`` for the Cholesky factor ``lt``: a triangular solve (BLAS trsm, half the work of
    factorising ``L^T`` again and solving), in float64; a general solve otherwise."""
    if lt.dtype == np.float64 and b.dtype == np.float64:
        return Call("solve_triangular", [lt, b], [out], {"lower": True, "trans": 1, "unit": False})
    return Call("solve", [_swap_last(lt), b], [out])


def _vjp_reshape(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    return ctx.via_temp(x, "reshape", [Read(Ref(g))], attrs={"shape": x.shape})


def _vjp_cumsum(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    axis = call.attrs["axis"]
    t = ctx.temp(g.shape, g.dtype, "gcum")
    flip = [Slice(d - 1, d, -1) if k == axis else Slice(0, d, 1) for k, d in enumerate(g.shape)]
    return [Call("cumsum", [Read(Ref(g, flip))], [t], {"axis": axis})] + \
        ctx.accumulate(x, Read(Ref(t, [Slice(d - 1, d, -1) if k == axis else Slice(0, d, 1)
                                        for k, d in enumerate(g.shape)])))


def _vjp_tri(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    return ctx.via_temp(x, call.op, [Read(Ref(g))], attrs=dict(call.attrs))


def _vjp_einsum(ctx, call, gouts):
    (g,), stmts = gouts, []
    for k, x in enumerate(call.inputs):
        if ctx.active(x):
            stmts += ctx.via_temp(x, "einsum_vjp", [Read(Ref(g))] + list(call.inputs),
                                  attrs={"subscripts": call.attrs["subscripts"], "k": k})
    return stmts


def _vjp_gather(ctx, call, gouts):
    x, *idx = call.inputs
    (g,) = gouts
    gx = ctx.grad_ref(x)
    if gx is None:
        return []
    if not x.ref.is_whole():
        raise NotImplementedError("gather from a view")
    attrs = dict(call.attrs, value_shape=call.outputs[0].shape)
    return [Call("add_at", [Read(Ref(g))] + idx, [gx.container], attrs)]


def _vjp_add_at(ctx, call, gouts):
    y = call.outputs[0]
    v, *idx = call.inputs
    t = ctx.temp(v.shape, y.dtype, "gidx")
    return [Call("gather", [Read(Ref(gouts[0]))] + idx, [t], dict(call.attrs))] + \
        ctx.accumulate(v, Read(Ref(t)))


def _vjp_scatter(ctx, call, gouts):
    """y[idx] = v: v's adjoint is y's at the positions it won (NumPy: the last write); those
    positions of y's adjoint are cleared before it is added to what v reads, which may be y
    itself (``y[idx] = y[::-1][:3]``)."""
    y = call.outputs[0]
    v, *idx = call.inputs
    gy = gouts[0]
    clear = Call("scatter", [Const(0.0)] + idx, [gy], dict(call.attrs))
    if not ctx.active(v):
        return [clear]
    t = ctx.temp(call.attrs["value_shape"], y.dtype, "gscat")
    return [Call("gather_last", [Read(Ref(gy))] + idx, [t], dict(call.attrs)), clear] + \
        ctx.accumulate(v, Read(Ref(t)))


def _vjp_gather_last(ctx, call, gouts):
    """t = g[idx] at the winning positions (the adjoint of ``y[idx] = v``): g's adjoint gets t's at
    those positions, which a scatter into zeros puts there (the last duplicate wins, as in t)."""
    g, *idx = call.inputs
    gg = ctx.grad_ref(g)
    if gg is None:
        return []
    if not g.ref.is_whole():
        raise NotImplementedError("gather_last from a view")
    t = ctx.temp(g.shape, gg.dtype, "gwin")
    return [Assign(Ref(t), Const(0.0)), Call("scatter", [Read(Ref(gouts[0]))] + idx, [t], dict(call.attrs))] + \
        ctx.accumulate(g, Read(Ref(t)))


def _vjp_mask_add(ctx, call, gouts):
    """y[m] += v: v's adjoint is y's at the mask; y's passes through."""
    v, m = call.inputs
    if not ctx.active(v):
        return []
    return ctx.via_temp(v, "mask_gather", [Read(Ref(gouts[0])), m], shape=v.shape)


def _vjp_mask_gather(ctx, call, gouts):
    x, m = call.inputs
    gx = ctx.grad_ref(x)
    if gx is None:
        return []
    if not x.ref.is_whole():            # its adjoint would be summed into the whole container
        raise NotImplementedError("mask_gather from a view")
    return [Call("mask_add", [Read(Ref(gouts[0])), m], [gx.container])]


def _vjp_mask_scatter(ctx, call, gouts):
    v, m = call.inputs
    clear = Call("mask_scatter", [Const(0.0), m], [gouts[0]])      # before v's sum, as above
    if not ctx.active(v):
        return [clear]
    t = ctx.temp(v.shape, v.dtype, "gmask")
    return [Call("mask_gather", [Read(Ref(gouts[0])), m], [t]), clear] + ctx.accumulate(v, Read(Ref(t)))


def _vjp_bincount(ctx, call, gouts):
    """``out[x[i]] += w[i]``: each weight's adjoint is the adjoint of its bin (a gather)."""
    x, *weights = call.inputs
    if not weights:
        return []
    t = ctx.temp(x.shape, weights[0].dtype, "gbin")
    return [Call("gather", [Read(Ref(gouts[0])), x], [t], {"spec": (("array",),)})] + \
        ctx.accumulate(weights[0], Read(Ref(t)))


def _vjp_sum_to(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    return ctx.accumulate(x, Read(Ref(g)), call.attrs["full"])


# ------------------------------------------------------------- tangents of non-elementwise operations
# ``jvp(ctx, call, touts)``: statements writing the tangents of the call's outputs (see CallRule).


def jvp_linear(*positions):
    """The tangent of a call linear in each input at ``positions`` (multilinear: a product's
    tangent is one call per factor with its tangent in place, summed); other inputs (indices,
    masks) are passed as they are."""
    def jvp(ctx, call, touts):
        terms = []
        for k in positions:
            t = ctx.tangent(call.inputs[k]) if k < len(call.inputs) else None
            if t is not None:
                ins = list(call.inputs)
                ins[k] = t
                terms.append(ins)
        return _sum_of_calls(ctx, call.op, terms, touts[0], call.attrs)
    return jvp


def _sum_of_calls(ctx, opname, terms, out, attrs):
    """``out = opname(*terms[0]) + opname(*terms[1]) + ...`` (zero for no terms)."""
    if not terms:
        return [Assign(Ref(out), Const(0.0))]
    stmts = [Call(opname, terms[0], [out], dict(attrs))]
    for ins in terms[1:]:
        t = ctx.temp(out.shape, out.dtype, "t" + opname[:4])
        stmts += [Call(opname, ins, [t], dict(attrs)), Assign(Ref(out), Read(Ref(t)), accumulate=True)]
    return stmts


def jvp_zero(ctx, call, touts):
    """A derivative zero everywhere (a detached copy, a constant shift)."""
    return [Assign(Ref(t), Const(0.0)) for t in touts if t is not None]


def _jvp_prod(ctx, call, touts):
    stmts, others = _prod_others(ctx, call)
    return stmts + [Call("sum", [others * ctx.tangent(call.inputs[0])], [touts[0]], dict(call.attrs))]


def _jvp_extreme(ctx, call, touts):
    """max/min: the mean of the tangents at the positions attaining the extreme (the adjoint
    shares among them equally too)."""
    (x,), (t,) = call.inputs, touts
    axes, keep = call.attrs["axis"], call.attrs["keepdims"]
    axes = tuple(range(len(x.shape))) if axes is None else axes
    hit = op("float64", op("equal", x, _expand(call.outputs[0], len(x.shape), axes, keep)))
    count = ctx.temp(call.outputs[0].shape, np.float64, "count")
    attrs = {"axis": call.attrs["axis"], "keepdims": keep}
    return [Call("sum", [hit], [count], attrs), Call("sum", [hit * ctx.tangent(x)], [t], attrs),
            Assign(Ref(t), Read(Ref(t)) / Read(Ref(count)))]


def _jvp_solve(ctx, call, touts):
    """``x = solve(a, b)``: ``tx = solve(a, tb - ta @ x)``."""
    (a, b), (t,) = call.inputs, touts
    x = call.outputs[0]
    ta, rhs = ctx.tangent(a), ctx.tangent(b)
    stmts = []
    if ta is not None:
        m = ctx.temp(x.shape, t.dtype, "tsolve")
        stmts.append(Call("matmul", [ta, Read(Ref(x))], [m]))
        rhs = -Read(Ref(m)) if rhs is None else rhs - Read(Ref(m))
    return stmts + [Call("solve", [a, rhs], [t])]


def _trace_solve(ctx, a, ta, out):
    """Statements ``out = trace(solve(a, ta))`` over the last two axes."""
    s = ctx.temp(a.shape, np.result_type(a.dtype, ta.dtype), "tinv")
    make, eye = _identity(ctx, a)
    n = len(a.shape)
    return [make, Call("solve", [a, ta], [s]),
            Call("sum", [Read(Ref(s)) * eye], [out], {"axis": (n - 2, n - 1), "keepdims": False})]


def _jvp_det(ctx, call, touts):
    """``d = det(a)``: ``td = d trace(a^-1 ta)``."""
    (a,), (t,) = call.inputs, touts
    d = call.outputs[0]
    return _trace_solve(ctx, a, ctx.tangent(a), t) + [Assign(Ref(t), Read(Ref(t)) * Read(Ref(d)))]


def _jvp_slogdet(ctx, call, touts):
    """log |det a| has tangent ``trace(a^-1 ta)``; the sign is piecewise constant."""
    (a,), (tsign, tlog) = call.inputs, touts
    stmts = [] if tsign is None else [Assign(Ref(tsign), Const(0.0))]
    return stmts + ([] if tlog is None else _trace_solve(ctx, a, ctx.tangent(a), tlog))


def _jvp_cholesky(ctx, call, touts):
    """``L = cholesky(a)`` (a's lower triangle read, standing for both): with ``ta`` symmetrised
    from its lower triangle, ``tL = L Phi(L^-1 ta L^-T)``, ``Phi`` the lower triangle with the
    diagonal halved (Murray, 2016)."""
    (a,), (t,) = call.inputs, touts
    lt = Read(Ref(call.outputs[0]))
    shape, dt = call.outputs[0].shape, call.outputs[0].dtype
    make, eye = _identity(ctx, a)
    low, strict, sym, x, y, ylow, p = (ctx.temp(shape, dt, h) for h in
                                       ("tchl", "tchs", "tcha", "tchx", "tchy", "tchw", "tchp"))
    ta = ctx.tangent(a)
    return [make, Call("tril", [ta], [low], {"k": 0}), Call("tril", [ta], [strict], {"k": -1}),
            Assign(Ref(sym), Read(Ref(low)) + _swap_last(Read(Ref(strict)))),
            Call("solve", [lt, Read(Ref(sym))], [x]),
            Call("solve", [lt, _swap_last(Read(Ref(x)))], [y]),
            Call("tril", [Read(Ref(y))], [ylow], {"k": 0}),
            Assign(Ref(p), Read(Ref(ylow)) - 0.5 * Read(Ref(y)) * eye),
            Call("matmul", [lt, Read(Ref(p))], [t])]


def _jvp_multilinear(ctx, call, touts):
    """A call linear in each of its inputs (einsum)."""
    return jvp_linear(*range(len(call.inputs)))(ctx, call, touts)


def _jvp_einsum_vjp(ctx, call, touts):
    """``einsum_vjp(g, *operands)`` for operand ``k`` is linear in ``g`` and in every operand
    but the ``k``-th (which gives only its shape)."""
    k = call.attrs["k"]
    positions = [0] + [1 + j for j in range(len(call.inputs) - 1) if j != k]
    return jvp_linear(*positions)(ctx, call, touts)


def _jvp_add_at(ctx, call, touts):
    v, *idx = call.inputs
    tv = ctx.tangent(v)
    return [] if tv is None else [Call("add_at", [tv] + idx, [touts[0]], dict(call.attrs))]


def _jvp_scatter(ctx, call, touts):
    v, *idx = call.inputs
    tv = ctx.tangent(v)
    return [Call("scatter", [Const(0.0) if tv is None else tv] + idx, [touts[0]], dict(call.attrs))]


def _jvp_mask_scatter(ctx, call, touts):
    v, m = call.inputs
    tv = ctx.tangent(v)
    return [Call("mask_scatter", [Const(0.0) if tv is None else tv, m], [touts[0]])]


def _jvp_mask_add(ctx, call, touts):
    v, m = call.inputs
    tv = ctx.tangent(v)
    return [] if tv is None else [Call("mask_add", [tv, m], [touts[0]])]


def _jvp_bincount(ctx, call, touts):
    x, *weights = call.inputs
    tw = ctx.tangent(weights[0]) if weights else None
    if tw is None:
        return [Assign(Ref(touts[0]), Const(0.0))]
    return [Call("bincount", [x, tw], [touts[0]], dict(call.attrs))]


def _red(name):
    def numpy(ins, attrs):
        return f"np.{name}({ins[0]}, axis={attrs['axis']!r}, keepdims={attrs['keepdims']!r})"
    return numpy


def _tuple_src(items):
    return "(" + "".join(f"{x}, " for x in items) + ")"


def _gather_index(ins, attrs):
    """Source of a NumPy index tuple from a gather/scatter spec (arrays, ints and slices)."""
    parts, arrays = [], iter(ins)
    for kind, *rest in attrs["spec"]:
        if kind == "array":
            parts.append(next(arrays))
        elif kind == "int":
            parts.append(rest[0])
        else:
            parts.append("slice(%s, %s, %s)" % tuple(rest))
    return "(" + ", ".join(parts) + ",)"


# the core family's ops; ``flowgrad.registry`` composes every family into ``CALLS``
CORE_CALLS = {
    "sum": CallRule(_red("sum"), _vjp_sum, jvp=jvp_linear(0), complex=True, doc="sum over axes"),
    "prod": CallRule(_red("prod"), _vjp_prod, jvp=_jvp_prod, complex=True, doc="product over axes"),
    "check_index": CallRule(lambda i, a: f"_rt.check_index({', '.join(i)})",
                            exempt="a run-time bounds check: no values",
                            flops=lambda call, size: 0,
                            doc="raises IndexError unless each (first, last, n) triple of its inputs has "
                                "first and last within -n .. n - 1 (an index checked ahead of its loop)"),
    "check_sizes": CallRule(lambda i, a: f"_rt.check_sizes({a['message']!r}, {', '.join(i)})",
                            exempt="a run-time size check: no values",
                            flops=lambda call, size: 0,
                            doc="raises ValueError unless its inputs are pairwise equal (passes.checks)"),
    "max": CallRule(_red("max"), _vjp_extreme, jvp=_jvp_extreme, doc="maximum over axes"),
    "min": CallRule(_red("min"), _vjp_extreme, jvp=_jvp_extreme, doc="minimum over axes"),
    "argmax": CallRule(lambda i, a: f"np.argmax({i[0]}, axis={a['axis']!r})", exempt="an integer result",
                       doc="index of maximum"),
    "argmin": CallRule(lambda i, a: f"np.argmin({i[0]}, axis={a['axis']!r})", exempt="an integer result",
                       doc="index of minimum"),
    "argsort": CallRule(lambda i, a: f"np.argsort({i[0]}, axis=-1, kind='stable')", exempt="an integer result",
                        flops=lambda call, size: 20 * size(call.outputs[0].shape),
                        doc="positions that sort the last axis (stable); sorts are gathers by them"),
    "searchsorted": CallRule(lambda i, a: f"np.searchsorted({i[0]}, {i[1]}, side={a['side']!r})",
                             exempt="an integer result",
                             flops=lambda call, size: 20 * size(call.outputs[0].shape),
                             doc="insertion positions of values into a sorted vector"),
    "matmul": CallRule(lambda i, a: f"np.matmul({i[0]}, {i[1]})", _vjp_matmul, jvp=jvp_linear(0, 1),
                       # a vector on the right (``A @ x``, ``u @ v``) makes no output column
                       flops=lambda c, size: 2 * size(c.inputs[0].shape) *
                       (size(c.inputs[1].shape[-1:]) if len(c.inputs[1].shape) > 1 else 1),
                       complex=True, doc="matrix product (BLAS)"),
    "matmul_tn_flat": CallRule(lambda i, a: f"_rt.matmul_tn_flat({i[0]}, {i[1]})", _vjp_matmul_tn_flat,
                               jvp=jvp_linear(0, 1),
                               adjoint_of="matmul",
                               flops=lambda c, size: 2 * size(c.inputs[0].shape) * size(c.inputs[1].shape[-1:]),
                               complex=True,
                               doc="sum over leading axes of a[..., :, :].T @ g[..., :, :] (one GEMM)"),
    "solve": CallRule(lambda i, a: f"np.linalg.solve({i[0]}, {i[1]})", _vjp_solve, jvp=_jvp_solve,
                      flops=lambda c, size: size(c.inputs[0].shape) * size(c.inputs[0].shape[-1:]),
                      complex=True, doc="linear solve (LAPACK)"),
    "det": CallRule(lambda i, a: f"np.linalg.det({i[0]})", _vjp_det, jvp=_jvp_det,
                    flops=lambda c, size: 2 * size(c.inputs[0].shape) * size(c.inputs[0].shape[-1:]) // 3,
                    doc="determinant (LU, LAPACK)"),
    "slogdet": CallRule(lambda i, a: f"tuple(np.linalg.slogdet({i[0]}))", _vjp_slogdet, jvp=_jvp_slogdet,
                        flops=lambda c, size: 2 * size(c.inputs[0].shape) * size(c.inputs[0].shape[-1:]) // 3,
                        doc="sign and log |determinant| (LU, LAPACK)"),
    "cholesky": CallRule(lambda i, a: f"np.linalg.cholesky({i[0]})", _vjp_cholesky, jvp=_jvp_cholesky,
                         flops=lambda c, size: size(c.inputs[0].shape) * size(c.inputs[0].shape[-1:]) // 3,
                         doc="lower Cholesky factor (LAPACK; reads the lower triangle)"),
    "lu_factor": CallRule(lambda i, a: f"_rt.lu_factor({i[0]})",
                          exempt="created after differentiation (hoisted out of a loop), never differentiated",
                          flops=lambda c, size: 2 * size(c.inputs[0].shape) * size(c.inputs[0].shape[-1:]) // 3,
                          complex=True,
                          doc="LU factorisation of a matrix a loop solves with (hoisted out of the loop; "
                              "created after differentiation, never differentiated)"),
    "lu_solve": CallRule(lambda i, a: f"_rt.lu_solve({i[0]}, {i[1]}, {i[2]}, {a.get('trans', 0)})",
                         exempt="created after differentiation (hoisted out of a loop), never differentiated",
                         flops=lambda c, size: 2 * size(c.inputs[0].shape) * max(1, size(c.inputs[2].shape[1:])),
                         complex=True,
                         doc="solve with a kept LU factorisation (two triangular solves); ``trans``: with the "
                             "factorised matrix's transpose"),
    "reshape": CallRule(lambda i, a: f"np.reshape({i[0]}, {_tuple_src(a['shape'])}).copy()", _vjp_reshape,
                        jvp=jvp_linear(0),
                        complex=True, doc="reshape (copy)"),
    "cumsum": CallRule(lambda i, a: f"np.cumsum({i[0]}, axis={a['axis']!r})", _vjp_cumsum, jvp=jvp_linear(0),
                       complex=True, doc="cumulative sum"),
    "triu": CallRule(lambda i, a: f"np.triu({i[0]}, {a['k']})", _vjp_tri, jvp=jvp_linear(0), complex=True,
                     doc="upper triangle"),
    "tril": CallRule(lambda i, a: f"np.tril({i[0]}, {a['k']})", _vjp_tri, jvp=jvp_linear(0), complex=True,
                     doc="lower triangle"),
    "einsum": CallRule(lambda i, a: f"np.einsum({a['subscripts']!r}, {', '.join(i)}, optimize=True)",
                       _vjp_einsum, jvp=_jvp_multilinear, complex=True, doc="Einstein summation"),
    "einsum_vjp": CallRule(lambda i, a: f"_rt.einsum_vjp({a['subscripts']!r}, {a['k']}, {', '.join(i)})",
                           jvp=_jvp_einsum_vjp, complex=True, adjoint_of="einsum", doc="adjoint of one einsum operand"),
    "eye": CallRule(lambda i, a: f"np.eye({a['n']}, {a['m']}, {a['k']})", complex=True, exempt="a constant",
                    doc="identity"),
    "arange": CallRule(lambda i, a: f"np.arange({', '.join(i)})", exempt="an integer result", doc="integer range"),
    "gather": CallRule(lambda i, a: f"np.array({i[0]}[{_gather_index(i[1:], a)}])", _vjp_gather, jvp=jvp_linear(0),
                       complex=True, doc="integer-array indexing x[idx]"),
    "gather_last": CallRule(lambda i, a: f"_rt.gather_last({i[0]}, {_gather_index(i[1:], a)})", _vjp_gather_last,
                            jvp=jvp_linear(0),
                            adjoint_of="scatter",
                            complex=True, doc="gather where only the last duplicate index receives a value"),
    "add_at": CallRule(lambda i, a: f"np.add.at({{out}}, {_gather_index(i[1:], a)}, {i[0]})",
                       _vjp_add_at, jvp=_jvp_add_at, inplace=True, complex=True,
                       doc="np.add.at(y, idx, v): accumulate at indices"),
    "scatter": CallRule(lambda i, a: f"{{out}}[{_gather_index(i[1:], a)}] = {i[0]}", _vjp_scatter, jvp=_jvp_scatter,
                        inplace=True, complex=True, doc="y[idx] = v with integer arrays (last write wins)"),
    "mask_gather": CallRule(lambda i, a: f"{i[0]}[{i[1]}]", _vjp_mask_gather, jvp=jvp_linear(0),
                            complex=True, doc="boolean-mask read x[m]"),
    "mask_scatter": CallRule(lambda i, a: f"{{out}}[{i[1]}] = {i[0]}", _vjp_mask_scatter,
                             jvp=_jvp_mask_scatter, inplace=True,
                             complex=True, doc="boolean-mask write y[m] = v"),
    "mask_add": CallRule(lambda i, a: f"{{out}}[{i[1]}] += {i[0]}", _vjp_mask_add, jvp=_jvp_mask_add, inplace=True,
                         adjoint_of="mask_gather",
                         complex=True, doc="boolean-mask accumulate y[m] += v"),
    "bincount": CallRule(lambda i, a: f"np.bincount({i[0]}, {i[1] if len(i) > 1 else None}, minlength={a['length']})",
                         _vjp_bincount, jvp=_jvp_bincount, flops=lambda call, size: size(call.inputs[0].shape),
                         doc="np.bincount(x, weights): the number (total weight) of each value of x; the "
                             "output's length (at least max(x) + 1) is an attribute"),
    "trip_count": CallRule(lambda i, a: f"len(range({i[0]}, {i[1]}, {i[2]}))", exempt="an integer result",
                          doc="iterations of a range"),
    "ckpt_slots": CallRule(lambda i, a: f"_ckpt.slots({i[0]}, {i[1]}, {i[2]})",
                           exempt="checkpoint bookkeeping (integers)",
                           doc="snapshot slots a loop checkpoint schedule needs"),
    "ckpt_schedule": CallRule(lambda i, a: f"_ckpt.schedule_rows({i[0]}, {i[1]}, {i[2]})",
                              exempt="checkpoint bookkeeping (integers)",
                              doc="the action rows of a loop checkpoint schedule, their count, and the rows "
                                  "and iterations the forward sweep runs"),
    "ckpt_rows": CallRule(lambda i, a: f"_ckpt.all_rows({i[0]}, {i[1]}, {i[2]})",
                          exempt="checkpoint bookkeeping (integers)",
                          doc="the action rows of a whole loop checkpoint schedule and their count"),
    "ckpt_segment": CallRule(lambda i, a: f"_ckpt.segment_rows({i[0]}, {i[1]}, {i[2]}, {i[3]}, {i[4]})",
                             exempt="checkpoint bookkeeping (integers)",
                             doc="the action rows reversing one segment of a while loop's online schedule, and "
                                 "their count"),
    "sum_to": CallRule(lambda i, a: f"_rt.sum_to({i[0]}, {_tuple_src(a['shape'])}, {_tuple_src(a['full'])})",
                       _vjp_sum_to, jvp=jvp_linear(0),
                       complex=True, doc="sum a broadcast adjoint back to an operand's shape"),
}


# every family's ops, composed by ``flowgrad.registry`` (the one place that writes it)
CALLS = dict(CORE_CALLS)


def missing_rules(lowered=None) -> list:
    """Every primitive without a rule it needs, as ``"op: what is missing"`` lines (empty when the
    table is complete): elementwise primitives without partials, calls without a tangent (jvp),
    without an adjoint (vjp; adjoint calls need none, ``CallRule.adjoint_of``) or, given the names
    a backend lowers (``lowered``), without a lowering; ops that need neither (``NO_PARTIALS``,
    ``CallRule.exempt``) say why in the table."""
    missing = [f"{name}: no partials" for name in sorted(ELEMENTWISE)
               if name not in PARTIALS and name not in ZERO_DERIVATIVE and name not in NO_PARTIALS]
    for name, rule in sorted(CALLS.items()):
        if lowered is not None and name not in lowered and rule.expand is None:
            missing.append(f"{name}: no lowering")
        if rule.exempt:
            continue
        if rule.jvp is None:
            missing.append(f"{name}: no tangent (jvp)")
        if rule.vjp is None and rule.adjoint_of is None:
            missing.append(f"{name}: no adjoint (vjp)")
    return missing


def coverage() -> str:
    """A readable list of every primitive the registry covers: for each elementwise primitive
    whether it has partials (which give both its tangent and its adjoint); for each call its
    family, whether it has an adjoint (vjp) and a tangent (jvp), or why it needs none, and whether
    the numpy and the native backend lower it; then what is missing.

    Returns:
      The table as text (``flowgrad rules`` prints it).

    Example:
      >>> print(flowgrad.coverage())                                  # doctest: +SKIP
    """
    from ..backends.native_calls import CALL_LOWERING
    from ..registry import FAMILY_OF
    lines = ["elementwise, declared in ir.elements (partials: tangent and adjoint; numpy and native: how each "
             "backend writes it, tests/test_native_lowering.py runs each; flags):"]
    for name in sorted(ELEMENTWISE):
        el = ELEMENTS[name]
        kind = "partials" if name in PARTIALS else ("zero" if name in ZERO_DERIVATIVE else
                                                    "none" if name in NO_PARTIALS else "MISSING")
        flags = " ".join(f for f in ("cheap", "weak", "finite", "output", "kept") if getattr(el, f))
        lines.append(f"  {name:14s} {kind:9s} {el.infix or el.function:18s} {el.infix or el.native:18s} "
                     f"{el.flops:2d} flops  {flags}{'  (' + el.exempt + ')' if el.exempt else ''}")
    lines.append("calls (family, adjoint, tangent, numpy, native):")
    for name, rule in sorted(CALLS.items()):
        lowered = "expanded     " if rule.expand is not None else \
            ("numpy" if callable(rule.numpy) else "NO NUMPY") + " " + ("native" if name in CALL_LOWERING else "NO NATIVE")
        family = FAMILY_OF.get(name, "?")
        if rule.exempt:
            lines.append(f"  {name:18s} {family:7s} {'none: ' + rule.exempt:31s}  {lowered:13s}  {rule.doc}")
            continue
        vjp = "vjp" if rule.vjp else (f"adjoint of {rule.adjoint_of}" if rule.adjoint_of else "no adjoint")
        jvp = "jvp" if rule.jvp else "no tangent"
        lines.append(f"  {name:18s} {family:7s} {vjp:20s} {jvp:10s}  {lowered:13s}  {rule.doc}")
    missing = missing_rules(CALL_LOWERING) + [f"{n}: no numpy source" for n, r in sorted(CALLS.items())
                                              if not callable(r.numpy)]
    lines.append("missing: " + ("nothing" if not missing else "; ".join(missing)))
    return "\n".join(lines)


class _Temporaries:
    """What a ``CallRule.formula`` needs of a differentiation context: temporaries, added to
    ``containers``."""

    def __init__(self, namer, containers):
        self.namer, self.containers = namer, containers

    def temp(self, shape, dtype, hint="t"):
        c = Container(self.namer(hint), dtype, shape, "transient")
        self.containers[c.name] = c
        return c


def expand_formulas(stmts, namer, containers):
    """``stmts`` with each call that has no adjoint of its own but a formula in primitives
    (``CallRule.formula``: an adjoint a faster routine computes) replaced by that formula, so that
    reverse mode differentiates it (reverse over reverse); ``containers`` gains its temporaries."""
    ctx = _Temporaries(namer, containers)

    def visit(block):
        out = []
        for s in block:
            rule = CALLS.get(s.op) if isinstance(s, Call) else None
            if rule is not None and rule.vjp is None and rule.formula is not None:
                out += rule.formula(ctx, s)
            else:
                out.append(map_blocks(s, visit))
        return out
    return visit(stmts)


__all__ = ["PARTIALS", "is_gram", "ZERO_DERIVATIVE", "NO_PARTIALS", "CALLS", "CallRule", "coverage", "missing_rules",
           "jvp_linear", "jvp_zero", "cholesky_adjoint", "expand_formulas"]
