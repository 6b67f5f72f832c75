"""cg_solver: conjugate gradient on an SPD system until ||r|| < tol*||b|| (data-dependent while with np.linalg.norm, capped by break)."""
import numpy as np

TOL = 1e-9


def kernel(A, b, max_iter):
    A = 0.5 * (A + A.T)          # CG needs a symmetric operator
    x = np.zeros_like(b)
    r = b - A @ x
    p = r.copy()
    rs = r @ r
    bnorm = np.linalg.norm(b)
    it = 0
    while np.sqrt(rs) > TOL * bnorm:
        if it >= max_iter:
            break
        Ap = A @ p
        alpha = rs / (p @ Ap)
        x += alpha * p
        r -= alpha * Ap
        rs_new = r @ r
        p = r + (rs_new / rs) * p
        rs = rs_new
        it += 1
    return x @ b + np.sum(x * x)


WRT = ("A", "b")
SIZES = {"test": {"n": 16, "max_iter": 200}, "bench": {"n": 2000, "max_iter": 200}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    M = rng.standard_normal((n, n)) / np.sqrt(n)
    A = 0.25 * (M @ M.T) + np.eye(n)
    b = rng.standard_normal(n)
    return (A, b, p["max_iter"])


JAX_NOTE = ("data-dependent while loop (CG until the residual norm falls below tol); lax.while_loop is not "
            "reverse-differentiable")
