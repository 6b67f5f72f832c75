"""The adjoints of the matrix decompositions, and the least-squares and triangular solves, as
NumPy functions that generated code calls (``_rt.linalg.<name>`` in the NumPy backend's source).

Each adjoint is written in the part of NumPy that Numba compiles (no keyword arguments, ``None``
for an output whose adjoint is zero), so the native backend runs the same formula compiled
(``native_linalg``); the helpers they call are registered with Numba for that where it is
installed. Matrices are float64; ``lower`` names the triangle a decomposition read.
"""
from __future__ import annotations

import numpy as np

try:
    from numba.extending import register_jitable as _compiled_too
except ImportError:                  # the NumPy backend alone: plain functions
    def _compiled_too(fn):
        return fn


@_compiled_too
def _triangle(ga, lower):
    """The adjoint ``ga`` of a symmetric matrix that was read from one triangle: each element
    below (above) the diagonal stands for itself and its mirror image."""
    both = ga + ga.T - np.diag(np.diag(ga))
    return np.tril(both) if lower else np.triu(both)


@_compiled_too
def _gaps(values, eye):
    """``1 / (values[j] - values[i])`` off the diagonal, 0 on it (infinite for equal values)."""
    n = values.shape[0]
    return (1.0 - eye) / (values.reshape(1, n) - values.reshape(n, 1) + eye)


def eigh_vjp(w, v, gw, gv, lower):
    """The adjoint of ``w, v = np.linalg.eigh(a)`` w.r.t. the triangle of ``a`` it read:
    ``v (diag(gw) + F * (v.T gv)) v.T`` with ``F[i, j] = 1 / (w[j] - w[i])`` (Giles, 2008, "An
    extended collection of matrix derivative results"; Seeger et al., 2017), mapped onto the
    triangle. With ``gv`` None (only eigenvalues used) equal eigenvalues are harmless; otherwise
    their eigenvectors are not unique and the adjoint is infinite, as JAX's is."""
    n = w.shape[0]
    inner = np.zeros((n, n))
    if gv is not None:
        inner = _gaps(w, np.eye(n)) * (v.T @ gv)
    if gw is not None:
        inner = inner + np.diag(gw)
    return _triangle(v @ inner @ v.T, lower)


def svd_vjp(u, s, vh, gu, gs, gvh):
    """The adjoint of ``u, s, vh = np.linalg.svd(a, full_matrices=False)`` (Townsend, 2016,
    "Differentiating the singular value decomposition"), for ``a`` of shape (m, n), k = min(m, n):

        U [(F * (U'gU - gU'U)) S + diag(gS) + S (F * (V'gV - gV'V))] V'
          + (I - UU') gU S^-1 V' + U S^-1 gV' (I - VV'),     F[i, j] = 1 / (s[j]^2 - s[i]^2).

    Equal singular values make F infinite where singular vectors are used (they are not unique);
    a zero one makes the last two terms infinite (the rank is not locally constant)."""
    m, k, n = u.shape[0], s.shape[0], vh.shape[1]
    inner = np.zeros((k, k))
    ga = np.zeros((m, n))
    if gs is not None:
        inner = inner + np.diag(gs)
    if gu is not None or gvh is not None:
        f = _gaps(s * s, np.eye(k))
        if gu is not None:
            utgu = u.T @ gu
            inner = inner + (f * (utgu - utgu.T)) * s.reshape(1, k)
            if m > k:
                ga = ga + ((gu - u @ utgu) / s.reshape(1, k)) @ vh
        if gvh is not None:
            vtgv = vh @ gvh.T
            inner = inner + s.reshape(k, 1) * (f * (vtgv - vtgv.T))
            if n > k:
                ga = ga + (u / s.reshape(1, k)) @ (gvh - vtgv.T @ vh)
    return ga + u @ inner @ vh


@_compiled_too
def _copyltu(m):
    """The lower triangle of ``m`` mirrored onto the upper one."""
    return np.tril(m) + np.tril(m, -1).T


@_compiled_too
def _qr_tall_vjp(q, r, gq, gr):
    """The adjoint of ``q, r = qr(a)`` for ``a`` with at least as many rows as columns:
    ``(gQ + Q copyltu(M)) R^-T`` with ``M = R gR' - gQ'Q`` (Walter and Lehmann, 2018; Liao et
    al., 2019, "Differentiable programming tensor networks")."""
    m = r @ gr.T - gq.T @ q
    return np.ascontiguousarray(np.linalg.solve(r, (gq + q @ _copyltu(m)).T).T)


def qr_vjp(q, r, gq, gr):
    """The adjoint of ``q, r = np.linalg.qr(a)`` (reduced). For a wide ``a = [X | Y]`` (m < n),
    ``R = [U | V]`` with ``X = QU`` and ``Y = QV``: ``Y``'s adjoint is ``Q gV``, and ``X``'s that
    of the square factorisation with ``gQ + Y gV'`` (Liao et al., 2019)."""
    m, k, n = q.shape[0], r.shape[0], r.shape[1]
    zq = np.zeros((m, k)) if gq is None else gq
    zr = np.zeros((k, n)) if gr is None else gr
    if k == n:
        return _qr_tall_vjp(q, r, zq, zr)
    gv = np.ascontiguousarray(zr[:, k:])
    ga = np.empty((m, n))
    ga[:, :k] = _qr_tall_vjp(q, np.ascontiguousarray(r[:, :k]), zq + (q @ np.ascontiguousarray(r[:, k:])) @ gv.T,
                             np.ascontiguousarray(zr[:, :k]))
    ga[:, k:] = q @ gv
    return ga


def lstsq(a, b, rcond):
    """``x, rank, s`` of ``np.linalg.lstsq(a, b, rcond)`` (the residuals are formed by the caller)."""
    x, _, rank, s = np.linalg.lstsq(a, b, rcond)
    return x, int(rank), s


@_compiled_too
def _pinv_t(a, y, rcond):
    """``pinv(a).T @ y``: the least-squares solution of ``a.T z = y``."""
    return np.linalg.lstsq(np.ascontiguousarray(a.T), y, rcond)[0]


@_compiled_too
def _columns(x):
    return np.ascontiguousarray(x).reshape(x.shape[0], -1)


def lstsq_vjp(a, b, x, gx, gs, rcond):
    """``(ga, gb)``, the adjoint of ``x = pinv(a) @ b`` (and of the singular values ``s``), from
    the derivative of the pseudo-inverse (Golub and Pereyra, 1973), exact where the rank of ``a``
    does not change nearby (a full-rank ``a``):

        ga = -pinv(a)' gx x' + r (pinv(a) pinv(a)' gx)' + pinv(a)' x ((I - pinv(a) a) gx)',
        gb = pinv(a)' gx,   r = b - a x;   and U diag(gs) V' for the singular values."""
    rc = rcond
    ga = np.zeros(a.shape)
    gb = np.zeros(b.shape)
    if gx is not None:
        g2, x2, b2 = _columns(gx), _columns(x), _columns(b)
        u = _pinv_t(a, g2, rc)
        p = np.linalg.lstsq(a, u, rc)[0]
        y = _pinv_t(a, x2, rc)
        q = g2 - np.linalg.lstsq(a, a @ g2, rc)[0]
        ga = ga - u @ x2.T + (b2 - a @ x2) @ p.T + y @ q.T
        gb = np.ascontiguousarray(u).reshape(b.shape)
    if gs is not None:
        uu, _, vh = np.linalg.svd(a, False)
        ga = ga + (uu * gs.reshape(1, gs.shape[0])) @ vh
    return ga, np.ascontiguousarray(gb)


CHOLESKY_BLOCK = 64      # the order of the diagonal blocks ``cholesky_vjp`` works in


@_compiled_too
def _cholesky_block_vjp(d, gd):
    """``cholesky_vjp`` of one block (or of a small matrix), by the formula: with ``P`` the lower
    triangle of ``d^T gd``, its diagonal halved, and ``S = d^-T P d^-1``, the triangle receives
    ``S + S^T`` below the diagonal and ``S`` on it (Murray 2016, eq. 10)."""
    n = d.shape[0]
    p = np.tril(np.ascontiguousarray(d.T) @ gd)
    for i in range(n):
        p[i, i] *= 0.5
    x = solve_triangular(d, p, True, 1, False)                                    # d^-T P
    st = solve_triangular(d, np.ascontiguousarray(x.T), True, 1, False)            # S^T = d^-T x^T
    out = np.tril(st + st.T)
    for i in range(n):
        out[i, i] = st[i, i]
    return out


def cholesky_vjp(l, gl):
    """The adjoint the lower triangle of ``a`` receives from ``l = np.linalg.cholesky(a)`` given
    ``gl`` (each element below the diagonal standing for itself and its mirror image), by the
    blocked reverse mode of Murray (2016, "Differentiation of the Cholesky decomposition",
    section 4): the blocked factorisation run backwards, a block column at a time, in products
    and triangular solves of blocks. Its cost is about twice the factorisation's (n^3 / 3
    multiply-adds), where the formula on whole matrices (``_cholesky_block_vjp``) takes a product
    and two triangular solves of n x n matrices, 2 n^3. The forward factorisation, block column
    ``j:k``: ``D -= R R^T``, ``D = chol(D)``, ``B -= C R^T``, ``B = B D^-T``, with ``R = l[j:k, :j]``,
    ``D = l[j:k, j:k]``, ``B = l[k:, j:k]``, ``C = l[k:, :j]``; backwards, with the adjoints of those
    blocks in the same places of ``ga``: ``gB = gB D^-1``, ``gD -= tril(gB^T B)``, ``gC -= gB R``,
    ``gR -= gB^T C``, ``gD = chol_vjp(D, gD)``, ``gR -= (gD + gD^T) R``."""
    n = l.shape[0]
    ga = np.tril(np.ascontiguousarray(gl))
    if n == 0:
        return ga
    for j in range(((n - 1) // CHOLESKY_BLOCK) * CHOLESKY_BLOCK, -1, -CHOLESKY_BLOCK):
        k = min(n, j + CHOLESKY_BLOCK)
        d = np.ascontiguousarray(l[j:k, j:k])
        if k < n:
            b = np.ascontiguousarray(l[k:, j:k])
            gbt = solve_triangular(d, np.ascontiguousarray(ga[k:, j:k].T), True, 1, False)     # (gB D^-1)^T
            gb = np.ascontiguousarray(gbt.T)
            ga[k:, j:k] = gb
            ga[j:k, j:k] -= np.tril(gbt @ b)
            if j:
                ga[k:, :j] -= gb @ np.ascontiguousarray(l[j:k, :j])
                ga[j:k, :j] -= gbt @ np.ascontiguousarray(l[k:, :j])
        gd = _cholesky_block_vjp(d, np.ascontiguousarray(ga[j:k, j:k]))
        ga[j:k, j:k] = gd
        if j:
            ga[j:k, :j] -= (gd + gd.T) @ np.ascontiguousarray(l[j:k, :j])
    return ga


def solve_triangular(a, b, lower, trans, unit):
    """``scipy.linalg.solve_triangular(a, b, trans, lower, unit_diagonal)``: LAPACK's trtrs."""
    import scipy.linalg
    return scipy.linalg.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit, check_finite=False)
