"""Complex programs with loops and FFTs, on both backends: ``np.fft`` against NumPy and JAX, and
user-style programs (a contour integral of a resolvent, a self-energy over a neighbour list, a
radix-2 FFT written with butterflies, a DFT and a wave-function step updated in place) against
central differences and ``jax.grad``."""

import numpy as np
import pytest

import flowgrad
from complex_oracle import check_grad, check_jax_grad, check_jax_vjp, check_vjp
from conftest import have_module
from test_complex import twin

needs_jax = pytest.mark.skipif(not have_module("jax"), reason="jax is not installed")

RNG = np.random.default_rng(11)


def cplx(*shape):
    return RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)


# ---------------------------------------------------------------- np.fft


def fft_n(n, norm):
    return lambda z: np.fft.fft(z, n=n, norm=norm)


def ifft_axis(n, norm):
    return lambda z: np.fft.ifft(z, n=n, axis=0, norm=norm)


def rfft_n(n, norm):
    return lambda z: np.fft.rfft(z, n=n, norm=norm)


def irfft_n(n, norm):
    return lambda z: np.fft.irfft(z, n=n, norm=norm)


def irfft_axis(n, norm):
    return lambda z: np.fft.irfft(z, n=n, axis=0, norm=norm)


def fft2_s(n, norm):
    return lambda z: np.fft.fft2(z, s=None if n is None else (n, n + 1), norm=norm)


def ifftn_all(n, norm):
    return lambda z: np.fft.ifftn(z, norm=norm)


Z8 = cplx(8)
Z34 = cplx(3, 4)
X8 = RNG.standard_normal(8)

FFTS = [(fft_n, Z8, [None, 5, 12]), (fft_n, X8, [None, 6]), (ifft_axis, Z34, [None, 2, 5]),
        (rfft_n, X8, [None, 5, 11]), (irfft_n, cplx(5), [None, 7, 9, 3]), (irfft_axis, cplx(4, 3), [None, 5]),
        (fft2_s, Z34, [None, 3]), (ifftn_all, Z34, [None])]
FFT_CASES = [pytest.param(make, x, n, norm, id=f"{make.__name__}-{x.dtype.kind}-n{n}-{norm}")
             for make, x, ns in FFTS for n in ns for norm in ([None, "ortho", "forward"] if n is None else [None])]


def _cotangent(out):
    c = RNG.standard_normal(out.shape)
    return c + 1j * RNG.standard_normal(out.shape) if np.iscomplexobj(out) else c


@pytest.mark.parametrize("make, x, n, norm", FFT_CASES)
def test_fft(make, x, n, norm, backend):
    fn = make(n, norm)
    out = fn(x)
    got = flowgrad.jit(fn, backend=backend)(x)
    assert got.dtype == out.dtype and got.shape == out.shape
    np.testing.assert_allclose(got, out, rtol=1e-12, atol=1e-12)
    check_vjp(fn, (x,), "z", _cotangent(out), backend)


@pytest.mark.jax
@needs_jax
@pytest.mark.parametrize("make, x, n, norm", FFT_CASES)
def test_fft_vjp_matches_jax(make, x, n, norm, backend):
    fn = make(n, norm)
    check_jax_vjp(fn, twin(fn), (x,), "z", _cotangent(fn(x)), backend)


def test_fft_float32_stays_single_precision(backend):
    x = X8.astype(np.float32)
    assert flowgrad.jit(rfft_n(None, None), backend=backend)(x).dtype == np.complex64
    assert flowgrad.jit(fft_n(None, None), backend=backend)(x).dtype == np.complex64
    g = flowgrad.grad(lambda x: np.sum(np.abs(np.fft.rfft(x)) ** 2), backend=backend)(x)
    assert g.dtype == np.float32


def spectrum(x, f):
    shifted = np.fft.fftshift(np.fft.fft(x))
    freqs = np.fft.fftshift(np.fft.fftfreq(8, 0.1))
    return np.sum(np.abs(shifted) ** 2 * freqs * f) + np.sum(np.fft.ifftshift(x) * f)


def test_fftshift_and_fftfreq(backend):
    check_grad(spectrum, (X8, RNG.standard_normal(8)), ("x", "f"), backend)


# ---------------------------------------------------------------- a radix-2 FFT with loops


BITS = 3
N = 1 << BITS
REVERSED = np.array([int(format(k, f"0{BITS}b")[::-1], 2) for k in range(N)])


def radix2(x, rev):
    """Cooley-Tukey, decimation in time: a bit-reversed copy, then butterflies in place."""
    n = x.shape[0]
    out = np.zeros(n, dtype=complex)
    for k in range(n):
        out[k] = x[rev[k]]
    size = 2
    while size <= n:
        half = size // 2
        for start in range(0, n, size):
            for k in range(half):
                w = np.exp(-2j * np.pi * k / size)
                e = out[start + k]
                o = out[start + k + half] * w
                out[start + k] = e + o
                out[start + k + half] = e - o
        size *= 2
    return out


def radix2_loss(x, rev, c):
    return np.sum(np.abs(radix2(x, rev)) ** 2 * c) + np.real(np.sum(radix2(x, rev) * c))


def numpy_fft_loss(x, rev, c):
    return np.sum(np.abs(np.fft.fft(x)) ** 2 * c) + np.real(np.sum(np.fft.fft(x) * c))


@pytest.mark.parametrize("x", [cplx(N), RNG.standard_normal(N)], ids=["complex", "real"])
def test_radix2_fft_matches_numpy_fft(x, backend):
    c = RNG.standard_normal(N)
    np.testing.assert_allclose(flowgrad.jit(radix2, backend=backend)(x, REVERSED), np.fft.fft(x), atol=1e-12)
    ours = flowgrad.grad(radix2_loss, wrt="x", backend=backend)(x, REVERSED, c)
    through_fft = flowgrad.grad(numpy_fft_loss, wrt="x", backend=backend)(x, REVERSED, c)
    np.testing.assert_allclose(ours, through_fft, rtol=1e-10, atol=1e-12)
    check_grad(radix2_loss, (x, REVERSED, c), ("x", "c"), backend)


@pytest.mark.jax
@needs_jax
def test_radix2_fft_matches_jax(backend):
    x, c = cplx(N), RNG.standard_normal(N)
    check_jax_grad(radix2_loss, twin(numpy_fft_loss), (x, REVERSED, c), ("x", "c"), backend)


def dft(x, c):
    """The DFT summed term by term into a complex array (``X[k] += ...``)."""
    n = x.shape[0]
    out = np.zeros(n, dtype=np.complex128)
    for k in range(n):
        for j in range(n):
            out[k] += x[j] * np.exp(-2j * np.pi * k * j / n)
    return np.sum(np.abs(out) ** 2 * c)


def dft_reference(x, c):
    return np.sum(np.abs(np.fft.fft(x)) ** 2 * c)


def test_dft_accumulated_in_place(backend):
    x, c = cplx(6), RNG.standard_normal(6)
    check_grad(dft, (x, c), ("x", "c"), backend)
    np.testing.assert_allclose(flowgrad.grad(dft, backend=backend)(x, c),
                               flowgrad.grad(dft_reference, backend=backend)(x, c), rtol=1e-10)


# ---------------------------------------------------------------- physics-style programs


def contour(h, v, nodes, weights):
    """sum_k w_k tr(v^T (z_k - H)^-1 v): a contour integral of the resolvent (as in a density
    matrix from a Green's function)."""
    n = h.shape[0]
    eye = np.eye(n)
    total = 0.0
    for k in range(nodes.shape[0]):
        g = np.linalg.solve(nodes[k] * eye - h, v)
        total = total + weights[k] * np.trace(v.T @ g)
    return np.real(total)


def resolvent(eps, nodes, weights):
    """The same with eigenvalues: sum_k w_k sum_i 1 / (z_k - eps_i), accumulated in a loop."""
    s = 0.0
    for k in range(nodes.shape[0]):
        s += weights[k] * np.sum(1.0 / (nodes[k] - eps))
    return np.real(s) + np.abs(s)


def _circle(m, center, radius):
    theta = 2 * np.pi * (np.arange(m) + 0.5) / m
    nodes = center + radius * np.exp(1j * theta)
    return nodes, radius * np.exp(1j * theta) / m


H = RNG.standard_normal((4, 4))
H = H + H.T
V = RNG.standard_normal((4, 2))
NODES, WEIGHTS = _circle(6, 0.2, 3.0)
PROGRAMS = [(contour, (H, V, NODES, WEIGHTS), ("h", "v", "nodes", "weights")),
            (resolvent, (RNG.standard_normal(4), NODES, WEIGHTS), ("eps", "nodes", "weights"))]


def self_energy(t, r, kvec, pairs):
    """sum over a neighbour list of t_ij e^{i k . (r_i - r_j)}, then |.|^2."""
    s = 0j
    for i, j in pairs:
        s += t[i, j] * np.exp(1j * (kvec @ (r[i] - r[j])))
    return np.abs(s) ** 2 + np.real(s)


PAIRS = np.array([(0, 1), (1, 2), (2, 0), (1, 3), (3, 2), (0, 3)])
PROGRAMS.append((self_energy, (RNG.standard_normal((4, 4)), RNG.standard_normal((4, 3)), RNG.standard_normal(3),
                               PAIRS), ("t", "r", "kvec")))


def wave_step(psi, v, dt, steps):
    """Explicit steps of i dpsi/dt = (-d2/dx2 + v) psi, updated in place; the density's moment."""
    psi = psi.copy()
    n = psi.shape[0]
    for t in range(steps):
        lap = psi[2:] - 2.0 * psi[1:-1] + psi[:-2]
        psi[1:-1] += 1j * dt * (lap - v[1:-1] * psi[1:-1])
    return np.sum(np.abs(psi) ** 2 * np.arange(n))


PROGRAMS.append((wave_step, (cplx(8), RNG.standard_normal(8), 0.05, 6), ("psi", "v", "dt")))


@pytest.mark.parametrize("fn, args, wrt", PROGRAMS, ids=[p[0].__name__ for p in PROGRAMS])
def test_programs(fn, args, wrt, backend):
    grads = check_grad(fn, args, wrt, backend)
    for a, g in zip([args[fn.__code__.co_varnames.index(w)] for w in wrt], grads):
        assert np.iscomplexobj(g) == np.iscomplexobj(a)          # real arguments get real gradients


def self_energy_jax(t, r, kvec, pairs):
    import jax.numpy as jnp
    s = 0j
    for i, j in pairs:
        s = s + t[i, j] * jnp.exp(1j * (kvec @ (r[i] - r[j])))
    return jnp.abs(s) ** 2 + jnp.real(s)


def wave_step_jax(psi, v, dt, steps):
    n = psi.shape[0]
    for t in range(steps):
        lap = psi[2:] - 2.0 * psi[1:-1] + psi[:-2]
        psi = psi.at[1:-1].add(1j * dt * (lap - v[1:-1] * psi[1:-1]))
    import jax.numpy as jnp
    return jnp.sum(jnp.abs(psi) ** 2 * jnp.arange(n))


@pytest.mark.jax
@needs_jax
@pytest.mark.parametrize("fn, args, wrt", PROGRAMS, ids=[p[0].__name__ for p in PROGRAMS])
def test_programs_match_jax(fn, args, wrt, backend):
    jax_fn = {"self_energy": self_energy_jax, "wave_step": wave_step_jax}.get(fn.__name__) or twin(fn)
    check_jax_grad(fn, jax_fn, args, wrt, backend)


# ---------------------------------------------------------------- the native backend's paths


def large(z, x):
    """Element functions over 4096 elements: the native backend runs them as NumPy ufuncs on
    temporaries (``native_runtime.vector_math``), where float64 ones are compiled into the loops."""
    w = np.exp(0.1 * z) + np.log(z) * np.tanh(0.2 * z) + np.sin(z) * np.cos(x) + np.arctan(0.3 * z)
    return np.sum(np.abs(w) ** 2 * np.exp(x)) + np.sum(np.real(np.sqrt(z)) * np.tanh(x))


def test_large_arrays_on_both_backends(backend):
    z, x = 0.5 * cplx(4096) + 1.0, 0.1 * RNG.standard_normal(4096)
    value, (gz, gx) = flowgrad.value_and_grad(large, wrt=("z", "x"), backend=backend)(z, x)
    ref_value, (rz, rx) = flowgrad.value_and_grad(large, wrt=("z", "x"), backend="numpy")(z, x)
    np.testing.assert_allclose(value, large(z, x), rtol=1e-12)
    np.testing.assert_allclose(gz, rz, rtol=1e-10)
    np.testing.assert_allclose(gx, rx, rtol=1e-10)
    d, e = cplx(4096), RNG.standard_normal(4096)       # a directional difference for the numpy one
    h = 1e-6
    fd = (large(z + h * d, x + h * e) - large(z - h * d, x - h * e)) / (2 * h)
    np.testing.assert_allclose(np.real(np.sum(rz * d)) + np.sum(rx * e), fd, rtol=1e-6)


def mixed_einsum(a, z):
    """A real matrix in an einsum with complex operands (its gradient is real)."""
    return np.sum(np.abs(np.einsum("ij,jk,k->i", a, a + 1j, z)) ** 2)


def test_einsum_of_real_and_complex(backend):
    check_grad(mixed_einsum, (RNG.standard_normal((3, 3)), cplx(3)), ("a", "z"), backend)


def run_time_length(z, k):
    """Arrays whose length is known only at run time, overwritten in a loop (taped whole)."""
    acc = 0.0
    for t in range(3):
        w = z[:k] * (t + 1j)
        w = np.exp(0.3 * w) * z[:k]
        acc = acc + np.sum(w * w)
    return np.abs(acc) ** 2


def test_run_time_lengths(backend):
    check_grad(run_time_length, (cplx(6), 4), "z", backend)


def burgers(u, nu, steps):
    """A time loop swapping two complex arrays: its tapes are what the checkpoint planner shrinks."""
    un = np.empty_like(u)
    for t in range(steps):
        f = 0.5 * u * u
        un[1:-1] = u[1:-1] - 0.1 * (f[2:] - f[:-2]) + nu * (u[2:] - 2.0 * u[1:-1] + u[:-2])
        un[0], un[-1] = u[0], u[-1]
        u, un = un, u
    return np.sum(np.abs(np.sin(u)) ** 2)


@pytest.mark.parametrize("strategy", ["recompute_all", "ilp"])
def test_checkpointed_complex_loop(strategy, backend):
    args = (0.5 * cplx(64), 0.2, 300)
    want = flowgrad.grad(burgers, wrt=("u", "nu"), backend=backend)(*args)
    budget = "150KiB" if strategy == "ilp" else None
    plan = flowgrad.explain(burgers, *args, wrt=("u", "nu"), memory_budget=budget, strategy=strategy, backend=backend)
    assert "store every iteration" not in str(plan)
    got = flowgrad.grad(burgers, wrt=("u", "nu"), backend=backend, strategy=strategy, memory_budget=budget)(*args)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12)


def fixed_matrix(a, b, nodes):
    """Solves with one complex matrix in a loop: its LU factorisation is hoisted out of the loop."""
    s = 0.0
    m = a + 4.0 * np.eye(3)
    for k in range(nodes.shape[0]):
        x = np.linalg.solve(m, b * nodes[k])
        s = s + np.sum(x * x)
    return np.abs(s)


def test_factorisation_hoisted_out_of_a_loop(backend):
    args = (cplx(3, 3), cplx(3), np.exp(1j * np.arange(4.0)))
    assert "lu_factor" in flowgrad.grad(fixed_matrix, wrt=("a", "b"), backend=backend).source(*args)
    check_grad(fixed_matrix, args, ("a", "b", "nodes"), backend)
