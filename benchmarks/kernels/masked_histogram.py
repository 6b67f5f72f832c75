"""masked_histogram: a weighted soft histogram, one masked sum over the samples per bin."""
import numpy as np


def kernel(x, w, centres, width):
    hist = np.zeros(centres.shape[0])
    for b in range(centres.shape[0]):
        d = (x - centres[b]) / width
        inside = np.abs(d) < 2.0
        hist[b] = np.sum(np.where(inside, w * np.exp(-d * d), 0.0))
    target = np.linspace(0.0, 1.0, centres.shape[0])
    return np.sum((hist / np.sum(hist) - target) ** 2)


WRT = ("x", "w", "centres", "width")
SIZES = {"test": {"n": 40, "bins": 6}, "bench": {"n": 200_000, "bins": 64},
         # bench4, 4x the work: samples x4
         "bench4": {"n": 800_000, "bins": 64}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    x = rng.standard_normal(p["n"])
    w = rng.uniform(0.5, 1.5, p["n"])
    centres = np.linspace(-3.0, 3.0, p["bins"])
    return (x, w, centres, 6.0 / p["bins"])


def jax_kernel(x, w, centres, width):
    import jax.numpy as jnp
    from jax import lax
    x, w, centres = jnp.asarray(x), jnp.asarray(w), jnp.asarray(centres)

    def one_bin(b, hist):
        d = (x - centres[b]) / width
        inside = jnp.abs(d) < 2.0
        return hist.at[b].set(jnp.sum(jnp.where(inside, w * jnp.exp(-d * d), 0.0)))

    hist = lax.fori_loop(0, centres.shape[0], one_bin, jnp.zeros(centres.shape[0]))
    target = jnp.linspace(0.0, 1.0, centres.shape[0])
    return jnp.sum((hist / jnp.sum(hist) - target) ** 2)
