"""conv2d_bias: NPBench-style 2-D convolution + bias, looping over output pixels with patch reshape and matmul."""
import numpy as np


def kernel(x, w, bias):
    N, H, W, C = x.shape
    K = w.shape[0]
    F = w.shape[3]
    Ho = H - K + 1
    Wo = W - K + 1
    wm = w.reshape(K * K * C, F)
    out = np.empty((N, Ho, Wo, F))
    for i in range(Ho):
        for j in range(Wo):
            patch = x[:, i:i + K, j:j + K, :].reshape(N, K * K * C)
            out[:, i, j, :] = patch @ wm
    out += bias
    return np.sum(np.tanh(out)) / (N * Ho * Wo * F)


WRT = ("x", "w", "bias")
SIZES = {"test": {"N": 2, "H": 8, "C": 3, "K": 3, "F": 4},
         "bench": {"N": 8, "H": 40, "C": 16, "K": 3, "F": 32},
         # bench4, 4x the work: the batch x4
         "bench4": {"N": 32, "H": 40, "C": 16, "K": 3, "F": 32}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    x = rng.standard_normal((p["N"], p["H"], p["H"], p["C"]))
    w = rng.standard_normal((p["K"], p["K"], p["C"], p["F"])) / np.sqrt(p["K"] * p["K"] * p["C"])
    bias = rng.standard_normal(p["F"]) * 0.1
    return (x, w, bias)


def jax_kernel(x, w, bias):
    import jax.numpy as jnp
    from jax import lax
    x = jnp.asarray(x)
    N, H, W, C = x.shape
    K = w.shape[0]
    F = w.shape[3]
    Ho = H - K + 1
    Wo = W - K + 1
    wm = jnp.asarray(w).reshape(K * K * C, F)

    def body(ij, out):
        i = ij // Wo
        j = ij % Wo
        patch = lax.dynamic_slice(x, (0, i, j, 0), (N, K, K, C)).reshape(N, K * K * C)
        return out.at[:, i, j, :].set(patch @ wm)

    out = lax.fori_loop(0, Ho * Wo, body, jnp.zeros((N, Ho, Wo, F)))
    out = out + bias
    return jnp.sum(jnp.tanh(out)) / out.size
