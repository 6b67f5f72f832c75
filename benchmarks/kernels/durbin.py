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
SIZES = {"test": {"n": 12}, "bench": {"n": 2500}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    k = np.arange(n)
    r = 0.5 ** (k + 1) * (1.0 + 0.2 * rng.uniform(-1.0, 1.0, n))
    return (r,)


JAX_NOTE = ("slices r[k-1::-1], y[:k] grow with the loop index k; lax.fori_loop needs static shapes, "
            "so JAX needs a masked rewrite")
