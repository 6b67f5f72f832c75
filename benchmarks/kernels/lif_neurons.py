"""lif_neurons: leaky integrate-and-fire network -- data-dependent boolean masks read spiking membranes (v[mask]) and reset them (v[mask] = 0.0)."""
import numpy as np

V_TH = 1.0
DT = 0.2


def kernel(v, W, I_ext, n_steps):
    out = 0.0
    for t in range(n_steps):
        v += DT * (-v + np.tanh(W @ v) + I_ext)
        mask = v > V_TH
        out += np.sum(v[mask] ** 2)
        v[mask] = 0.0
    return out + np.sum(v * v)


WRT = ("v", "W", "I_ext")
SIZES = {"test": {"n": 12, "n_steps": 5}, "bench": {"n": 2000, "n_steps": 50},
         # bench4, 4x the work: n^2*n_steps (W @ v): n doubled
         "bench4": {"n": 4000, "n_steps": 50}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    n = p["n"]
    v = rng.uniform(0.0, 1.0, n)
    W = 2.0 * rng.standard_normal((n, n)) / np.sqrt(n)
    I_ext = rng.uniform(1.0, 3.0, n)
    return (v, W, I_ext, p["n_steps"])


def jax_kernel(v, W, I_ext, n_steps):
    import jax.numpy as jnp
    from jax import lax
    W = jnp.asarray(W)

    def step(t, c):
        v, out = c
        v = v + DT * (-v + jnp.tanh(W @ v) + I_ext)
        mask = v > V_TH
        out = out + jnp.sum(jnp.where(mask, v ** 2, 0.0))
        return (jnp.where(mask, 0.0, v), out)

    v, out = lax.fori_loop(0, n_steps, step, (jnp.asarray(v), jnp.asarray(0.0)))
    return out + jnp.sum(v * v)
