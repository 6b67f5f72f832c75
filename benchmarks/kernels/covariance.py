"""covariance: PolyBench covariance -- centre columns, then symmetric covariance via triangular row slices."""
import numpy as np


def kernel(data):
    n, m = data.shape
    mean = np.mean(data, axis=0)
    data -= mean
    cov = np.zeros((m, m))
    for i in range(m):
        cov[i, i:] = data[:, i] @ data[:, i:] / (n - 1.0)
        cov[i:, i] = cov[i, i:]
    return np.sum(cov * cov)


WRT = ("data",)
SIZES = {"test": {"n": 12, "m": 8}, "bench": {"n": 600, "m": 500},
         # bench4, 4x the work: n*m^2: both x4^(1/3) each
         "bench4": {"n": 952, "m": 794}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    data = rng.standard_normal((p["n"], p["m"])) + rng.uniform(-1.0, 1.0, p["m"])
    return (data,)


def jax_kernel(data):
    import jax.numpy as jnp
    data = jnp.asarray(data)
    n, m = data.shape
    data = data - jnp.mean(data, axis=0)
    # the row loop's iterations are independent: one product, its upper triangle mirrored
    prod = data.T @ data / (n - 1.0)
    cov = jnp.triu(prod) + jnp.triu(prod, 1).T
    return jnp.sum(cov * cov)
