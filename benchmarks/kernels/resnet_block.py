"""resnet_block: ResNet basic block (NHWC) -- 3x3 'same' conv via zero-padded buffer and einsum window loop, batch-norm, ReLU, residual add."""
import numpy as np

BN_EPS = 1e-5


def conv3x3_same(x, w):
    N, H, W, C = x.shape
    xp = np.zeros((N, H + 2, W + 2, C))
    xp[:, 1:-1, 1:-1, :] = x
    out = np.zeros((N, H, W, w.shape[3]))
    for i in range(3):
        for j in range(3):
            out += np.einsum("nhwc,cf->nhwf", xp[:, i:i + H, j:j + W, :], w[i, j])
    return out


def batchnorm(x, gamma, beta):
    N, H, W, C = x.shape
    flat = x.reshape(N * H * W, C)
    mean = np.mean(flat, axis=0)
    var = np.mean((flat - mean) ** 2, axis=0)
    return gamma * (x - mean) / np.sqrt(var + BN_EPS) + beta


def relu(x):
    return np.maximum(x, 0.0)


def kernel(x, w1, g1, b1, w2, g2, b2):
    h = relu(batchnorm(conv3x3_same(x, w1), g1, b1))
    h = batchnorm(conv3x3_same(h, w2), g2, b2)
    out = relu(h + x)
    return np.mean(out * out)


WRT = ("x", "w1", "g1", "b1", "w2", "g2", "b2")
SIZES = {"test": {"N": 2, "H": 6, "C": 4}, "bench": {"N": 8, "H": 32, "C": 32},
         # bench4, 4x the work: the batch x4
         "bench4": {"N": 32, "H": 32, "C": 32}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    N, H, C = p["N"], p["H"], p["C"]
    x = rng.standard_normal((N, H, H, C))
    w1 = rng.standard_normal((3, 3, C, C)) / np.sqrt(9.0 * C)
    w2 = rng.standard_normal((3, 3, C, C)) / np.sqrt(9.0 * C)
    g1 = rng.uniform(0.5, 1.5, C)
    b1 = rng.standard_normal(C) * 0.1
    g2 = rng.uniform(0.5, 1.5, C)
    b2 = rng.standard_normal(C) * 0.1
    return (x, w1, g1, b1, w2, g2, b2)


def jax_kernel(x, w1, g1, b1, w2, g2, b2):
    import jax.numpy as jnp

    def conv3x3_same(x, w):
        N, H, W, C = x.shape
        xp = jnp.zeros((N, H + 2, W + 2, C)).at[:, 1:-1, 1:-1, :].set(x)
        out = jnp.zeros((N, H, W, w.shape[3]))
        for i in range(3):
            for j in range(3):
                out = out + jnp.einsum("nhwc,cf->nhwf", xp[:, i:i + H, j:j + W, :], w[i, j])
        return out

    def batchnorm(x, gamma, beta):
        flat = x.reshape(-1, x.shape[3])
        mean = jnp.mean(flat, axis=0)
        var = jnp.mean((flat - mean) ** 2, axis=0)
        return gamma * (x - mean) / jnp.sqrt(var + BN_EPS) + beta

    x = jnp.asarray(x)
    h = jnp.maximum(batchnorm(conv3x3_same(x, w1), g1, b1), 0.0)
    h = batchnorm(conv3x3_same(h, w2), g2, b2)
    out = jnp.maximum(h + x, 0.0)
    return jnp.mean(out * out)
