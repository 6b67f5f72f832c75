"""vadv: COSMO-style vertical advection (NPBench pattern) -- implicit tridiagonal Thomas solve per column: forward sweep over k with boundary branches, backward substitution writing into the argument."""
import numpy as np

BET_M = 0.5
BET_P = 0.5


def kernel(utens_stage, u_stage, wcon, u_pos, utens, dtr_stage):
    I, J, K = utens_stage.shape
    ccol = np.zeros((I, J, K))
    dcol = np.zeros((I, J, K))
    for k in range(K):
        if k == 0:
            gcv = 0.25 * (wcon[1:, :, k + 1] + wcon[:-1, :, k + 1])
            cs = gcv * BET_M
            c = gcv * BET_P
            b = dtr_stage - c
            corr = -cs * (u_stage[:, :, k + 1] - u_stage[:, :, k])
            d = dtr_stage * u_pos[:, :, k] + utens[:, :, k] + utens_stage[:, :, k] + corr
            divided = 1.0 / b
            ccol[:, :, k] = c * divided
            dcol[:, :, k] = d * divided
        elif k == K - 1:
            gav = -0.25 * (wcon[1:, :, k] + wcon[:-1, :, k])
            as_ = gav * BET_M
            a = gav * BET_P
            b = dtr_stage - a
            corr = -as_ * (u_stage[:, :, k - 1] - u_stage[:, :, k])
            d = dtr_stage * u_pos[:, :, k] + utens[:, :, k] + utens_stage[:, :, k] + corr
            divided = 1.0 / (b - ccol[:, :, k - 1] * a)
            dcol[:, :, k] = (d - dcol[:, :, k - 1] * a) * divided
        else:
            gav = -0.25 * (wcon[1:, :, k] + wcon[:-1, :, k])
            gcv = 0.25 * (wcon[1:, :, k + 1] + wcon[:-1, :, k + 1])
            as_ = gav * BET_M
            cs = gcv * BET_M
            a = gav * BET_P
            c = gcv * BET_P
            b = dtr_stage - a - c
            corr = (-as_ * (u_stage[:, :, k - 1] - u_stage[:, :, k])
                    - cs * (u_stage[:, :, k + 1] - u_stage[:, :, k]))
            d = dtr_stage * u_pos[:, :, k] + utens[:, :, k] + utens_stage[:, :, k] + corr
            divided = 1.0 / (b - ccol[:, :, k - 1] * a)
            ccol[:, :, k] = c * divided
            dcol[:, :, k] = (d - dcol[:, :, k - 1] * a) * divided
    datacol = dcol[:, :, K - 1]
    utens_stage[:, :, K - 1] = dtr_stage * (datacol - u_pos[:, :, K - 1])
    for k in range(K - 2, -1, -1):
        datacol = dcol[:, :, k] - ccol[:, :, k] * datacol
        utens_stage[:, :, k] = dtr_stage * (datacol - u_pos[:, :, k])
    return np.sum(utens_stage * utens_stage) / (I * J * K)


WRT = ("utens_stage", "u_stage", "wcon", "u_pos", "utens", "dtr_stage")
SIZES = {"test": {"I": 4, "J": 5, "K": 6}, "bench": {"I": 128, "J": 128, "K": 60},
         # bench4, 4x the work: I*J*K: I and J doubled, levels kept
         "bench4": {"I": 256, "J": 256, "K": 60}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    I, J, K = p["I"], p["J"], p["K"]
    utens_stage = rng.uniform(-1.0, 1.0, (I, J, K))
    u_stage = rng.uniform(-1.0, 1.0, (I, J, K))
    wcon = rng.uniform(0.0, 0.2, (I + 1, J, K))
    u_pos = rng.uniform(-1.0, 1.0, (I, J, K))
    utens = rng.uniform(-1.0, 1.0, (I, J, K))
    return (utens_stage, u_stage, wcon, u_pos, utens, 3.0 / 20.0)


def jax_kernel(utens_stage, u_stage, wcon, u_pos, utens, dtr_stage):
    import jax.numpy as jnp
    from jax import lax
    utens_stage, u_stage, wcon, u_pos, utens = [jnp.asarray(a) for a in (utens_stage, u_stage, wcon, u_pos, utens)]
    I, J, K = utens_stage.shape

    # k = 0 (peeled)
    gcv = 0.25 * (wcon[1:, :, 1] + wcon[:-1, :, 1])
    c = gcv * BET_P
    b = dtr_stage - c
    d = dtr_stage * u_pos[:, :, 0] + utens[:, :, 0] + utens_stage[:, :, 0] - gcv * BET_M * (u_stage[:, :, 1] - u_stage[:, :, 0])
    ccol = jnp.zeros((I, J, K)).at[:, :, 0].set(c / b)
    dcol = jnp.zeros((I, J, K)).at[:, :, 0].set(d / b)

    def fwd(k, cd):
        ccol, dcol = cd
        gav = -0.25 * (wcon[1:, :, k] + wcon[:-1, :, k])
        gcv = 0.25 * (wcon[1:, :, k + 1] + wcon[:-1, :, k + 1])
        a = gav * BET_P
        c = gcv * BET_P
        b = dtr_stage - a - c
        corr = (-gav * BET_M * (u_stage[:, :, k - 1] - u_stage[:, :, k])
                - gcv * BET_M * (u_stage[:, :, k + 1] - u_stage[:, :, k]))
        d = dtr_stage * u_pos[:, :, k] + utens[:, :, k] + utens_stage[:, :, k] + corr
        divided = 1.0 / (b - ccol[:, :, k - 1] * a)
        return (ccol.at[:, :, k].set(c * divided), dcol.at[:, :, k].set((d - dcol[:, :, k - 1] * a) * divided))

    ccol, dcol = lax.fori_loop(1, K - 1, fwd, (ccol, dcol))
    k = K - 1
    gav = -0.25 * (wcon[1:, :, k] + wcon[:-1, :, k])
    a = gav * BET_P
    b = dtr_stage - a
    d = dtr_stage * u_pos[:, :, k] + utens[:, :, k] + utens_stage[:, :, k] - gav * BET_M * (u_stage[:, :, k - 1] - u_stage[:, :, k])
    dcol = dcol.at[:, :, k].set((d - dcol[:, :, k - 1] * a) / (b - ccol[:, :, k - 1] * a))

    datacol = dcol[:, :, K - 1]
    utens_stage = utens_stage.at[:, :, K - 1].set(dtr_stage * (datacol - u_pos[:, :, K - 1]))

    def bwd(kk, c):
        us, datacol = c
        k = K - 2 - kk
        datacol = dcol[:, :, k] - ccol[:, :, k] * datacol
        return (us.at[:, :, k].set(dtr_stage * (datacol - u_pos[:, :, k])), datacol)

    utens_stage, datacol = lax.fori_loop(0, K - 1, bwd, (utens_stage, datacol))
    return jnp.sum(utens_stage * utens_stage) / utens_stage.size
