"""spmv_csr: repeated CSR sparse matrix-vector product (indptr/indices/data) with per-row slice bounds read from the index array and gathers x[indices[...]], followed by tanh."""
import numpy as np


def kernel(indptr, indices, data, x, n_iter):
    n = indptr.shape[0] - 1
    for it in range(n_iter):
        y = np.zeros(n)
        for i in range(n):
            start = indptr[i]
            end = indptr[i + 1]
            y[i] = data[start:end] @ x[indices[start:end]]
        x = np.tanh(y + x)
    return np.sum(x * x) / n


WRT = ("data", "x")
SIZES = {"test": {"n": 10, "max_nnz": 4, "n_iter": 3}, "bench": {"n": 5000, "max_nnz": 16, "n_iter": 3},
         # bench4, 4x the work: the rows x4, nonzeros per row kept
         "bench4": {"n": 20000, "max_nnz": 16, "n_iter": 3}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    counts = rng.integers(0, p["max_nnz"] + 1, n)     # empty rows allowed
    indptr = np.zeros(n + 1, dtype=np.int64)
    indptr[1:] = np.cumsum(counts)
    nnz = int(indptr[-1])
    indices = np.zeros(nnz, dtype=np.int64)
    for i in range(n):
        indices[indptr[i]:indptr[i + 1]] = np.sort(rng.choice(n, counts[i], replace=False))
    data = rng.standard_normal(nnz) / np.sqrt(p["max_nnz"])
    x = rng.standard_normal(n)
    return (indptr, indices, data, x, p["n_iter"])


def jax_kernel(indptr, indices, data, x, n_iter):
    # JAX cannot loop over rows with data-dependent slice bounds; a JAX user rewrites the
    # row loop as a segment_sum over precomputed row ids.
    import jax
    import jax.numpy as jnp
    from jax import lax
    indptr = jnp.asarray(indptr)
    indices = jnp.asarray(indices)
    data = jnp.asarray(data)
    x = jnp.asarray(x)
    n = indptr.shape[0] - 1
    rows = jnp.searchsorted(indptr, jnp.arange(indices.shape[0]), side="right") - 1

    def body(it, x):
        y = jax.ops.segment_sum(data * x[indices], rows, num_segments=n)
        return jnp.tanh(y + x)

    x = lax.fori_loop(0, n_iter, body, x)
    return jnp.sum(x * x) / n
