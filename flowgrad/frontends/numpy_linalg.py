"""NumPy's and SciPy's matrix decompositions and the solves built on them: ``np.linalg.eigh``,
``eigvalsh``, ``svd``, ``svdvals``, ``qr``, ``lstsq``, and ``scipy.linalg.solve_triangular``,
``cholesky``, ``cho_factor`` and ``cho_solve``.

The decompositions are Calls of ``flowgrad.linalg_ops`` (with their adjoints); the Cholesky
functions are built from ``np.linalg.cholesky`` and triangular solves. Each takes one matrix
(no stacks) and works in float64: a float32 matrix is factorised in float64 and the factors
rounded to float32, so they agree with NumPy's float32 ones to float32 rounding.

What the derivatives mean: ``eigh`` reads one triangle of its matrix (``UPLO``), so the gradient
goes to that triangle, each element below (above) the diagonal standing for itself and its
mirror image (as for ``np.linalg.cholesky``); eigenvectors (and singular vectors) are defined up to
sign, and a loss of them should not depend on the sign (``v ** 2``, ``u @ np.diag(s) @ vh``).
Where eigenvalues (singular values) coincide and their vectors are used the derivative is
infinite, as in JAX. ``lstsq``'s derivative is that of the pseudo-inverse, exact where the rank
of the matrix is locally constant (a full-rank matrix).
"""
from __future__ import annotations

import numpy as np

from ..errors import FlowgradError, unsupported
from ..ir.core import F64, I64, Call, Const, Expr, Read, Ref, const_value, op
from .numpy_api import reduce, matmul, _transpose

# NumPy's result types (named tuples), taken from NumPy itself
_EighResult = type(np.linalg.eigh(np.eye(1)))
_SVDResult = type(np.linalg.svd(np.eye(1)))
_QRResult = type(np.linalg.qr(np.eye(1)))


def _read(fe, e, loc):
    return e if isinstance(e, Read) else fe.materialize(e, "t", loc)


def _matrix(fe, loc, a, what, square=False):
    """``(a as a float64 Read, the float dtype of the results)`` for one matrix."""
    e = fe.to_expr(a, loc)
    if len(e.shape) != 2:
        if len(e.shape) > 2:
            raise unsupported(loc, f"{what} of a stack of matrices", "call it on one matrix at a time")
        raise FlowgradError(f"{loc}: {what}: {len(e.shape)}-dimensional array given. Array must be at least "
                            "two-dimensional")
    m, n = (const_value(d) for d in e.shape)
    if square and m is not None and n is not None and m != n:
        raise FlowgradError(f"{loc}: {what}: Last 2 dimensions of the array must be square")
    if e.dtype.kind not in "biuf":
        raise unsupported(loc, f"{what} of a {e.dtype} matrix", "pass a real float matrix")
    out = e.dtype if e.dtype.kind == "f" else F64
    return _read(fe, e if e.dtype == F64 else op("float64", e), loc), out


def _rhs(fe, loc, b, what):
    e = fe.to_expr(b, loc)
    if len(e.shape) not in (1, 2):
        raise unsupported(loc, f"{what} with a right-hand side of {len(e.shape)} dimensions", "pass a vector or a matrix")
    return _read(fe, e if e.dtype == F64 else op("float64", e), loc), e.dtype if e.dtype.kind == "f" else F64


def _result(c, dtype):
    r = Read(Ref(c) if c.ndim else Ref(c, ()))
    return r if dtype == F64 else op(dtype.name, r)


def _smaller(m, n):
    return Const(min(const_value(m), const_value(n))) if const_value(m) is not None and \
        const_value(n) is not None else op("minimum", m, n)


def _upper_or_lower(UPLO, loc):
    if UPLO not in ("L", "U"):
        raise FlowgradError(f"{loc}: UPLO argument must be 'L' or 'U'")
    return UPLO == "L"


def _eigh(fe, loc, a, UPLO="L"):
    e, dt = _matrix(fe, loc, a, "np.linalg.eigh", square=True)
    n = e.shape[0]
    w, v = fe.container("eigvals", F64, (n,)), fe.container("eigvecs", F64, (n, n))
    fe.emit(Call("eigh", [e], [w, v], {"lower": _upper_or_lower(UPLO, loc)}, loc=loc))
    return _EighResult(_result(w, dt), _result(v, dt))


def _eigvalsh(fe, loc, a, UPLO="L"):
    return _eigh(fe, loc, a, UPLO)[0]


def _factor_svd(fe, loc, e):
    m, n = e.shape
    k = _smaller(m, n)
    u, s, vh = (fe.container(h, F64, shape) for h, shape in (("svd_u", (m, k)), ("svd_s", (k,)), ("svd_vh", (k, n))))
    fe.emit(Call("svd", [e], [u, s, vh], {}, loc=loc))
    return u, s, vh


def _svd(fe, loc, a, full_matrices=True, compute_uv=True, hermitian=False):
    e, dt = _matrix(fe, loc, a, "np.linalg.svd")
    if hermitian:
        raise unsupported(loc, "np.linalg.svd(hermitian=True)", "use np.linalg.eigh of the symmetric matrix")
    m, n = (const_value(d) for d in e.shape)
    if compute_uv and full_matrices and (m is None or m != n):
        raise unsupported(loc, "np.linalg.svd(full_matrices=True) of a matrix that is not square",
                          "pass full_matrices=False for the reduced factors (u has min(m, n) columns)")
    u, s, vh = _factor_svd(fe, loc, e)
    if not compute_uv:
        return _result(s, dt)
    return _SVDResult(_result(u, dt), _result(s, dt), _result(vh, dt))


def _svdvals(fe, loc, x):
    return _svd(fe, loc, x, compute_uv=False)


def _qr(fe, loc, a, mode="reduced"):
    e, dt = _matrix(fe, loc, a, "np.linalg.qr")
    m, n = (const_value(d) for d in e.shape)
    if mode not in ("reduced", "complete", "r"):
        raise unsupported(loc, f"np.linalg.qr(mode={mode!r})", "use mode='reduced' (or 'r')")
    if mode == "complete" and (m is None or n is None or m > n):
        raise unsupported(loc, "np.linalg.qr(mode='complete') of a matrix with more rows than columns",
                          "use mode='reduced' (q has min(m, n) columns)")
    k = _smaller(*e.shape)
    q, r = fe.container("qr_q", F64, (e.shape[0], k)), fe.container("qr_r", F64, (k, e.shape[1]))
    fe.emit(Call("qr", [e], [q, r], {}, loc=loc))
    if mode == "r":
        return _result(r, dt)
    return _QRResult(_result(q, dt), _result(r, dt))


def _lstsq(fe, loc, a, b, rcond=None):
    """``(x, residuals, rank, s)``. The residuals are ``sum((b - a @ x) ** 2, axis=0)`` for a matrix
    with more rows than columns, as NumPy's are for a full-rank one; where NumPy returns none
    (the rank is smaller) they are NaN. For other shapes there are none (an empty array)."""
    e, dt = _matrix(fe, loc, a, "np.linalg.lstsq")
    rhs, bdt = _rhs(fe, loc, b, "np.linalg.lstsq")
    m, n = e.shape
    if const_value(m) is not None and const_value(rhs.shape[0]) is not None and const_value(m) != const_value(rhs.shape[0]):
        raise FlowgradError(f"{loc}: np.linalg.lstsq: Incompatible dimensions ({const_value(m)} rows, "
                            f"{const_value(rhs.shape[0])} right-hand sides)")
    dt = np.result_type(dt, bdt)
    if rcond is None:             # NumPy's default: machine precision times the larger dimension
        big = op("float64", op("maximum", m, n)) if const_value(m) is None or const_value(n) is None else \
            float(max(const_value(m), const_value(n)))
        rc = op("multiply", float(np.finfo(np.float64).eps), big)
    else:
        rc = op("float64", fe.to_expr(rcond, loc))
    k = _smaller(m, n)
    x = fe.container("lstsq_x", F64, (n,) + rhs.shape[1:])
    rank, s = fe.container("rank", I64, ()), fe.container("lstsq_s", F64, (k,))
    fe.emit(Call("lstsq", [e, rhs, rc], [x, rank, s], {}, loc=loc))
    solution, count = Read(Ref(x)), Read(Ref(rank, ()))
    tall = const_value(m) is not None and const_value(n) is not None and const_value(m) > const_value(n)
    if tall:
        resid = op("subtract", rhs, matmul(fe, e, solution, loc))
        sums = reduce(fe, "sum", op("multiply", resid, resid), 0, len(rhs.shape) == 1, loc)
        res = fe.materialize(op("where", op("equal", count, n), sums, np.nan), "residuals", loc)
    elif const_value(m) is None or const_value(n) is None:
        raise unsupported(loc, "np.linalg.lstsq of a matrix whose shape is known only at run time",
                          "slice the matrix with constant bounds")
    else:
        res = fe.const_array(np.zeros(0))
    return (_result(x, dt), res if dt == F64 else op(dt.name, res), count, _result(s, dt))


# ---------------------------------------------------------------- scipy.linalg


def _trans(trans, loc):
    flag = {0: 0, 1: 1, 2: 1, "N": 0, "T": 1, "C": 1}.get(trans)
    if flag is None:
        raise FlowgradError(f"{loc}: scipy.linalg.solve_triangular: trans must be 0, 1, 2, 'N', 'T' or 'C', "
                            f"not {trans!r}")
    return flag


def _known(value, what, loc):
    if isinstance(value, Expr):
        if const_value(value) is None:
            raise unsupported(loc, f"{what} known only at run time", f"pass {what} as a constant")
        value = const_value(value)
    return bool(value)


def _solve_triangular(fe, loc, a, b, trans=0, lower=False, unit_diagonal=False, overwrite_b=False,
                      check_finite=True):
    e, dt = _matrix(fe, loc, a, "scipy.linalg.solve_triangular", square=True)
    rhs, bdt = _rhs(fe, loc, b, "scipy.linalg.solve_triangular")
    n, rows = const_value(e.shape[0]), const_value(rhs.shape[0])
    if n is not None and rows is not None and n != rows:
        raise FlowgradError(f"{loc}: scipy.linalg.solve_triangular: shapes of a {(n, n)} and b {(rows,)} are "
                            "incompatible")
    x = fe.container("trisolve", F64, rhs.shape)
    attrs = {"lower": _known(lower, "lower", loc), "trans": _trans(trans, loc),
             "unit": _known(unit_diagonal, "unit_diagonal", loc)}
    fe.emit(Call("solve_triangular", [e, rhs], [x], attrs, loc=loc))
    return _result(x, np.result_type(dt, bdt))


def _factor(fe, loc, e, lower):
    """The Cholesky factor of ``e`` from its ``lower`` (else upper) triangle, in that triangle."""
    src = e if lower else _read(fe, _transpose(fe, loc, e), loc)
    c = fe.container("cholesky", F64, e.shape)
    fe.emit(Call("cholesky", [src], [c], {}, loc=loc))
    return Read(Ref(c)) if lower else _transpose(fe, loc, Read(Ref(c)))


def _scipy_cholesky(fe, loc, a, lower=False, overwrite_a=False, check_finite=True):
    e, dt = _matrix(fe, loc, a, "scipy.linalg.cholesky", square=True)
    f = _factor(fe, loc, e, _known(lower, "lower", loc))
    return f if dt == F64 else op(dt.name, f)


def _cho_factor(fe, loc, a, lower=False, overwrite_a=False, check_finite=True):
    """``(c, lower)``: the factor in one triangle of ``c``, ``a``'s own elements in the other (as
    SciPy leaves them; ``cho_solve`` reads only the factor)."""
    e, dt = _matrix(fe, loc, a, "scipy.linalg.cho_factor", square=True)
    low = _known(lower, "lower", loc)
    f = _read(fe, _factor(fe, loc, e, low), loc)
    rest = fe.container("cho_rest", F64, e.shape)
    fe.emit(Call("triu" if low else "tril", [e], [rest], {"k": 1 if low else -1}, loc=loc))
    c = fe.materialize(op("add", f, Read(Ref(rest))), "cho_factor", loc)
    return (c if dt == F64 else op(dt.name, c), low)


def _cho_solve(fe, loc, c_and_lower, b, overwrite_b=False, check_finite=True):
    if not isinstance(c_and_lower, (tuple, list)) or len(c_and_lower) != 2:
        raise FlowgradError(f"{loc}: scipy.linalg.cho_solve: pass (c, lower), as cho_factor returns")
    c, lower = c_and_lower
    low = _known(lower, "the lower flag of cho_solve", loc)
    first = _solve_triangular(fe, loc, c, b, trans=0 if low else 1, lower=low)
    return _solve_triangular(fe, loc, c, first, trans=1 if low else 0, lower=low)


def scipy_functions():
    """The ``scipy.linalg`` functions the frontend lowers (imported only once scipy is)."""
    import scipy.linalg as sl
    return {sl.solve_triangular: _solve_triangular, sl.cholesky: _scipy_cholesky, sl.cho_factor: _cho_factor,
            sl.cho_solve: _cho_solve}


FUNCTIONS = {
    np.linalg.eigh: _eigh, np.linalg.eigvalsh: _eigvalsh, np.linalg.svd: _svd, np.linalg.qr: _qr,
    np.linalg.lstsq: _lstsq,
}
if hasattr(np.linalg, "svdvals"):
    FUNCTIONS[np.linalg.svdvals] = _svdvals

METHODS = {}
