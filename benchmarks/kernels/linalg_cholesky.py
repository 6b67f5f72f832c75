"""linalg_cholesky: a Gaussian-process style log-likelihood through ``np.linalg.cholesky`` of a kernel matrix."""
import numpy as np


def kernel(X, y, lengthscale, noise):
    n = X.shape[0]
    sq = np.sum(X * X, axis=1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (X @ X.T)
    K = np.exp(-0.5 * d2 / (lengthscale * lengthscale)) + (noise * noise + 1e-3) * np.eye(n)
    L = np.linalg.cholesky(K)
    alpha = np.linalg.solve(L, y)
    return 0.5 * np.sum(alpha * alpha) + np.sum(np.log(np.diag(L)))


WRT = ("X", "y", "lengthscale", "noise")
SIZES = {"test": {"n": 8, "d": 3}, "bench": {"n": 630, "d": 8},
         # bench4, 4x the work: the factorisation's n^3: n x 4^(1/3)
         "bench4": {"n": 1000, "d": 8}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    X = rng.uniform(-1.0, 1.0, (p["n"], p["d"]))
    y = rng.standard_normal(p["n"])
    return (X, y, 0.7, 0.3)


def jax_kernel(X, y, lengthscale, noise):
    import jax.numpy as jnp
    X = jnp.asarray(X)
    n = X.shape[0]
    sq = jnp.sum(X * X, axis=1)
    d2 = sq[:, None] + sq[None, :] - 2.0 * (X @ X.T)
    K = jnp.exp(-0.5 * d2 / (lengthscale * lengthscale)) + (noise * noise + 1e-3) * jnp.eye(n)
    L = jnp.linalg.cholesky(K)
    alpha = jnp.linalg.solve(L, y)
    return 0.5 * jnp.sum(alpha * alpha) + jnp.sum(jnp.log(jnp.diag(L)))
