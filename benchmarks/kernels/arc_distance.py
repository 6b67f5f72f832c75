"""arc_distance: great-circle (haversine) distances between two point sets via broadcasting, sin/cos/sqrt/arctan2."""
import numpy as np


def kernel(theta_1, phi_1, theta_2, phi_2):
    t1 = theta_1[:, None]
    p1 = phi_1[:, None]
    t2 = theta_2[None, :]
    p2 = phi_2[None, :]
    temp = np.sin((t2 - t1) / 2.0) ** 2 + np.cos(t1) * np.cos(t2) * np.sin((p2 - p1) / 2.0) ** 2
    dist = 2.0 * np.arctan2(np.sqrt(temp), np.sqrt(1.0 - temp))
    return np.sum(dist) / (theta_1.shape[0] * theta_2.shape[0])


WRT = ("theta_1", "phi_1", "theta_2", "phi_2")
SIZES = {"test": {"n": 8, "m": 10}, "bench": {"n": 1000, "m": 1200},
         # bench4, 4x the work: n*m pairs: both doubled
         "bench4": {"n": 2000, "m": 2400}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    p = SIZES[size]
    theta_1 = rng.uniform(-1.2, 1.2, p["n"])
    phi_1 = rng.uniform(-3.0, 3.0, p["n"])
    theta_2 = rng.uniform(-1.2, 1.2, p["m"])
    phi_2 = rng.uniform(-3.0, 3.0, p["m"])
    return (theta_1, phi_1, theta_2, phi_2)


def jax_kernel(theta_1, phi_1, theta_2, phi_2):
    import jax.numpy as jnp
    t1 = jnp.asarray(theta_1)[:, None]
    p1 = jnp.asarray(phi_1)[:, None]
    t2 = jnp.asarray(theta_2)[None, :]
    p2 = jnp.asarray(phi_2)[None, :]
    temp = jnp.sin((t2 - t1) / 2.0) ** 2 + jnp.cos(t1) * jnp.cos(t2) * jnp.sin((p2 - p1) / 2.0) ** 2
    dist = 2.0 * jnp.arctan2(jnp.sqrt(temp), jnp.sqrt(1.0 - temp))
    return jnp.sum(dist) / dist.size
