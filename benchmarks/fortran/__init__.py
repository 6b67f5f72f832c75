"""A corpus of Fortran routines written for flowgrad's Fortran front door.

PolyBench-style kernels in Fortran, a FORTRAN 77 routine in fixed form with implicit typing, a
module-based column cloud scheme in the style of the IFS (``cloudsc/``: kinds, constants in
modules, a parameter set in a derived type behind a pointer, thermodynamic statement functions
from an ``#include``d file) and a time-stepping driver calling subroutines. ``CASES`` gives, per
routine, its sources, entry, the arguments of a small problem and of a larger one for timing,
and what the gfortran build needs before a call.
"""
from __future__ import annotations

import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))


class Case:
    """One corpus routine. ``args(rng, size)`` builds its arguments (``size``: "test" or
    "bench"); ``modules`` are the module values flowgrad's program runs with, and ``setup(lib)``
    gives them to the gfortran build (a ctypes library)."""

    def __init__(self, name, files, entry, args, include_dirs=(), modules=None, setup=None, rtol=1e-12,
                 grad_rtol=1e-6, fd_step=1e-6):
        self.name, self.entry, self.args = name, entry, args
        self.files = [os.path.join(HERE, f) for f in files]
        self.include_dirs = [os.path.join(HERE, d) for d in include_dirs]
        self.modules, self.setup = modules, setup
        self.rtol, self.grad_rtol, self.fd_step = rtol, grad_rtol, fd_step

    def __repr__(self):
        return f"Case({self.name})"


def _spd(rng, n):
    a = rng.random((n, n))
    return a @ a.T + n * np.eye(n)


def _sizes(size, test, bench):
    return test if size == "test" else bench


def _gemm(rng, size):
    ni, nj, nk = _sizes(size, (5, 4, 6), (200, 220, 240))
    return ni, nj, nk, 1.5, 1.2, rng.random((ni, nj)), rng.random((ni, nk)), rng.random((nk, nj))


def _k2mm(rng, size):
    ni, nj, nk, nl = _sizes(size, (4, 5, 6, 3), (160, 180, 200, 220))
    return (ni, nj, nk, nl, 1.5, 1.2, rng.random((ni, nk)), rng.random((nk, nj)), rng.random((nj, nl)),
            rng.random((ni, nl)))


def _atax(rng, size):
    m, n = _sizes(size, (5, 6), (1000, 1100))
    return m, n, rng.random((m, n)), rng.random(n), np.zeros(n)


def _bicg(rng, size):
    m, n = _sizes(size, (5, 6), (1000, 1100))
    return m, n, rng.random((n, m)), np.zeros(m), np.zeros(n), rng.random(m), rng.random(n)


def _mvt(rng, size):
    n = _sizes(size, 6, 1000)
    return n, rng.random(n), rng.random(n), rng.random(n), rng.random(n), rng.random((n, n))


def _syrk(rng, size):
    n, m = _sizes(size, (6, 5), (240, 200))
    return n, m, 1.5, 1.2, rng.random((n, n)), rng.random((n, m))


def _syr2k(rng, size):
    n, m = _sizes(size, (6, 5), (240, 200))
    return n, m, 1.5, 1.2, rng.random((n, n)), rng.random((n, m)), rng.random((n, m))


def _trmm(rng, size):
    m, n = _sizes(size, (5, 6), (200, 240))
    return m, n, 1.5, rng.random((m, m)), rng.random((m, n))


def _symm(rng, size):
    m, n = _sizes(size, (5, 6), (200, 240))
    return m, n, 1.5, 1.2, rng.random((m, n)), rng.random((m, m)), rng.random((m, n))


def _cholesky(rng, size):
    n = _sizes(size, 6, 250)
    return n, _spd(rng, n)


def _lu(rng, size):
    n = _sizes(size, 6, 250)
    return n, _spd(rng, n)


def _ludcmp(rng, size):
    n = _sizes(size, 6, 250)
    return n, _spd(rng, n), rng.random(n), np.zeros(n), np.zeros(n)


def _durbin(rng, size):
    n = _sizes(size, 8, 1000)
    return n, 0.5 * rng.random(n) / n, np.zeros(n)


def _trisolv(rng, size):
    n = _sizes(size, 7, 1000)
    return n, np.tril(rng.random((n, n))) + n * np.eye(n), np.zeros(n), rng.random(n)


def _gramschmidt(rng, size):
    m, n = _sizes(size, (7, 5), (240, 200))
    return m, n, rng.random((m, n)) + np.eye(m, n), np.zeros((n, n)), np.zeros((m, n))


def _jacobi_1d(rng, size):
    t, n = _sizes(size, (4, 12), (200, 4000))
    return t, n, rng.random(n), rng.random(n)


def _jacobi_2d(rng, size):
    t, n = _sizes(size, (3, 8), (50, 250))
    return t, n, rng.random((n, n)), rng.random((n, n))


def _seidel_2d(rng, size):
    t, n = _sizes(size, (3, 8), (20, 250))
    return t, n, rng.random((n, n))


def _heat_3d(rng, size):
    t, n = _sizes(size, (3, 6), (20, 40))
    return t, n, rng.random((n, n, n)), rng.random((n, n, n))


def _fdtd_2d(rng, size):
    t, nx, ny = _sizes(size, (3, 6, 5), (50, 250, 300))
    return t, nx, ny, rng.random((nx, ny)), rng.random((nx, ny)), rng.random((nx, ny)), rng.random(t)


def _adi(rng, size):
    t, n = _sizes(size, (3, 8), (20, 200))
    return t, n, rng.random((n, n))


def _deriche(rng, size):
    w, h = _sizes(size, (6, 5), (400, 300))
    return w, h, 0.25, rng.random((w, h)), np.zeros((w, h))


def _correlation(rng, size):
    m, n = _sizes(size, (5, 7), (200, 240))
    return m, n, float(n), rng.random((n, m)), np.zeros((m, m)), np.zeros(m), np.zeros(m)


def _covariance(rng, size):
    m, n = _sizes(size, (5, 7), (200, 240))
    return m, n, float(n), rng.random((n, m)), np.zeros((m, m)), np.zeros(m)


def _spline(rng, size):
    n, m = _sizes(size, (9, 7), (64, 4000))
    x = np.sort(rng.random(n)) + np.arange(n)
    xs = rng.uniform(x[0] + 0.01, x[-1] - 0.01, m)
    return n, x, np.sin(x), m, xs, np.zeros(m)


def _advect(rng, size):
    n, steps = _sizes(size, (16, 5), (2000, 400))
    x = (np.arange(n + 2) - 0.5) / n
    u = np.exp(-40 * (x - 0.4) ** 2) + 0.1 * rng.random(n + 2)
    c, nu = 0.7, 0.01
    dt = 0.2 * min(1.0 / (n * c), 1.0 / (2.0 * nu * n * n))        # stable: CFL and diffusion number < 0.2
    return n, steps, dt, c, nu, u, 0.0


def _cloudsc(rng, size):
    klon, klev = _sizes(size, (3, 6), (1000, 137))
    paph = np.cumsum(np.ones((klon, klev + 1)) * (1.0e5 / klev), axis=1) - 0.5e5 / klev + 500.0 * rng.random((klon, 1))
    pap = 0.5 * (paph[:, 1:] + paph[:, :-1])
    t = 220.0 + 80.0 * (pap / 1.0e5) + 4.0 * rng.random((klon, klev))
    q = 0.012 * (pap / 1.0e5) ** 3 * (0.6 + 0.8 * rng.random((klon, klev)))
    lw = 1.0e-3 * rng.random((klon, klev))
    z = np.zeros((klon, klev))
    zf = np.zeros((klon, klev + 1))
    return 1, klon, klon, klev, 900.0, pap, paph, t, q, lw, z, z.copy(), z.copy(), zf, zf.copy()


BETA = 0.5 + 0.5 * np.cos(np.linspace(0.0, np.pi, 101))
_CLOUDSC_FILES = ["cloudsc/parkind1.F90", "cloudsc/yomcst.F90", "cloudsc/yoethf.F90", "cloudsc/yoecldp.F90",
                  "cloudsc/cloudsc_mini.F90"]


def _setup_cloudsc(lib):
    import ctypes
    beta = np.ascontiguousarray(BETA)
    lib.__yoecldp_MOD_su_cldp(beta.ctypes.data_as(ctypes.c_void_p))


CASES = [
    Case("gemm", ["gemm.f90"], "gemm", _gemm),
    Case("2mm", ["k2mm.f90"], "k2mm", _k2mm),
    Case("atax", ["atax.f90"], "atax", _atax),
    Case("bicg", ["bicg.f90"], "bicg", _bicg),
    Case("mvt", ["mvt.f90"], "mvt", _mvt),
    Case("syrk", ["syrk.f90"], "syrk", _syrk),
    Case("syr2k", ["syr2k.f90"], "syr2k", _syr2k),
    Case("trmm", ["trmm.f90"], "trmm", _trmm),
    Case("symm", ["symm.f90"], "symm", _symm),
    Case("cholesky", ["cholesky.f90"], "cholesky", _cholesky),
    Case("lu", ["lu.f90"], "lu", _lu),
    Case("ludcmp", ["ludcmp.f90"], "ludcmp", _ludcmp),
    Case("durbin", ["durbin.f90"], "durbin", _durbin),
    Case("trisolv", ["trisolv.f90"], "trisolv", _trisolv),
    Case("gramschmidt", ["gramschmidt.f90"], "gramschmidt", _gramschmidt),
    Case("jacobi-1d", ["jacobi_1d.f90"], "jacobi_1d", _jacobi_1d),
    Case("jacobi-2d", ["jacobi_2d.f90"], "jacobi_2d", _jacobi_2d),
    Case("seidel-2d", ["seidel_2d.f90"], "seidel_2d", _seidel_2d),
    Case("heat-3d", ["heat_3d.f90"], "heat_3d", _heat_3d),
    Case("fdtd-2d", ["fdtd_2d.f90"], "fdtd_2d", _fdtd_2d),
    Case("adi", ["adi.f90"], "adi", _adi),
    Case("deriche", ["deriche.f90"], "deriche", _deriche),
    Case("correlation", ["correlation.f90"], "correlation", _correlation),
    Case("covariance", ["covariance.f90"], "covariance", _covariance),
    Case("spline-f77", ["spline.f"], "splevl", _spline),
    Case("advect-driver", ["advect.f90"], "advect", _advect),
    Case("cloudsc-mini", _CLOUDSC_FILES, "cloudsc_mini", _cloudsc, include_dirs=["cloudsc"],
         modules={"yoecldp": {"yrecldp": {"rbeta": BETA}}}, setup=_setup_cloudsc, rtol=1e-11, grad_rtol=1e-5),
]

BY_NAME = {c.name: c for c in CASES}
