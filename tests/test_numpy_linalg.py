"""Matrix decompositions and the solves built on them: ``np.linalg.eigh``/``eigvalsh`` (both
triangles), ``svd`` (reduced, singular values alone), ``svdvals``, ``qr`` (tall, square, wide;
``mode='r'``), ``lstsq`` (tall, square, wide; vector and matrix right-hand sides), and
``scipy.linalg.solve_triangular`` (``lower``, ``trans``, ``unit_diagonal``), ``cholesky``,
``cho_factor`` and ``cho_solve`` (with its factor or one from ``np.linalg.cholesky``).

Each program is checked on every backend: its gradient against finite differences, and its
forward value, shape and dtype against plain NumPy (the raw factors too: both backends call
the LAPACK routines NumPy calls, so eigen- and singular vectors come out with NumPy's signs).
Realistic losses (weighted eigenvalues, a sign-invariant loss of eigenvectors, a low-rank
reconstruction error, a Gaussian log-likelihood through a Cholesky solve) are checked against
``jax.grad``. Refusals assert their message and the user's line.
"""

import numpy as np
import pytest
import scipy.linalg as sl

import flowgrad
from conftest import have_module
from oracle import check_forward, check_grad, check_vjp


def U(shape, lo=-1.0, hi=1.0, seed=0):
    return np.random.default_rng(seed).uniform(lo, hi, shape)


def spd(n, seed):
    B = U((n, n), seed=seed)
    return B @ B.T + n * np.eye(n)


S4 = spd(4, 1)                 # symmetric positive definite, distinct eigenvalues
A4 = U((4, 4), seed=2)         # not symmetric: eigh reads one triangle of it
W4 = U((4, 4), seed=3)
TALL, WIDE = U((6, 3), seed=4), U((3, 5), seed=5)
B6, B3 = U((6,), seed=6), U((3,), seed=7)
T4 = np.tril(U((4, 4), seed=8)) + 2.5 * np.eye(4)


# ---------------------------------------------------------------- programs


def eigen_losses(A):
    w, v = np.linalg.eigh(A)
    wu, vu = np.linalg.eigh(A, UPLO="U")
    return (np.sum(w * np.arange(1.0, 5.0)) + np.sum(v ** 2 * W4) + np.sum(np.linalg.eigvalsh(A, "U") ** 2)
            + np.sum((vu * vu) @ W4) + np.sum((vu.T @ v) ** 2 * W4))


def eigenvalues_only(A):
    return np.sum(np.linalg.eigvalsh(A) ** 3) + np.linalg.eigh(A).eigenvalues[-1]


def svd_losses(A):
    u, s, vh = np.linalg.svd(A, full_matrices=False)
    low_rank = u[:, :2] @ np.diag(s[:2]) @ vh[:2]
    return (np.sum((A - low_rank) ** 2) + np.sum(np.linalg.svd(A, compute_uv=False) * np.arange(3.0))
            + np.sum((u * u) @ np.arange(3.0)) + np.sum(vh ** 4))


def square_svd(A):
    r = np.linalg.svd(A)
    return np.sum(r.U @ np.diag(np.sqrt(r.S)) @ r.Vh) + np.sum(np.linalg.svdvals(A))


def qr_losses(A):
    q, r = np.linalg.qr(A)
    return np.sum(q * q * np.arange(1.0, A.shape[1] + 1)[: q.shape[1]]) + np.sum(np.abs(np.diag(r))) \
        + np.sum(np.linalg.qr(A, mode="r") ** 2) + np.sum((q @ r) * A)


def qr_of_both_shapes(A):
    q, r = np.linalg.qr(A.T)
    Q, R = np.linalg.qr(A)
    return np.sum(np.sin(q) * q) + np.sum(np.cos(r)) + np.sum(Q ** 3) + np.sum(R * R.T[: R.shape[0], : R.shape[1]])


def lstsq_losses(A, b):
    x, res, rank, s = np.linalg.lstsq(A, b, rcond=None)
    X, res2, _, _ = np.linalg.lstsq(A, np.stack([b, b ** 2], axis=1))
    return np.sum(x ** 2) + np.sum(res) + np.sum(s * np.arange(3.0)) + np.sum(X * X[::-1]) + np.sum(res2) + rank


def triangular_solves(A, b):
    x = sl.solve_triangular(A, b, lower=True)
    y = sl.solve_triangular(A.T, b, trans=1)
    z = sl.solve_triangular(A, np.outer(b, b[::-1]), lower=True, trans="T", unit_diagonal=True)
    u = sl.solve_triangular(A.T + np.tril(W4, -1), b * 2.0, unit_diagonal=True, trans=2)
    return np.sum(x ** 2) + np.sum(y * b) + np.sum(z ** 2) + np.sum(np.sin(u))


def cholesky_solves(A, b):
    c, lower = sl.cho_factor(A)
    L = np.linalg.cholesky(A)
    x = sl.cho_solve((c, lower), b)
    y = sl.cho_solve((L, True), np.outer(b, b))
    return (np.sum(x ** 2) + np.sum(y * A) + np.sum(sl.cho_factor(A, lower=True)[0])
            + np.sum(sl.cholesky(A) ** 2) + np.sum(sl.cholesky(A, lower=True) * W4))


def gaussian_log_likelihood(A, b):
    L = np.linalg.cholesky(A)
    alpha = sl.cho_solve((L, True), b)
    return -0.5 * b @ alpha - np.sum(np.log(np.diag(L)))


CASES = [
    (eigen_losses, (S4,)),
    (eigen_losses, (A4 + 3.0 * np.eye(4),)),
    (eigenvalues_only, (A4,)),
    (svd_losses, (TALL,)),
    (svd_losses, (WIDE,)),
    (square_svd, (S4,)),
    (qr_losses, (TALL,)),
    (qr_losses, (WIDE,)),
    (qr_of_both_shapes, (TALL,)),
    (lstsq_losses, (TALL, B6)),
    (lstsq_losses, (WIDE, B3)),
    (triangular_solves, (T4, B6[:4])),
    (cholesky_solves, (S4, B6[:4])),
    (gaussian_log_likelihood, (S4, B6[:4])),
]
IDS = [f"{fn.__name__}-{k}" for k, (fn, _) in enumerate(CASES)]


@pytest.mark.parametrize("fn, args", CASES, ids=IDS)
def test_grad(fn, args, backend):
    check_grad(fn, args, tuple(range(len(args))), backend=backend)


@pytest.mark.parametrize("fn, args", CASES, ids=IDS)
def test_forward(fn, args, backend):
    check_forward(fn, args, backend=backend, rtol=1e-10)


# ---------------------------------------------------------------- raw factors, against NumPy and SciPy


def eigh_factors(A):
    w, v = np.linalg.eigh(A)
    wu, vu = np.linalg.eigh(A, UPLO="U")
    return np.concatenate([w[:, None], v, wu[:, None], vu], axis=1)


def svd_factors(A):
    u, s, vh = np.linalg.svd(A, full_matrices=False)
    return np.concatenate([u.ravel(), s, vh.ravel()])


def qr_factors(A):
    q, r = np.linalg.qr(A)
    return np.concatenate([q.ravel(), r.ravel()])


def lstsq_outputs(A, b):
    x, res, rank, s = np.linalg.lstsq(A, b)
    return np.concatenate([x, res, s, [rank]])


def cho_factor_matrix(A):
    return sl.cho_factor(A)[0] + sl.cho_factor(A, lower=True)[0] * 2.0


def float32_eigenvalues(A):
    return np.linalg.eigvalsh(A.astype(np.float32))


FACTORS = [
    (eigh_factors, (A4,)), (svd_factors, (TALL,)), (svd_factors, (WIDE,)), (qr_factors, (TALL,)),
    (qr_factors, (WIDE,)), (lstsq_outputs, (TALL, B6)), (lstsq_outputs, (WIDE, B3)), (cho_factor_matrix, (S4,)),
]


@pytest.mark.parametrize("fn, args", FACTORS, ids=[f"{f.__name__}-{k}" for k, (f, _) in enumerate(FACTORS)])
def test_factors_are_numpys(fn, args, backend):
    check_forward(fn, args, backend=backend, rtol=1e-12)


def test_float32_factorised_in_float64(backend):
    got = flowgrad.jit(float32_eigenvalues, backend=backend)(S4)
    assert got.dtype == np.float32
    assert np.allclose(got, float32_eigenvalues(S4), rtol=1e-5)


def test_vjp_of_the_factors(backend):
    """Cotangents on every output at once (eigenvalues and eigenvectors, u s vh, q r)."""
    def factors(A):
        w, v = np.linalg.eigh(A @ A.T + np.eye(3))
        u, s, vh = np.linalg.svd(A, full_matrices=False)
        q, r = np.linalg.qr(A)
        return np.concatenate([w, (v * v).ravel(), s, (u @ vh).ravel(), (q @ r).ravel(), np.abs(r).ravel()])
    check_vjp(factors, (U((3, 3), seed=9),), backend=backend)


def test_eigh_gradient_goes_to_the_triangle_read(backend):
    def f(A):
        return np.sum(np.linalg.eigvalsh(A) * np.arange(4.0)) + np.sum(np.linalg.eigvalsh(A, "U") ** 2)
    g = flowgrad.grad(f, backend=backend)(A4)
    lower = np.linalg.eigh(np.tril(A4) + np.tril(A4, -1).T)[1]
    upper = np.linalg.eigh(np.triu(A4) + np.triu(A4, 1).T)
    gl = lower @ np.diag(np.arange(4.0)) @ lower.T
    gu = upper[1] @ np.diag(2 * upper[0]) @ upper[1].T
    want = np.tril(2 * gl) - np.diag(np.diag(gl)) + np.triu(2 * gu) - np.diag(np.diag(gu))
    assert np.allclose(g, want, rtol=1e-10, atol=1e-12)


def rank_deficient_residuals(A, b):
    return np.linalg.lstsq(A, b)[1]


def test_lstsq_residuals_of_a_rank_deficient_matrix_are_nan(backend):
    A = np.ones((4, 2))
    got = flowgrad.jit(rank_deficient_residuals, backend=backend)(A, B6[:4])
    assert np.linalg.lstsq(A, B6[:4])[1].size == 0 and got.shape == (1,) and np.isnan(got[0])


# ---------------------------------------------------------------- against jax.grad

jax_needed = [pytest.mark.jax, pytest.mark.skipif(not have_module("jax"), reason="needs jax")]


def _jax():
    import jax
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp
    return jax, jnp


def _sym_lower(jnp, A):
    return jnp.tril(A) + jnp.tril(A, -1).T        # what eigh(A) reads


def weighted_eigenvalues(A):
    w = np.linalg.eigvalsh(A)
    return np.sum(w * np.linspace(0.5, 2.0, 4)) + np.log(w[0])


def sign_invariant_eigenvectors(A):
    w, v = np.linalg.eigh(A)
    return np.sum(v ** 2 * W4) + np.sum((v[:, :2] @ v[:, :2].T) ** 2 * W4)


def low_rank_error(A):
    u, s, vh = np.linalg.svd(A, full_matrices=False)
    return np.sum((A - (u[:, :2] * s[:2]) @ vh[:2]) ** 2) + np.sum(s ** 3)


def qr_projection(A):
    q, r = np.linalg.qr(A)
    return np.sum((q @ q.T) * np.outer(B6, B6)) + np.sum(np.log(np.abs(np.diag(r))))


def least_squares(A, b):
    x = np.linalg.lstsq(A, b)[0]
    return np.sum(x ** 2) + np.sum((A @ x - b) ** 2)


def triangular(A, b):
    return np.sum(sl.solve_triangular(A, b, lower=True) ** 2) + \
        np.sum(sl.solve_triangular(A, b, lower=True, trans=1, unit_diagonal=True) * b)


JAX_CASES = [
    (weighted_eigenvalues, (S4,),
     lambda jax, jnp: lambda A: jnp.sum(jnp.linalg.eigvalsh(_sym_lower(jnp, A)) * jnp.linspace(0.5, 2.0, 4))
     + jnp.log(jnp.linalg.eigvalsh(_sym_lower(jnp, A))[0])),
    (sign_invariant_eigenvectors, (S4,),
     lambda jax, jnp: lambda A: (lambda v: jnp.sum(v ** 2 * W4) + jnp.sum((v[:, :2] @ v[:, :2].T) ** 2 * W4))(
         jnp.linalg.eigh(_sym_lower(jnp, A))[1])),
    (low_rank_error, (TALL,),
     lambda jax, jnp: lambda A: (lambda u, s, vh: jnp.sum((A - (u[:, :2] * s[:2]) @ vh[:2]) ** 2) + jnp.sum(s ** 3))(
         *jnp.linalg.svd(A, full_matrices=False))),
    (qr_projection, (TALL,),
     lambda jax, jnp: lambda A: (lambda q, r: jnp.sum((q @ q.T) * jnp.outer(B6, B6))
                                 + jnp.sum(jnp.log(jnp.abs(jnp.diag(r)))))(*jnp.linalg.qr(A))),
    (least_squares, (TALL, B6),
     lambda jax, jnp: lambda A, b: (lambda x: jnp.sum(x ** 2) + jnp.sum((A @ x - b) ** 2))(jnp.linalg.lstsq(A, b)[0])),
    (triangular, (T4, B6[:4]),
     lambda jax, jnp: lambda A, b: jnp.sum(jax.scipy.linalg.solve_triangular(A, b, lower=True) ** 2)
     + jnp.sum(jax.scipy.linalg.solve_triangular(A, b, lower=True, trans=1, unit_diagonal=True) * b)),
    (gaussian_log_likelihood, (S4, B6[:4]),
     lambda jax, jnp: lambda A, b: (lambda L: -0.5 * b @ jax.scipy.linalg.cho_solve((L, True), b)
                                    - jnp.sum(jnp.log(jnp.diag(L))))(jnp.linalg.cholesky(_sym_lower(jnp, A)))),
]


@pytest.mark.parametrize("fn, args, twin", JAX_CASES, ids=[c[0].__name__ for c in JAX_CASES])
@pytest.mark.parametrize("mark", [pytest.param(0, marks=jax_needed)], ids=[""])
def test_against_jax(fn, args, twin, mark, backend):
    jax, jnp = _jax()
    positions = tuple(range(len(args)))
    ours = flowgrad.grad(fn, wrt=positions, backend=backend)(*args)
    theirs = jax.grad(twin(jax, jnp), argnums=positions)(*[jnp.asarray(a) for a in args])
    for g, j in zip(ours, theirs):
        np.testing.assert_allclose(g, np.asarray(j), rtol=1e-8, atol=1e-10 * max(1.0, float(np.max(np.abs(j)))))


# ---------------------------------------------------------------- refusals


def full_svd_of_a_tall_matrix(A):
    return np.linalg.svd(A)[0]


def hermitian_svd(A):
    return np.linalg.svd(A, hermitian=True)[1]


def complete_qr_of_a_tall_matrix(A):
    return np.linalg.qr(A, mode="complete")[0]


def raw_qr(A):
    return np.linalg.qr(A, mode="raw")[0]


def eigh_of_a_stack(A):
    return np.linalg.eigvalsh(np.stack([A, A]))


def eigh_with_a_bad_uplo(A):
    return np.linalg.eigvalsh(A, UPLO="X")


def eigh_of_a_rectangle(A):
    return np.linalg.eigvalsh(A)


def cho_solve_of_a_bare_matrix(A, b):
    return sl.cho_solve(A, b)


def triangular_with_a_bad_trans(A, b):
    return sl.solve_triangular(A, b, trans=3)


def triangular_with_a_run_time_flag(A, b):
    return sl.solve_triangular(A, b, lower=b[0] > 0)


@pytest.mark.parametrize("fn, args, error, words", [
    (full_svd_of_a_tall_matrix, (TALL,), flowgrad.UnsupportedError, "pass full_matrices=False"),
    (hermitian_svd, (S4,), flowgrad.UnsupportedError, "use np.linalg.eigh"),
    (complete_qr_of_a_tall_matrix, (TALL,), flowgrad.UnsupportedError, "use mode='reduced'"),
    (raw_qr, (TALL,), flowgrad.UnsupportedError, "np.linalg.qr(mode='raw')"),
    (eigh_of_a_stack, (S4,), flowgrad.UnsupportedError, "stack of matrices"),
    (eigh_with_a_bad_uplo, (S4,), flowgrad.FlowgradError, "UPLO argument must be 'L' or 'U'"),
    (eigh_of_a_rectangle, (TALL,), flowgrad.FlowgradError, "must be square"),
    (cho_solve_of_a_bare_matrix, (S4, B3), flowgrad.FlowgradError, "pass (c, lower)"),
    (triangular_with_a_bad_trans, (T4, B6[:4]), flowgrad.FlowgradError, "trans must be"),
    (triangular_with_a_run_time_flag, (T4, B6[:4]), flowgrad.UnsupportedError, "lower known only at run time"),
], ids=lambda v: getattr(v, "__name__", None))
def test_refused_with_a_message(fn, args, error, words, backend):
    with pytest.raises(error) as excinfo:
        flowgrad.jit(fn, backend=backend)(*args)
    assert words in str(excinfo.value)
    assert "test_numpy_linalg.py:" in str(excinfo.value)


def lower_solve(A, b):
    return sl.solve_triangular(A, b, lower=True)


def test_singular_triangular_matrix_raises(backend):
    A = np.tril(U((3, 3), seed=10))
    A[1, 1] = 0.0
    with pytest.raises(np.linalg.LinAlgError):
        flowgrad.jit(lower_solve, backend=backend)(A, B3)
