"""correlation: PolyBench correlation -- standardise columns, then upper-triangle correlation matrix row by row."""
import numpy as np

EPS = 0.1


def kernel(data):
    n, m = data.shape
    mean = np.mean(data, axis=0)
    stddev = np.sqrt(np.mean((data - mean) ** 2, axis=0))
    stddev = np.where(stddev <= EPS, 1.0, stddev)
    data -= mean
    data /= np.sqrt(n) * stddev
    corr = np.zeros((m, m))
    for i in range(m - 1):
        corr[i, i] = 1.0
        corr[i, i + 1:] = data[:, i] @ data[:, i + 1:]
        corr[i + 1:, i] = corr[i, i + 1:]
    corr[m - 1, m - 1] = 1.0
    return np.sum(corr * corr)


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
    mean = jnp.mean(data, axis=0)
    stddev = jnp.sqrt(jnp.mean((data - mean) ** 2, axis=0))
    stddev = jnp.where(stddev <= EPS, 1.0, stddev)
    data = (data - mean) / (jnp.sqrt(n) * stddev)
    # the row loop's iterations are independent: one product, its strict upper triangle
    # mirrored, and the unit diagonal
    upper = jnp.triu(data.T @ data, 1)
    corr = upper + upper.T + jnp.eye(m)
    return jnp.sum(corr * corr)
