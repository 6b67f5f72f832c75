"""hdiff: COSMO-style horizontal diffusion (NPBench pattern) -- Laplacian, flux limiter via np.where, per vertical level with 2-D views."""
import numpy as np


def kernel(in_field, coeff):
    I, J, K = coeff.shape
    out = np.zeros((I, J, K))
    for k in range(K):
        f = in_field[:, :, k]
        lap = 4.0 * f[1:I + 3, 1:J + 3] - (f[2:I + 4, 1:J + 3] + f[0:I + 2, 1:J + 3]
                                            + f[1:I + 3, 2:J + 4] + f[1:I + 3, 0:J + 2])
        res = lap[1:, 1:J + 1] - lap[:-1, 1:J + 1]
        flx = np.where(res * (f[2:I + 3, 2:J + 2] - f[1:I + 2, 2:J + 2]) > 0.0, 0.0, res)
        res = lap[1:I + 1, 1:] - lap[1:I + 1, :-1]
        fly = np.where(res * (f[2:I + 2, 2:J + 3] - f[2:I + 2, 1:J + 2]) > 0.0, 0.0, res)
        out[:, :, k] = f[2:I + 2, 2:J + 2] - coeff[:, :, k] * (flx[1:, :] - flx[:-1, :] + fly[:, 1:] - fly[:, :-1])
    return np.sum(out * out) / (I * J * K)


WRT = ("in_field", "coeff")
SIZES = {"test": {"I": 6, "J": 7, "K": 3}, "bench": {"I": 128, "J": 128, "K": 40},
         # bench4, 4x the work: I*J*K: I and J doubled, levels kept
         "bench4": {"I": 256, "J": 256, "K": 40}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    I, J, K = p["I"], p["J"], p["K"]
    in_field = rng.standard_normal((I + 4, J + 4, K))
    coeff = rng.uniform(0.0, 0.2, (I, J, K))
    return (in_field, coeff)


def jax_kernel(in_field, coeff):
    import jax.numpy as jnp
    from jax import lax
    in_field = jnp.asarray(in_field)
    coeff = jnp.asarray(coeff)
    I, J, K = coeff.shape

    def body(k, out):
        f = in_field[:, :, k]
        lap = 4.0 * f[1:I + 3, 1:J + 3] - (f[2:I + 4, 1:J + 3] + f[0:I + 2, 1:J + 3]
                                            + f[1:I + 3, 2:J + 4] + f[1:I + 3, 0:J + 2])
        res = lap[1:, 1:J + 1] - lap[:-1, 1:J + 1]
        flx = jnp.where(res * (f[2:I + 3, 2:J + 2] - f[1:I + 2, 2:J + 2]) > 0.0, 0.0, res)
        res = lap[1:I + 1, 1:] - lap[1:I + 1, :-1]
        fly = jnp.where(res * (f[2:I + 2, 2:J + 3] - f[2:I + 2, 1:J + 2]) > 0.0, 0.0, res)
        return out.at[:, :, k].set(f[2:I + 2, 2:J + 2] - coeff[:, :, k] * (flx[1:, :] - flx[:-1, :] + fly[:, 1:] - fly[:, :-1]))

    out = lax.fori_loop(0, K, body, jnp.zeros((I, J, K)))
    return jnp.sum(out * out) / out.size
