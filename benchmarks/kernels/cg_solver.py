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
SIZES = {"test": {"n": 16, "max_iter": 200}, "bench": {"n": 2000, "max_iter": 200},
         # bench4, 4x the work: n doubled; the CG iteration count does not depend on n
         "bench4": {"n": 4000, "max_iter": 200}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    M = rng.standard_normal((n, n)) / np.sqrt(n)
    A = 0.25 * (M @ M.T) + np.eye(n)
    b = rng.standard_normal(n)
    return (A, b, p["max_iter"])


def jax_kernel(A, b, max_iter):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    b = jnp.asarray(b)
    A = 0.5 * (A + A.T)
    x = jnp.zeros_like(b)
    r = b - A @ x
    bnorm = jnp.linalg.norm(b)

    # max_iter bounds the while loop: a fori_loop of max_iter steps; a step after convergence
    # computes and discards its update (jnp.where), so the state stays as the while loop left
    # it.  (lax.cond would skip that work, but its reverse pass keeps A for every step.)
    def body(it, c):
        x, r, p, rs = c
        active = jnp.sqrt(rs) > TOL * bnorm
        Ap = A @ p
        alpha = rs / jnp.where(active, p @ Ap, 1.0)
        x_new = x + alpha * p
        r_new = r - alpha * Ap
        rs_new = r_new @ r_new
        p_new = r_new + (rs_new / jnp.where(active, rs, 1.0)) * p
        return tuple(jnp.where(active, new, old)
                     for new, old in zip((x_new, r_new, p_new, rs_new), (x, r, p, rs)))

    x = lax.fori_loop(0, max_iter, body, (x, r, r, r @ r))[0]
    return x @ b + jnp.sum(x * x)
