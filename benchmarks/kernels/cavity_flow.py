"""cavity_flow: lid-driven cavity Navier-Stokes (NPBench/CFD-Python pattern) -- time loop with pressure-Poisson inner iterations; helpers mutate arrays in place, boundary rows/cols copied."""
import numpy as np

RHO = 1.0
NU = 0.1
DT = 0.001


def build_b(b, u, v, dt, dx, dy):
    dudx = (u[1:-1, 2:] - u[1:-1, :-2]) / (2.0 * dx)
    dvdy = (v[2:, 1:-1] - v[:-2, 1:-1]) / (2.0 * dy)
    dudy = (u[2:, 1:-1] - u[:-2, 1:-1]) / (2.0 * dy)
    dvdx = (v[1:-1, 2:] - v[1:-1, :-2]) / (2.0 * dx)
    b[1:-1, 1:-1] = RHO * ((dudx + dvdy) / dt - dudx ** 2 - 2.0 * dudy * dvdx - dvdy ** 2)


def pressure_poisson(p, b, dx, dy, nit):
    denom = 2.0 * (dx ** 2 + dy ** 2)
    for it in range(nit):
        pn = p.copy()
        p[1:-1, 1:-1] = (((pn[1:-1, 2:] + pn[1:-1, :-2]) * dy ** 2
                          + (pn[2:, 1:-1] + pn[:-2, 1:-1]) * dx ** 2) / denom
                         - dx ** 2 * dy ** 2 / denom * b[1:-1, 1:-1])
        p[:, -1] = p[:, -2]
        p[0, :] = p[1, :]
        p[:, 0] = p[:, 1]
        p[-1, :] = 0.0


def kernel(u, v, p, nt, nit):
    ny, nx = u.shape
    dx = 2.0 / (nx - 1)
    dy = 2.0 / (ny - 1)
    dt = DT
    b = np.zeros_like(u)
    for n in range(nt):
        un = u.copy()
        vn = v.copy()
        build_b(b, un, vn, dt, dx, dy)
        pressure_poisson(p, b, dx, dy, nit)
        u[1:-1, 1:-1] = (un[1:-1, 1:-1]
                         - un[1:-1, 1:-1] * dt / dx * (un[1:-1, 1:-1] - un[1:-1, :-2])
                         - vn[1:-1, 1:-1] * dt / dy * (un[1:-1, 1:-1] - un[:-2, 1:-1])
                         - dt / (2.0 * RHO * dx) * (p[1:-1, 2:] - p[1:-1, :-2])
                         + NU * (dt / dx ** 2 * (un[1:-1, 2:] - 2.0 * un[1:-1, 1:-1] + un[1:-1, :-2])
                                 + dt / dy ** 2 * (un[2:, 1:-1] - 2.0 * un[1:-1, 1:-1] + un[:-2, 1:-1])))
        v[1:-1, 1:-1] = (vn[1:-1, 1:-1]
                         - un[1:-1, 1:-1] * dt / dx * (vn[1:-1, 1:-1] - vn[1:-1, :-2])
                         - vn[1:-1, 1:-1] * dt / dy * (vn[1:-1, 1:-1] - vn[:-2, 1:-1])
                         - dt / (2.0 * RHO * dy) * (p[2:, 1:-1] - p[:-2, 1:-1])
                         + NU * (dt / dx ** 2 * (vn[1:-1, 2:] - 2.0 * vn[1:-1, 1:-1] + vn[1:-1, :-2])
                                 + dt / dy ** 2 * (vn[2:, 1:-1] - 2.0 * vn[1:-1, 1:-1] + vn[:-2, 1:-1])))
        u[0, :] = 0.0
        u[:, 0] = 0.0
        u[:, -1] = 0.0
        u[-1, :] = 1.0
        v[0, :] = 0.0
        v[-1, :] = 0.0
        v[:, 0] = 0.0
        v[:, -1] = 0.0
    return (np.sum(u * u) + np.sum(v * v) + 0.01 * np.sum(p * p)) / (nx * ny)


WRT = ("u", "v", "p")
SIZES = {"test": {"n": 10, "nt": 3, "nit": 4}, "bench": {"n": 81, "nt": 20, "nit": 25},
         # bench4, 4x the work: nt x4 (a finer grid is unstable at this DT)
         "bench4": {"n": 81, "nt": 80, "nit": 25}}


def args(size="test", seed=0):
    rng = np.random.default_rng(seed)
    s = SIZES[size]
    n = s["n"]
    u = rng.uniform(-0.1, 0.1, (n, n))
    v = rng.uniform(-0.1, 0.1, (n, n))
    p = rng.uniform(-0.1, 0.1, (n, n))
    return (u, v, p, s["nt"], s["nit"])


def jax_kernel(u, v, p, nt, nit):
    import jax.numpy as jnp
    from jax import lax
    u, v, p = jnp.asarray(u), jnp.asarray(v), jnp.asarray(p)
    ny, nx = u.shape
    dx = 2.0 / (nx - 1)
    dy = 2.0 / (ny - 1)
    dt = DT
    denom = 2.0 * (dx ** 2 + dy ** 2)

    def poisson_it(it, pb):
        pn, b = pb
        p = pn.at[1:-1, 1:-1].set(((pn[1:-1, 2:] + pn[1:-1, :-2]) * dy ** 2
                                   + (pn[2:, 1:-1] + pn[:-2, 1:-1]) * dx ** 2) / denom
                                  - dx ** 2 * dy ** 2 / denom * b[1:-1, 1:-1])
        p = p.at[:, -1].set(p[:, -2])
        p = p.at[0, :].set(p[1, :])
        p = p.at[:, 0].set(p[:, 1])
        p = p.at[-1, :].set(0.0)
        return (p, b)

    def step(n, c):
        un, vn, p, b = c
        dudx = (un[1:-1, 2:] - un[1:-1, :-2]) / (2.0 * dx)
        dvdy = (vn[2:, 1:-1] - vn[:-2, 1:-1]) / (2.0 * dy)
        dudy = (un[2:, 1:-1] - un[:-2, 1:-1]) / (2.0 * dy)
        dvdx = (vn[1:-1, 2:] - vn[1:-1, :-2]) / (2.0 * dx)
        b = b.at[1:-1, 1:-1].set(RHO * ((dudx + dvdy) / dt - dudx ** 2 - 2.0 * dudy * dvdx - dvdy ** 2))
        p, b = lax.fori_loop(0, nit, poisson_it, (p, b))
        u = un.at[1:-1, 1:-1].set(un[1:-1, 1:-1]
                                  - un[1:-1, 1:-1] * dt / dx * (un[1:-1, 1:-1] - un[1:-1, :-2])
                                  - vn[1:-1, 1:-1] * dt / dy * (un[1:-1, 1:-1] - un[:-2, 1:-1])
                                  - dt / (2.0 * RHO * dx) * (p[1:-1, 2:] - p[1:-1, :-2])
                                  + NU * (dt / dx ** 2 * (un[1:-1, 2:] - 2.0 * un[1:-1, 1:-1] + un[1:-1, :-2])
                                          + dt / dy ** 2 * (un[2:, 1:-1] - 2.0 * un[1:-1, 1:-1] + un[:-2, 1:-1])))
        v = vn.at[1:-1, 1:-1].set(vn[1:-1, 1:-1]
                                  - un[1:-1, 1:-1] * dt / dx * (vn[1:-1, 1:-1] - vn[1:-1, :-2])
                                  - vn[1:-1, 1:-1] * dt / dy * (vn[1:-1, 1:-1] - vn[:-2, 1:-1])
                                  - dt / (2.0 * RHO * dy) * (p[2:, 1:-1] - p[:-2, 1:-1])
                                  + NU * (dt / dx ** 2 * (vn[1:-1, 2:] - 2.0 * vn[1:-1, 1:-1] + vn[1:-1, :-2])
                                          + dt / dy ** 2 * (vn[2:, 1:-1] - 2.0 * vn[1:-1, 1:-1] + vn[:-2, 1:-1])))
        u = u.at[0, :].set(0.0).at[:, 0].set(0.0).at[:, -1].set(0.0).at[-1, :].set(1.0)
        v = v.at[0, :].set(0.0).at[-1, :].set(0.0).at[:, 0].set(0.0).at[:, -1].set(0.0)
        return (u, v, p, b)

    u, v, p, b = lax.fori_loop(0, nt, step, (u, v, p, jnp.zeros_like(u)))
    return (jnp.sum(u * u) + jnp.sum(v * v) + 0.01 * jnp.sum(p * p)) / (nx * ny)
