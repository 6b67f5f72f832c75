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
SIZES = {"test": {"n": 10, "max_iter": 500}, "bench": {"n": 2000, "max_iter": 500},
         # bench4, 4x the work: n doubled; about the same iteration count
         "bench4": {"n": 4000, "max_iter": 500}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    A = 0.5 * rng.standard_normal((n, n)) / np.sqrt(n) + np.diag(rng.uniform(2.0, 3.0, n))
    b = rng.standard_normal(n)
    return (A, b, p["max_iter"])


def jax_kernel(A, b, max_iter):
    import jax.numpy as jnp
    from jax import lax
    A = jnp.asarray(A)
    b = jnp.asarray(b)
    d = jnp.diagonal(A)
    x = jnp.zeros_like(b)

    # max_iter bounds the while loop: a fori_loop of max_iter steps; a step after convergence
    # computes and discards its update (jnp.where), so the state stays as the while loop left
    # it.  (lax.cond would skip that work, but its reverse pass keeps A for every step.)
    def body(it, c):
        x, r = c
        active = ~(jnp.max(jnp.abs(r)) < TOL)
        x_new = x + r / d
        r_new = b - A @ x_new
        return (jnp.where(active, x_new, x), jnp.where(active, r_new, r))

    x = lax.fori_loop(0, max_iter, body, (x, b - A @ x))[0]
    return jnp.sum(x * x) + jnp.sum(x)
