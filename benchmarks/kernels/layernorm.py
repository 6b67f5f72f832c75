"""layernorm: transformer-style pre/post layer normalisation (helper with keyword eps) around a tanh projection with residual."""
import numpy as np

EPS = 1e-5


def layer_norm(x, gamma, beta, eps=1e-6):
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * gamma + beta


def kernel(x, gamma, beta, W, target):
    h = layer_norm(x, gamma, beta, eps=EPS)
    h = np.tanh(h @ W)
    h = layer_norm(h + x, gamma, beta, eps=EPS)
    return np.sum(h * target) / x.shape[0]


WRT = ("x", "gamma", "beta", "W")
SIZES = {"test": {"B": 2, "T": 4, "D": 8}, "bench": {"B": 16, "T": 128, "D": 512},
         # bench4, 4x the work: the batch x4
         "bench4": {"B": 64, "T": 128, "D": 512}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    B, T, D = p["B"], p["T"], p["D"]
    x = rng.standard_normal((B, T, D))
    gamma = rng.uniform(0.5, 1.5, D)
    beta = 0.1 * rng.standard_normal(D)
    W = rng.standard_normal((D, D)) / np.sqrt(D)
    target = rng.standard_normal((B, T, D))
    return (x, gamma, beta, W, target)


def jax_kernel(x, gamma, beta, W, target):
    import jax.numpy as jnp

    def layer_norm(x, gamma, beta, eps):
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean((x - mean) ** 2, axis=-1, keepdims=True)
        return (x - mean) / jnp.sqrt(var + eps) * gamma + beta

    x = jnp.asarray(x)
    h = layer_norm(x, gamma, beta, EPS)
    h = jnp.tanh(h @ W)
    h = layer_norm(h + x, gamma, beta, EPS)
    return jnp.sum(h * target) / x.shape[0]
