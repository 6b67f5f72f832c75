"""while_solver: Jacobi iteration on a diagonally dominant system until a data-dependent convergence test (while + break, capped by max_iter)."""
import numpy as np

TOL = 1e-8


def kernel(A, b, max_iter):
    n = A.shape[0]
    d = np.zeros(n)
    for i in range(n):
        d[i] = A[i, i]
    x = np.zeros(n)
    r = b - A @ x
    it = 0
    while it < max_iter:
        if np.max(np.abs(r)) < TOL:
            break
        x += r / d
        r = b - A @ x
        it += 1
    return np.sum(x * x) + np.sum(x)


WRT = ("A", "b")
SIZES = {"test": {"n": 10, "max_iter": 500}, "bench": {"n": 2000, "max_iter": 500}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    A = 0.5 * rng.standard_normal((n, n)) / np.sqrt(n) + np.diag(rng.uniform(2.0, 3.0, n))
    b = rng.standard_normal(n)
    return (A, b, p["max_iter"])


JAX_NOTE = ("data-dependent while loop (convergence test); lax.while_loop is not reverse-differentiable "
            "(would need a fixed trip count or an implicit-function custom_vjp)")
