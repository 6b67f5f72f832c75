"""go_fast: Numba's 'go_fast' example -- scalar loop accumulating tanh of the diagonal, then broadcast add."""
import numpy as np


def kernel(a):
    trace = 0.0
    for i in range(a.shape[0]):
        trace += np.tanh(a[i, i])
    out = a + trace
    return np.sum(out * out) / (a.shape[0] * a.shape[1])


WRT = ("a",)
SIZES = {"test": {"n": 10}, "bench": {"n": 2000},
         # bench4, 4x the work: n^2: n doubled
         "bench4": {"n": 4000}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    n = SIZES[size]["n"]
    a = rng.standard_normal((n, n))
    return (a,)


def jax_kernel(a):
    import jax.numpy as jnp
    from jax import lax
    a = jnp.asarray(a)
    trace = lax.fori_loop(0, a.shape[0], lambda i, t: t + jnp.tanh(a[i, i]), 0.0)
    out = a + trace
    return jnp.sum(out * out) / a.size
