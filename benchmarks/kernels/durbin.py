"""durbin: PolyBench Durbin -- Levinson-Durbin recursion for Toeplitz systems; reversed slices r[k-1::-1] of growing length."""
import numpy as np


def kernel(r):
    n = r.shape[0]
    y = np.zeros(n)
    z = np.zeros(n)
    y[0] = -r[0]
    beta = 1.0
    alpha = -r[0]
    for k in range(1, n):
        beta = (1.0 - alpha * alpha) * beta
        s = r[k - 1::-1] @ y[:k]
        alpha = -(r[k] + s) / beta
        z[:k] = y[:k] + alpha * y[k - 1::-1]
        y[:k] = z[:k]
        y[k] = alpha
    return np.sum(y * y)


WRT = ("r",)
SIZES = {"test": {"n": 12}, "bench": {"n": 2500},
         # bench4, 4x the work: n^2: n doubled
         "bench4": {"n": 5000}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    k = np.arange(n)
    r = 0.5 ** (k + 1) * (1.0 + 0.2 * rng.uniform(-1.0, 1.0, n))
    return (r,)


def jax_kernel(r):
    import jax.numpy as jnp
    from jax import lax
    r = jnp.asarray(r)
    n = r.shape[0]
    zeros = jnp.zeros(n)
    # r[k-1::-1] and y[k-1::-1] as fixed-length windows of the reversed vector padded with
    # zeros: entries t >= k of the window are 0, and y[t] = 0 for t >= k
    r_rev = jnp.concatenate([r[::-1], zeros])

    def body(k, c):
        y, beta, alpha = c
        beta = (1.0 - alpha * alpha) * beta
        s = lax.dynamic_slice(r_rev, (n - k,), (n,)) @ y
        alpha = -(r[k] + s) / beta
        y_rev = lax.dynamic_slice(jnp.concatenate([y[::-1], zeros]), (n - k,), (n,))
        y = (y + alpha * y_rev).at[k].set(alpha)
        return (y, beta, alpha)

    y0 = zeros.at[0].set(-r[0])
    y = lax.fori_loop(1, n, body, (y0, jnp.asarray(1.0), -r[0]))[0]
    return jnp.sum(y * y)
