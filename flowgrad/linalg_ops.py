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

import numpy as np

from .autodiff import rules
from .backends import native_calls
from .errors import UnsupportedError
from .ir.core import Assign, Call, Const, NewAxis, Read, Ref, Slice, const_value, op


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


# ------------------------------------------------------------- tangents
# Each written in primitives (matmul, solves, triangles, elementwise); the tangents of the adjoint
# calls (for forward over reverse: ``hvp``, ``hessian``) are the tangents of their formulas written
# out in primitives (``ctx.derive``).


def _row(c):
    """A Read of vector ``c`` as a row (1, n)."""
    return Read(Ref(c, [NewAxis()] + list(Ref(c).items)))


def _col(c):
    """A Read of vector ``c`` as a column (n, 1)."""
    return Read(Ref(c, list(Ref(c).items) + [NewAxis()]))


def _eye(ctx, n):
    """(a statement making the n x n identity, a Read of it)"""
    e = ctx.temp((n, n), np.float64, "eye")
    return Call("eye", [], [e], {"n": n, "m": n, "k": 0}), _read(e)


def _temps(ctx, shape, *hints):
    return [ctx.temp(shape, np.float64, h) for h in hints]


def _gaps_of(ctx, values, eye, squared=False):
    """``(statement, F)``: ``F[i, j] = 1 / (values[j] - values[i])`` off the diagonal, 0 on it
    (of the squares with ``squared``), as ``backends.linalg_runtime._gaps``."""
    n = values.shape[0]
    f = ctx.temp((n, n), np.float64, "tgap")
    row, col = (_row(values), _col(values))
    if squared:
        row, col = row * row, col * col
    return Assign(Ref(f), (1.0 - eye) / (row - col + eye)), _read(f)


def _known_equal(a, b):
    return const_value(a) is not None and const_value(a) == const_value(b)


def _symmetric_tangent(ctx, ta, n, lower):
    """``(statements, S)``: the symmetric matrix the triangle of ``ta`` that a decomposition reads
    stands for."""
    tri, strict, sym = _temps(ctx, (n, n), "ttri", "tstr", "tsym")
    name = "tril" if lower else "triu"
    return [Call(name, [ta], [tri], {"k": 0}), Call(name, [ta], [strict], {"k": -1 if lower else 1}),
            Assign(Ref(sym), _read(tri) + _transposed(strict))], sym


def _jvp_eigh(ctx, call, touts):
    """``w, v = eigh(a)``: with ``P = v' ta v`` (``ta`` symmetric, from the triangle read),
    ``tw = diag(P)`` and ``tv = v (F * P)``, ``F[i, j] = 1 / (w[j] - w[i])`` off the diagonal
    (Giles, 2008)."""
    (a,), (tw, tv) = call.inputs, touts
    w, v = call.outputs
    n = a.shape[-1]
    make, eye = _eye(ctx, n)
    stmts, sym = _symmetric_tangent(ctx, ctx.tangent(a), n, call.attrs["lower"])
    q, p = _temps(ctx, (n, n), "teq", "tep")
    stmts = [make] + stmts + [Call("matmul", [_transposed(v), _read(sym)], [q]),
                              Call("matmul", [_read(q), _read(v)], [p])]
    if tw is not None:
        stmts.append(Call("sum", [_read(p) * eye], [tw], {"axis": (1,), "keepdims": False}))
    if tv is not None:
        gaps, f = _gaps_of(ctx, w, eye)
        fp = ctx.temp((n, n), np.float64, "tefp")
        stmts += [gaps, Assign(Ref(fp), f * _read(p)), Call("matmul", [_read(v), _read(fp)], [tv])]
    return stmts


def _jvp_svd(ctx, call, touts):
    """``u, s, vh = svd(a)`` (reduced; a: m x n, k = min(m, n)): with ``P = u' ta v`` and
    ``F[i, j] = 1 / (s[j]^2 - s[i]^2)`` off the diagonal, ``ts = diag(P)``,
    ``tu = u (F * (P S + S P')) + (I - u u') ta v / s`` and
    ``tvh = (F * (S P + P' S))' vh + (u' ta - P vh) / s[:, None]`` (Townsend, 2016)."""
    (a,), (tu, ts, tvh) = call.inputs, touts
    u, s, vh = call.outputs
    m, k, n = u.shape[0], s.shape[0], vh.shape[1]
    ta = ctx.tangent(a)
    make, eye = _eye(ctx, k)
    av, = _temps(ctx, (m, k), "tsav")
    p, = _temps(ctx, (k, k), "tsp")
    stmts = [make, Call("matmul", [ta, _transposed(vh)], [av]), Call("matmul", [_transposed(u), _read(av)], [p])]
    if ts is not None:
        stmts.append(Call("sum", [_read(p) * eye], [ts], {"axis": (1,), "keepdims": False}))
    if tu is None and tvh is None:
        return stmts
    gaps, f = _gaps_of(ctx, s, eye, squared=True)
    stmts.append(gaps)
    srow, scol = _row(s), _col(s)
    if tu is not None:
        inner, = _temps(ctx, (k, k), "tsiu")
        stmts += [Assign(Ref(inner), f * (_read(p) * srow + scol * _transposed(p))),
                  Call("matmul", [_read(u), _read(inner)], [tu])]
        if not _known_equal(m, k):
            up, = _temps(ctx, (m, k), "tsup")
            stmts += [Call("matmul", [_read(u), _read(p)], [up]),
                      Assign(Ref(tu), (_read(av) - _read(up)) / srow, accumulate=True)]
    if tvh is not None:
        inner, = _temps(ctx, (k, k), "tsiv")
        stmts += [Assign(Ref(inner), f * (scol * _read(p) + _transposed(p) * srow)),
                  Call("matmul", [_transposed(inner), _read(vh)], [tvh])]
        if not _known_equal(n, k):
            ua, pv = _temps(ctx, (k, n), "tsua", "tspv")
            stmts += [Call("matmul", [_transposed(u), ta], [ua]), Call("matmul", [_read(p), _read(vh)], [pv]),
                      Assign(Ref(tvh), (_read(ua) - _read(pv)) / scol, accumulate=True)]
    return stmts


def _jvp_qr(ctx, call, touts):
    """``q, r = qr(a)`` (reduced; k = min(m, n)), for a square, tall or wide ``a``: with ``X = ta_k
    r_k^-1`` (``_k``: the first k columns), ``C = q' X`` and ``W = tril(C, -1) - tril(C, -1)'``
    (``q' tq``, antisymmetric), ``tq = X + q (W - C)`` and ``tr = triu(q' ta - W r)`` (Walter and
    Lehmann, 2018; for a wide ``a``, ``X - q C`` vanishes)."""
    (a,), (tq, tr) = call.inputs, touts
    q, r = call.outputs
    m, k, n = q.shape[0], q.shape[1], r.shape[1]
    ta, = _temps(ctx, (m, n), "tqa")
    stmts = [Assign(Ref(ta), ctx.tangent(a))]
    square = _known_equal(k, n)
    rk = r if square else Ref(r, [Slice(0, k), Slice(0, k)])
    tak = Ref(ta) if square else Ref(ta, [Slice(0, m), Slice(0, k)])
    rk_read = _read(r) if square else Read(rk)
    xt, = _temps(ctx, (k, m), "tqxt")
    c, low, w, wc = _temps(ctx, (k, k), "tqc", "tql", "tqw", "tqwc")
    x = _transposed(xt)
    stmts += [Call("solve_triangular", [rk_read, Read(Ref(tak.container, tak.items, (1, 0)))], [xt],
                   {"lower": False, "trans": 1, "unit": False}),
              Call("matmul", [_transposed(q), x], [c]), Call("tril", [_read(c)], [low], {"k": -1}),
              Assign(Ref(w), _read(low) - _transposed(low))]
    if tq is not None:
        qw, = _temps(ctx, (m, k), "tqqw")
        stmts += [Assign(Ref(wc), _read(w) - _read(c)), Call("matmul", [_read(q), _read(wc)], [qw]),
                  Assign(Ref(tq), x + _read(qw))]
    if tr is not None:
        qa, wr, d = _temps(ctx, (k, n), "tqqa", "tqwr", "tqd")
        stmts += [Call("matmul", [_transposed(q), _read(ta)], [qa]), Call("matmul", [_read(w), _read(r)], [wr]),
                  Assign(Ref(d), _read(qa) - _read(wr)), Call("triu", [_read(d)], [tr], {"k": 0})]
    return stmts


def _lstsq_call(ctx, a, b, rcond, out):
    """``out = lstsq(a, b, rcond)[0]`` (``pinv(a) @ b``)."""
    m, n = a.shape
    rank = ctx.temp((), np.int64, "lsrk")
    s = ctx.temp((_smaller(m, n),), np.float64, "lss")
    return Call("lstsq", [a, b, rcond], [out, rank, s])


def _smaller(m, n):
    return Const(min(const_value(m), const_value(n))) if const_value(m) is not None and \
        const_value(n) is not None else op("minimum", m, n)


def _jvp_lstsq(ctx, call, touts):
    """``x = pinv(a) b`` (exact where the rank of ``a`` does not change nearby, a full-rank ``a``):
    from the derivative of the pseudo-inverse (Golub and Pereyra, 1973),
    ``tx = pinv(a) (tb - ta x) + pinv(a) pinv(a)' ta' r + (I - pinv(a) a) ta' pinv(a)' x``,
    ``r = b - a x``; the singular values' tangent is ``diag(u' ta v)``."""
    (a, b, rcond), (tx, _, ts) = call.inputs, touts
    x, _, s = call.outputs
    ta, tb = ctx.tangent(a), ctx.tangent(b)
    at = rules._swap_last(a)
    stmts = []
    if tx is not None:
        xs, bs = x.shape, b.shape
        u, t1 = ctx.temp(bs, np.float64, "tlu"), ctx.temp(xs, np.float64, "tlx")
        if ta is not None:
            dax = ctx.temp(bs, np.float64, "tlax")
            stmts.append(Call("matmul", [ta, _read(x)], [dax]))
            stmts.append(Assign(Ref(u), -_read(dax) if tb is None else tb - _read(dax)))
        else:
            stmts.append(Assign(Ref(u), tb))
        stmts += [_lstsq_call(ctx, a, _read(u), rcond, t1), Assign(Ref(tx), _read(t1))]
        if ta is not None:
            tat = rules._swap_last(ta)
            ax, r, y1, y2, aw = (ctx.temp(bs, np.float64, h) for h in ("tlax", "tlr", "tly", "tlz", "tlaw"))
            atr, t2, w, z = (ctx.temp(xs, np.float64, h) for h in ("tlar", "tlp", "tlw", "tlq"))
            stmts += [Call("matmul", [a, _read(x)], [ax]), Assign(Ref(r), b - _read(ax)),
                      Call("matmul", [tat, _read(r)], [atr]), _lstsq_call(ctx, at, _read(atr), rcond, y1),
                      _lstsq_call(ctx, a, _read(y1), rcond, t2),
                      _lstsq_call(ctx, at, _read(x), rcond, y2), Call("matmul", [tat, _read(y2)], [w]),
                      Call("matmul", [a, _read(w)], [aw]), _lstsq_call(ctx, a, _read(aw), rcond, z),
                      Assign(Ref(tx), _read(t2) + _read(w) - _read(z), accumulate=True)]
    if ts is not None:
        if ta is None:
            return stmts + [Assign(Ref(ts), Const(0.0))]
        m, n = a.shape
        k = s.shape[0]
        uu, av = ctx.temp((m, k), np.float64, "tlsu"), ctx.temp((m, k), np.float64, "tlsa")
        ss, vh = ctx.temp((k,), np.float64, "tlss"), ctx.temp((k, n), np.float64, "tlsv")
        stmts += [Call("svd", [a], [uu, ss, vh]), Call("matmul", [ta, _transposed(vh)], [av]),
                  Call("sum", [_read(uu) * _read(av)], [ts], {"axis": (0,), "keepdims": False})]
    return stmts


# The adjoint calls' tangents: each adjoint formula (``backends.linalg_runtime``) written out in
# primitives, differentiated by ``ctx.derive``.


def _given_inputs(call, before):
    """The adjoint call's inputs after the first ``before``: one per flag of ``given`` (None where
    that adjoint is zero)."""
    it = iter(call.inputs[before:])
    return [next(it) if g else None for g in call.attrs["given"]]


def _outer(ctx, x, y, out):
    """``out = x @ y.T`` for matrices, ``x[:, None] * y[None, :]`` for vectors."""
    if len(x.shape) == 1:
        return Assign(Ref(out), Read(Ref(x.ref.container, list(x.ref.items) + [NewAxis()], x.ref.perm)) *
                      Read(Ref(y.ref.container, [NewAxis()] + list(y.ref.items), y.ref.perm)))
    return Call("matmul", [x, rules._swap_last(y)], [out])


def _derived(ctx, formula, results, touts):
    """The tangents ``touts`` of the temporaries ``results`` a formula writes."""
    stmts = ctx.derive(formula)
    for res, t in zip(results, touts):
        if t is not None:
            tr = ctx.tangent(_read(res))
            stmts.append(Assign(Ref(t), Const(0.0) if tr is None else tr))
    return stmts


def _jvp_eigh_vjp(ctx, call, touts):
    """``v (diag(gw) + F * (v' gv)) v'`` on the triangle read, differentiated."""
    w, v = call.inputs[:2]
    gw, gv = _given_inputs(call, 2)
    n = v.shape[0]
    make, eye = _eye(ctx, n)
    inner, t, m, both, res = _temps(ctx, (n, n), "evi", "evt", "evm", "evb", "evr")
    f = [make, Assign(Ref(inner), Const(0.0))]
    if gv is not None:
        fw, vg = _temps(ctx, (n, n), "evf", "evg")
        f += [Assign(Ref(fw), (1.0 - eye) / (_row_of(w) - _col_of(w) + eye)),
              Call("matmul", [rules._swap_last(v), gv], [vg]), Assign(Ref(inner), _read(fw) * _read(vg))]
    if gw is not None:
        f.append(Assign(Ref(inner), eye * _row_of(gw), accumulate=True))
    f += [Call("matmul", [v, _read(inner)], [t]), Call("matmul", [_read(t), rules._swap_last(v)], [m]),
          Assign(Ref(both), _read(m) + _transposed(m) - eye * _read(m)),
          Call("tril" if call.attrs["lower"] else "triu", [_read(both)], [res], {"k": 0})]
    return _derived(ctx, f, [res], touts)


def _row_of(e):
    """A Read of vector expression ``e`` (a Read) as a row (1, n)."""
    return Read(Ref(e.ref.container, [NewAxis()] + list(e.ref.items), e.ref.perm))


def _col_of(e):
    return Read(Ref(e.ref.container, list(e.ref.items) + [NewAxis()], e.ref.perm))


def _jvp_svd_vjp(ctx, call, touts):
    """Townsend's adjoint (``backends.linalg_runtime.svd_vjp``), differentiated."""
    u, s, vh = call.inputs[:3]
    gu, gs, gvh = _given_inputs(call, 3)
    m, k, n = u.shape[0], s.shape[0], vh.shape[1]
    make, eye = _eye(ctx, k)
    inner, = _temps(ctx, (k, k), "svi")
    ga, res = _temps(ctx, (m, n), "sva", "svr")
    ui, = _temps(ctx, (m, k), "svu")
    f = [make, Assign(Ref(inner), Const(0.0)), Assign(Ref(ga), Const(0.0))]
    if gs is not None:
        f.append(Assign(Ref(inner), eye * _row_of(gs), accumulate=True))
    if gu is not None or gvh is not None:
        fs, = _temps(ctx, (k, k), "svf")
        srow, scol = _row_of(s), _col_of(s)
        f.append(Assign(Ref(fs), (1.0 - eye) / (srow * srow - scol * scol + eye)))
        if gu is not None:
            ug, = _temps(ctx, (k, k), "svug")
            f += [Call("matmul", [rules._swap_last(u), gu], [ug]),
                  Assign(Ref(inner), _read(fs) * (_read(ug) - _transposed(ug)) * srow, accumulate=True)]
            if not _known_equal(m, k):
                uug, rest, = _temps(ctx, (m, k), "svuu", "svre")
                ext, = _temps(ctx, (m, n), "svex")
                f += [Call("matmul", [u, _read(ug)], [uug]), Assign(Ref(rest), (gu - _read(uug)) / srow),
                      Call("matmul", [_read(rest), vh], [ext]), Assign(Ref(ga), _read(ext), accumulate=True)]
        if gvh is not None:
            vg, = _temps(ctx, (k, k), "svvg")
            f += [Call("matmul", [vh, rules._swap_last(gvh)], [vg]),
                  Assign(Ref(inner), scol * (_read(fs) * (_read(vg) - _transposed(vg))), accumulate=True)]
            if not _known_equal(n, k):
                us, = _temps(ctx, (m, k), "svus")
                vv, rest = _temps(ctx, (k, n), "svvv", "svrv")
                ext, = _temps(ctx, (m, n), "svev")
                f += [Assign(Ref(us), u / srow), Call("matmul", [_transposed(vg), vh], [vv]),
                      Assign(Ref(rest), gvh - _read(vv)), Call("matmul", [_read(us), _read(rest)], [ext]),
                      Assign(Ref(ga), _read(ext), accumulate=True)]
    f += [Call("matmul", [u, _read(inner)], [ui]), Call("matmul", [_read(ui), vh], [res]),
          Assign(Ref(res), _read(ga), accumulate=True)]
    return _derived(ctx, f, [res], touts)


def _block(c, rows, cols):
    """A Read of ``c[rows[0]:rows[0]+rows[1], cols[0]:cols[0]+cols[1]]``."""
    return Read(Ref(c, [Slice(*rows), Slice(*cols)]))


def _qr_tall_formula(ctx, q, r, gq, gr, res):
    """Statements ``res = (gq + q copyltu(r gr' - gq' q)) r^-T`` (``_qr_tall_vjp``); ``gq``/``gr``
    Reads or None (zero)."""
    m, k = q.shape
    mm, low, strict, c = _temps(ctx, (k, k), "qvm", "qvl", "qvs", "qvc")
    b, = _temps(ctx, (m, k), "qvb")
    rest, = _temps(ctx, (k, m), "qvt")
    f = [Assign(Ref(mm), Const(0.0))]
    if gr is not None:
        rg, = _temps(ctx, (k, k), "qvrg")
        f += [Call("matmul", [r, rules._swap_last(gr)], [rg]), Assign(Ref(mm), _read(rg), accumulate=True)]
    if gq is not None:
        gqq, = _temps(ctx, (k, k), "qvgq")
        f += [Call("matmul", [rules._swap_last(gq), q], [gqq]), Assign(Ref(mm), -_read(gqq), accumulate=True)]
    f += [Call("tril", [_read(mm)], [low], {"k": 0}), Call("tril", [_read(mm)], [strict], {"k": -1}),
          Assign(Ref(c), _read(low) + _transposed(strict)), Call("matmul", [q, _read(c)], [b])]
    if gq is not None:
        f.append(Assign(Ref(b), gq, accumulate=True))
    return f + [Call("solve_triangular", [r, _transposed(b)], [rest], {"lower": False, "trans": 0, "unit": False}),
                Assign(res, Read(Ref(rest, Ref(rest).items, (1, 0))))]


def _jvp_qr_vjp(ctx, call, touts):
    """The adjoint of qr (``backends.linalg_runtime.qr_vjp``), differentiated; for a wide ``a``
    through the square factorisation of its first ``k`` columns."""
    q, r = call.inputs[:2]
    gq, gr = _given_inputs(call, 2)
    m, k, n = q.shape[0], r.shape[0], r.shape[1]
    res, = _temps(ctx, (m, n), "qvr")
    if _known_equal(k, n):
        return _derived(ctx, _qr_tall_formula(ctx, q, r, gq, gr, Ref(res)), [res], touts)
    if const_value(k) is None or const_value(n) is None:
        raise UnsupportedError("forward mode over the adjoint of qr needs the matrix's shape known when "
                               "captured")
    k, n = int(const_value(k)), int(const_value(n))
    rr, = _temps(ctx, (k, n), "qvrr")
    f = [Assign(Ref(rr), r)]
    gqk, grk = None, None
    if gr is not None:
        gg, = _temps(ctx, (k, n), "qvgr")
        qgv, = _temps(ctx, (m, k), "qvqg")
        qrv, qg = _temps(ctx, (m, n - k), "qvqv", "qvqg")
        f += [Assign(Ref(gg), gr), Call("matmul", [q, _block(rr, (0, k), (k, n - k))], [qrv]),
              Call("matmul", [_read(qrv), Read(Ref(gg, [Slice(0, k), Slice(k, n - k)], (1, 0)))], [qgv]),
              Call("matmul", [q, _block(gg, (0, k), (k, n - k))], [qg]),
              Assign(Ref(res, [Slice(0, m), Slice(k, n - k)]), _read(qg))]
        gqk = _read(qgv) if gq is None else gq + _read(qgv)
        grk = _block(gg, (0, k), (0, k))
    else:
        f.append(Assign(Ref(res, [Slice(0, m), Slice(k, n - k)]), Const(0.0)))
        gqk = gq
    if gqk is not None and not isinstance(gqk, Read):
        tmp, = _temps(ctx, (m, k), "qvgk")
        f.append(Assign(Ref(tmp), gqk))
        gqk = _read(tmp)
    if grk is not None:
        tmp, = _temps(ctx, (k, k), "qvrk")
        f.append(Assign(Ref(tmp), grk))
        grk = _read(tmp)
    rk, = _temps(ctx, (k, k), "qvrk")
    f.append(Assign(Ref(rk), _block(rr, (0, k), (0, k))))
    f += _qr_tall_formula(ctx, q, _read(rk), gqk, grk, Ref(res, [Slice(0, m), Slice(0, k)]))
    return _derived(ctx, f, [res], touts)


def _cholesky_vjp_formula(ctx, call, out=None):
    """``cholesky_vjp`` in primitives (``rules.cholesky_adjoint``), written into ``out`` (default:
    the call's output)."""
    stmts, value = rules.cholesky_adjoint(ctx, *call.inputs)
    return stmts + [Assign(Ref(call.outputs[0] if out is None else out), value)]


def _jvp_cholesky_vjp(ctx, call, touts):
    """The blocked adjoint of cholesky, differentiated as the formula it computes."""
    res = ctx.temp(call.outputs[0].shape, np.float64, "cvr")
    return _derived(ctx, _cholesky_vjp_formula(ctx, call, res), [res], touts)


def _jvp_lstsq_vjp(ctx, call, touts):
    """The adjoint of lstsq (``backends.linalg_runtime.lstsq_vjp``), differentiated."""
    a, b, x = call.inputs[:3]
    gx, gs = _given_inputs(call, 3)
    rcond = call.inputs[-1]
    m, n = a.shape
    at = rules._swap_last(a)
    ga, = _temps(ctx, (m, n), "lva")
    gb = ctx.temp(b.shape, np.float64, "lvb")
    f = [Assign(Ref(ga), Const(0.0)), Assign(Ref(gb), Const(0.0))]
    if gx is not None:
        u, y, agx, ax, r = (ctx.temp(b.shape, np.float64, h) for h in ("lvu", "lvy", "lvag", "lvax", "lvr"))
        p, z, qq = (ctx.temp(x.shape, np.float64, h) for h in ("lvp", "lvz", "lvq"))
        o1, o2, o3 = _temps(ctx, (m, n), "lvo1", "lvo2", "lvo3")
        f += [_lstsq_call(ctx, at, gx, rcond, u), _lstsq_call(ctx, a, _read(u), rcond, p),
              _lstsq_call(ctx, at, x, rcond, y), Call("matmul", [a, gx], [agx]),
              _lstsq_call(ctx, a, _read(agx), rcond, z), Assign(Ref(qq), gx - _read(z)),
              Call("matmul", [a, x], [ax]), Assign(Ref(r), b - _read(ax)),
              _outer(ctx, _read(u), x, o1), _outer(ctx, _read(r), _read(p), o2), _outer(ctx, _read(y), _read(qq), o3),
              Assign(Ref(ga), _read(o2) + _read(o3) - _read(o1)), Assign(Ref(gb), _read(u))]
    if gs is not None:
        k = gs.shape[0]
        uu, us = _temps(ctx, (m, k), "lvsu", "lvus")
        ss, = _temps(ctx, (k,), "lvss")
        vh, = _temps(ctx, (k, n), "lvsv")
        gsv, = _temps(ctx, (m, n), "lvsg")
        f += [Call("svd", [a], [uu, ss, vh]), Assign(Ref(us), _read(uu) * _row_of(gs)),
              Call("matmul", [_read(us), _read(vh)], [gsv]), Assign(Ref(ga), _read(gsv), accumulate=True)]
    return _derived(ctx, f, [ga, gb], touts)


# ------------------------------------------------------------- the table


def _flags(a):
    return a["given"]


LINALG_CALLS = {
    "eigh": rules.CallRule(
        lambda i, a: f"tuple(np.linalg.eigh({i[0]}, UPLO={'L' if a['lower'] else 'U'!r}))", _vjp_eigh,
        jvp=_jvp_eigh,
        flops=lambda c, size: 9 * _cube(c, size),
        doc="eigenvalues and eigenvectors of a symmetric matrix, from one triangle (LAPACK syevd)"),
    "eigh_vjp": rules.CallRule(
        lambda i, a: f"_rt.linalg.eigh_vjp({', '.join(_args(i, _flags(a), 2))}, {a['lower']})",
        jvp=_jvp_eigh_vjp, adjoint_of="eigh", flops=lambda c, size: 4 * _cube(c, size) // 3,
        doc="adjoint of eigh (Giles 2008)"),
    "svd": rules.CallRule(
        lambda i, a: f"tuple(np.linalg.svd({i[0]}, full_matrices=False))", _vjp_svd, jvp=_jvp_svd,
        flops=lambda c, size: 12 * _cube(c, size),
        doc="reduced singular value decomposition (LAPACK gesdd)"),
    "svd_vjp": rules.CallRule(
        lambda i, a: f"_rt.linalg.svd_vjp({', '.join(_args(i, _flags(a), 3))})",
        jvp=_jvp_svd_vjp, adjoint_of="svd", flops=lambda c, size: 8 * _cube(c, size),
        doc="adjoint of svd (Townsend 2016)"),
    "qr": rules.CallRule(
        lambda i, a: f"tuple(np.linalg.qr({i[0]}))", _vjp_qr, jvp=_jvp_qr, flops=lambda c, size: 4 * _cube(c, size),
        doc="reduced QR factorisation (LAPACK geqrf, orgqr)"),
    "qr_vjp": rules.CallRule(
        lambda i, a: f"_rt.linalg.qr_vjp({', '.join(_args(i, _flags(a), 2))})",
        jvp=_jvp_qr_vjp, adjoint_of="qr", flops=lambda c, size: 6 * _cube(c, size),
        doc="adjoint of qr (Walter and Lehmann 2018, Liao et al. 2019)"),
    "lstsq": rules.CallRule(
        lambda i, a: f"_rt.linalg.lstsq({i[0]}, {i[1]}, {i[2]})", _vjp_lstsq, jvp=_jvp_lstsq,
        flops=lambda c, size: 12 * _cube(c, size),
        doc="least-squares solution, rank and singular values (LAPACK gelsd)"),
    "lstsq_vjp": rules.CallRule(
        lambda i, a: f"_rt.linalg.lstsq_vjp({', '.join(_args(i[:-1], _flags(a), 3))}, {i[-1]})",
        jvp=_jvp_lstsq_vjp, adjoint_of="lstsq", flops=lambda c, size: 48 * _cube(c, size),
        doc="adjoint of lstsq (derivative of the pseudo-inverse, Golub and Pereyra 1973)"),
    "cholesky_vjp": rules.CallRule(
        lambda i, a: f"_rt.linalg.cholesky_vjp({i[0]}, {i[1]})", jvp=_jvp_cholesky_vjp, adjoint_of="cholesky",
        formula=_cholesky_vjp_formula, flops=lambda c, size: _cube(c, size) * 2 // 3,
        doc="adjoint of cholesky, blocked (Murray 2016)"),
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


def _lower_cholesky_vjp(low, s, ind):
    lt, g = (_operand(low, e, ind) for e in s.inputs)
    low.line(f"{s.outputs[0].name} = _rt.linalg.cholesky_vjp({lt}, {g})", ind)


LINALG_LOWERING = {
    "eigh": _lower_eigh, "svd": _lower_factors("svd"), "qr": _lower_factors("qr"), "lstsq": _lower_lstsq,
    "eigh_vjp": _lower_vjp("eigh", 2, ("lower",)), "svd_vjp": _lower_vjp("svd", 3), "qr_vjp": _lower_vjp("qr", 2),
    "lstsq_vjp": _lower_vjp("lstsq", 3, (-1,)), "solve_triangular": _lower_solve_triangular,
    "cholesky_vjp": _lower_cholesky_vjp,
}
