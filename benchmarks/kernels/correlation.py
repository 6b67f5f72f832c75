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
SIZES = {"test": {"n": 12, "m": 8}, "bench": {"n": 600, "m": 500}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    data = rng.standard_normal((p["n"], p["m"])) + rng.uniform(-1.0, 1.0, p["m"])
    return (data,)


JAX_NOTE = ("row loop writes triangular slices corr[i, i+1:] whose length depends on the loop index; "
            "JAX needs static shapes, so the loop must be replaced by a full matrix product")
