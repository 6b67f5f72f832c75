"""Matrix decompositions and the solves built on them, as Call ops: ``eigh``, ``svd``, ``qr``,
``lstsq`` and ``solve_triangular``, each registered in the rule table
(``flowgrad.autodiff.rules.CALLS``: NumPy forward source, cost and adjoint) and in the native
backend (``flowgrad.backends.native_calls.CALL_LOWERING``), like ``nn_ops``.

The adjoints of the decompositions are Calls of their own (``eigh_vjp``, ``svd_vjp``, ``qr_vjp``,
``lstsq_vjp``), the published formulas written once in ``backends.linalg_runtime`` and compiled
for the native backend in ``backends.native_linalg``; the triangular solve's adjoint is another
triangular solve and an outer product on the triangle it read. The factors come from the LAPACK
routines NumPy calls (syevd, gesdd, geqrf/orgqr, gelsd), so both backends give NumPy's values, and
the same signs of eigen- and singular vectors.
"""
from __future__ import annotations

from .autodiff import rules
from .backends import native_calls
from .ir.core import Call, NewAxis, Read, Ref


def _read(c):
    return Read(Ref(c) if c.ndim else Ref(c, ()))


def _given(gouts):
    """The Reads of the outputs' adjoints that exist, and which exist (a tuple of flags)."""
    return [_read(g) for g in gouts if g is not None], tuple(g is not None for g in gouts)


def _args(ins, given, before):
    """Source arguments: the first ``before`` inputs, then each adjoint or ``None``."""
    it = iter(ins[before:])
    return list(ins[:before]) + [next(it) if g else "None" for g in given]


def _transposed(c):
    """A Read of matrix container ``c`` transposed, as a view."""
    return Read(Ref(c, Ref(c).items, (1, 0)))


def _cube(c, size):
    """n^3 for the n x n (m x n: m n min(m, n)) matrix a call factorises (its first input), or
    whose adjoint an adjoint call makes (its first output)."""
    shape = (c.outputs[0] if c.op.endswith("_vjp") else c.inputs[0]).shape
    return size(shape) * min(size(shape[-1:]), size(shape[-2:-1]))


# ------------------------------------------------------------- adjoints


def _vjp_eigh(ctx, call, gouts):
    w, v = call.outputs
    given, flags = _given(gouts)
    return ctx.via_temp(call.inputs[0], "eigh_vjp", [_read(w), _read(v)] + given,
                        attrs={"lower": call.attrs["lower"], "given": flags})


def _vjp_svd(ctx, call, gouts):
    given, flags = _given(gouts)
    return ctx.via_temp(call.inputs[0], "svd_vjp", [_read(c) for c in call.outputs] + given, attrs={"given": flags})


def _vjp_qr(ctx, call, gouts):
    given, flags = _given(gouts)
    return ctx.via_temp(call.inputs[0], "qr_vjp", [_read(c) for c in call.outputs] + given, attrs={"given": flags})


def _vjp_lstsq(ctx, call, gouts):
    """``x`` and the singular values ``s`` carry adjoints; the rank is an integer."""
    a, b, rcond = call.inputs
    gx, _, gs = gouts
    given, flags = _given([gx, gs])
    ga, gb = ctx.temp(a.shape, a.dtype, "glsa"), ctx.temp(b.shape, b.dtype, "glsb")
    return [Call("lstsq_vjp", [a, b, _read(call.outputs[0])] + given + [rcond], [ga, gb], {"given": flags})] + \
        ctx.accumulate(a, _read(ga)) + ctx.accumulate(b, _read(gb))


def _vjp_solve_triangular(ctx, call, gouts):
    """``op(a) x = b`` (``op``: the transpose with ``trans``): ``b``'s adjoint solves with
    ``op(a)`` transposed, and ``op(a)``'s is ``-gb x'``, of which ``a`` receives the triangle
    the solve read (without the diagonal for a unit one)."""
    (a, b), (g,) = call.inputs, gouts
    x = call.outputs[0]
    lower, trans, unit = call.attrs["lower"], call.attrs["trans"], call.attrs["unit"]
    gb = ctx.temp(x.shape, x.dtype, "gtri")
    stmts = [Call("solve_triangular", [a, _read(g)], [gb], dict(call.attrs, trans=1 - trans))]
    stmts += ctx.accumulate(b, _read(gb))
    if not ctx.active(a):
        return stmts
    left, right = (x, gb) if trans else (gb, x)      # op(a)'s adjoint transposed back for a
    if len(x.shape) == 1:
        outer = Read(Ref(left, list(Ref(left).items) + [NewAxis()])) * \
            Read(Ref(right, [NewAxis()] + list(Ref(right).items)))
    else:
        prod = ctx.temp(a.shape, a.dtype, "gtrp")
        stmts.append(Call("matmul", [_read(left), _transposed(right)], [prod]))
        outer = _read(prod)
    tri = ctx.temp(a.shape, a.dtype, "gtrm")
    k = 0 if not unit else (-1 if lower else 1)
    stmts.append(Call("tril" if lower else "triu", [outer], [tri], {"k": k}))
    return stmts + ctx.accumulate(a, -_read(tri))


def _jvp_solve_triangular(ctx, call, touts):
    """``op(a) x = b``: ``tx`` solves ``op(a) tx = tb - op(ta') x``, ``ta'`` the triangle of ``ta``
    the solve reads (without the diagonal for a unit one)."""
    (a, b), (t,) = call.inputs, touts
    x = call.outputs[0]
    lower, trans, unit = call.attrs["lower"], call.attrs["trans"], call.attrs["unit"]
    ta, rhs = ctx.tangent(a), ctx.tangent(b)
    stmts = []
    if ta is not None:
        tri, m = ctx.temp(a.shape, t.dtype, "ttri"), ctx.temp(x.shape, t.dtype, "ttrm")
        k = 0 if not unit else (-1 if lower else 1)
        stmts += [Call("tril" if lower else "triu", [ta], [tri], {"k": k}),
                  Call("matmul", [_transposed(tri) if trans else _read(tri), _read(x)], [m])]
        rhs = -_read(m) if rhs is None else rhs - _read(m)
    return stmts + [Call("solve_triangular", [a, rhs], [t], dict(call.attrs))]


# ------------------------------------------------------------- the table


def _flags(a):
    return a["given"]


LINALG_CALLS = {
    "eigh": rules.CallRule(
        lambda i, a: f"tuple(np.linalg.eigh({i[0]}, UPLO={'L' if a['lower'] else 'U'!r}))", _vjp_eigh,
        flops=lambda c, size: 9 * _cube(c, size),
        doc="eigenvalues and eigenvectors of a symmetric matrix, from one triangle (LAPACK syevd)"),
    "eigh_vjp": rules.CallRule(
        lambda i, a: f"_rt.linalg.eigh_vjp({', '.join(_args(i, _flags(a), 2))}, {a['lower']})",
        flops=lambda c, size: 4 * _cube(c, size) // 3, doc="adjoint of eigh (Giles 2008)"),
    "svd": rules.CallRule(
        lambda i, a: f"tuple(np.linalg.svd({i[0]}, full_matrices=False))", _vjp_svd,
        flops=lambda c, size: 12 * _cube(c, size),
        doc="reduced singular value decomposition (LAPACK gesdd)"),
    "svd_vjp": rules.CallRule(
        lambda i, a: f"_rt.linalg.svd_vjp({', '.join(_args(i, _flags(a), 3))})",
        flops=lambda c, size: 8 * _cube(c, size), doc="adjoint of svd (Townsend 2016)"),
    "qr": rules.CallRule(
        lambda i, a: f"tuple(np.linalg.qr({i[0]}))", _vjp_qr, flops=lambda c, size: 4 * _cube(c, size),
        doc="reduced QR factorisation (LAPACK geqrf, orgqr)"),
    "qr_vjp": rules.CallRule(
        lambda i, a: f"_rt.linalg.qr_vjp({', '.join(_args(i, _flags(a), 2))})",
        flops=lambda c, size: 6 * _cube(c, size), doc="adjoint of qr (Walter and Lehmann 2018, Liao et al. 2019)"),
    "lstsq": rules.CallRule(
        lambda i, a: f"_rt.linalg.lstsq({i[0]}, {i[1]}, {i[2]})", _vjp_lstsq,
        flops=lambda c, size: 12 * _cube(c, size),
        doc="least-squares solution, rank and singular values (LAPACK gelsd)"),
    "lstsq_vjp": rules.CallRule(
        lambda i, a: f"_rt.linalg.lstsq_vjp({', '.join(_args(i[:-1], _flags(a), 3))}, {i[-1]})",
        flops=lambda c, size: 48 * _cube(c, size),
        doc="adjoint of lstsq (derivative of the pseudo-inverse, Golub and Pereyra 1973)"),
    "solve_triangular": rules.CallRule(
        lambda i, a: f"_rt.linalg.solve_triangular({i[0]}, {i[1]}, {a['lower']}, {a['trans']}, {a['unit']})",
        _vjp_solve_triangular, jvp=_jvp_solve_triangular,
        flops=lambda c, size: size(c.inputs[0].shape) * max(1, size(c.inputs[1].shape[1:])),
        doc="triangular solve (LAPACK trtrs; scipy.linalg.solve_triangular)"),
}


# ------------------------------------------------------------- native lowering


def _outputs(low, s, ind):
    """The targets of a Call's results (fresh arrays, rebound to its output containers)."""
    return ", ".join(c.name for c in s.outputs)


def _operand(low, e, ind):
    return native_calls._operand_array(low, e, ind)


def _lower_eigh(low, s, ind):
    low.line(f"{_outputs(low, s, ind)} = _rt.linalg.eigh({_operand(low, s.inputs[0], ind)}, {s.attrs['lower']})", ind)


def _lower_factors(name):
    def lower(low, s, ind):
        a = _operand(low, s.inputs[0], ind)
        low.line(f"{_outputs(low, s, ind)} = _rt.linalg.{name}(np.ascontiguousarray({a}))", ind)
    return lower


def _lower_lstsq(low, s, ind):
    a, b, rcond = s.inputs
    low.line(f"{_outputs(low, s, ind)} = _rt.linalg.lstsq(np.ascontiguousarray({_operand(low, a, ind)}), "
             f"{_operand(low, b, ind)}, {low.src(rcond)})", ind)


def _lower_vjp(name, before, extra=()):
    """A ``<name>_vjp`` Call: the first ``before`` inputs, the adjoints given (``None`` for the
    others), then ``extra`` (attribute names, or ``-1`` for the last input)."""
    def lower(low, s, ind):
        arrays = s.inputs[:-1] if -1 in extra else s.inputs
        ins = [_operand(low, e, ind) for e in arrays]
        tail = [low.src(s.inputs[-1]) if x == -1 else repr(s.attrs[x]) for x in extra]
        args = _args(ins, s.attrs["given"], before) + tail
        low.line(f"{_outputs(low, s, ind)} = _rt.linalg.{name}_vjp({', '.join(args)})", ind)
    return lower


def _lower_solve_triangular(low, s, ind):
    a, b = (_operand(low, e, ind) for e in s.inputs)
    low.line(f"{s.outputs[0].name} = _rt.linalg.solve_triangular({a}, {b}, {s.attrs['lower']}, "
             f"{s.attrs['trans']}, {s.attrs['unit']})", ind)


LINALG_LOWERING = {
    "eigh": _lower_eigh, "svd": _lower_factors("svd"), "qr": _lower_factors("qr"), "lstsq": _lower_lstsq,
    "eigh_vjp": _lower_vjp("eigh", 2, ("lower",)), "svd_vjp": _lower_vjp("svd", 3), "qr_vjp": _lower_vjp("qr", 2),
    "lstsq_vjp": _lower_vjp("lstsq", 3, (-1,)), "solve_triangular": _lower_solve_triangular,
}

rules.CALLS.update(LINALG_CALLS)
native_calls.CALL_LOWERING.update(LINALG_LOWERING)
