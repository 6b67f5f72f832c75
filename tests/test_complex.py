"""Complex numbers: values against NumPy, gradients against central differences in JAX's
convention (``dL/dx - i dL/dy``), and against ``jax.grad`` / ``jax.vjp`` (``-m jax``), on both
backends. Realistic loop programs and FFTs are in ``test_complex_programs.py``."""

import types

import numpy as np
import pytest

import flowgrad
from complex_oracle import check_grad, check_jax_grad, check_jax_vjp, check_vjp
from conftest import have_module

needs_jax = pytest.mark.skipif(not have_module("jax"), reason="jax is not installed")

RNG = np.random.default_rng(7)
Z = RNG.standard_normal(5) + 1j * RNG.standard_normal(5)
W = RNG.standard_normal(5) + 1j * RNG.standard_normal(5)
X = RNG.standard_normal(5)
A = RNG.standard_normal((3, 3)) + 1j * RNG.standard_normal((3, 3))
B = RNG.standard_normal((3, 2)) + 1j * RNG.standard_normal((3, 2))


def twin(fn):
    """``fn`` with ``np`` meaning ``jax.numpy`` (in the helpers of its module too): the JAX twin of a
    functional program."""
    import jax.numpy as jnp
    scope = dict(fn.__globals__, np=jnp)
    for name, value in fn.__globals__.items():
        if isinstance(value, types.FunctionType) and value.__module__ == fn.__module__:
            scope[name] = types.FunctionType(value.__code__, scope, name, value.__defaults__)
    return types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)


# ---------------------------------------------------------------- element functions


def parts(w):
    """A real loss seeing both parts of ``w`` (and its modulus)."""
    return np.sum(np.real(w) + 2.0 * np.imag(w) + 0.5 * np.abs(w) ** 2)


def mixed(z, x):
    return np.sum(np.abs(z * z + 1j * x) ** 2)


def exp_conj(z, x):
    return np.sum(np.real(np.exp(z) * np.conj(z)) * x)


def quotient(z, w, x):
    return parts(x / z + w / (z + 2.0) - z / w)


def powers(z, w):
    return parts(z ** 3 + z ** 2 + 0.5 * z ** 2.5 + z ** -2 + (z + 3.0) ** (0.1 * w) + 2.0 ** z)


def angle_abs(z, x):
    return np.sum(np.angle(z) * x + np.abs(z) * x * x)


def attributes(z, w):
    return np.sum(z.real * w.imag - z.imag * w.real + np.real(z.conj() * np.conjugate(w)))


def reductions(z, w):
    s = np.sum(z * w)
    m = np.mean(z - w)
    p = np.prod(z[:3] + 1.0)
    return np.abs(s) ** 2 + np.real(m * p) + np.imag(np.sum(z * z, keepdims=True)[0])


HOLOMORPHIC = ["exp", "log", "sqrt", "sin", "cos", "tan", "tanh", "sinh", "cosh", "arcsin", "arccos", "arctan",
               "arcsinh", "arccosh", "arctanh", "log10", "log2", "exp2", "expm1", "log1p", "square", "negative"]


def holomorphic(z, name):
    return parts(getattr(np, name)(z) * (1.0 + 0.5j))


CASES = [(mixed, (Z, X), ("z", "x")), (exp_conj, (Z, X), ("z", "x")), (quotient, (Z, W, X), ("z", "w", "x")),
         (powers, (Z, W), ("z", "w")), (angle_abs, (Z, X), ("z", "x")), (attributes, (Z, W), ("z", "w")),
         (reductions, (Z, W), ("z", "w"))]


@pytest.mark.parametrize("fn, args, wrt", CASES, ids=[c[0].__name__ for c in CASES])
def test_gradients(fn, args, wrt, backend):
    check_grad(fn, args, wrt, backend)


@pytest.mark.jax
@needs_jax
@pytest.mark.parametrize("fn, args, wrt", CASES, ids=[c[0].__name__ for c in CASES])
def test_gradients_match_jax(fn, args, wrt, backend):
    check_jax_grad(fn, twin(fn), args, wrt, backend)


@pytest.mark.parametrize("name", HOLOMORPHIC)
def test_holomorphic(name, backend):
    z = 0.4 * Z
    check_grad(holomorphic, (z, name), "z", backend)


# JAX's arccosh derivative, 1 / sqrt(z^2 - 1), has the other sign than the derivative of its (and
# NumPy's) values where Re z < 0; flowgrad's agrees with the finite differences there
@pytest.mark.jax
@needs_jax
@pytest.mark.parametrize("name", [n for n in HOLOMORPHIC if n != "arccosh"])
def test_holomorphic_match_jax(name, backend):
    z = 0.4 * Z
    check_jax_grad(holomorphic, twin(holomorphic), (z, name), "z", backend)


# ---------------------------------------------------------------- scalars, promotion, API


def scalar_args(z, c, t, x):
    """A Python complex ``c``, a NumPy complex128 ``t``, a Python float ``t``: ``complex(a, b)``."""
    u = complex(x, 2.0 * x) * c + t
    return np.abs(np.sum(z * u)) ** 2 + np.real(c * np.conj(t))


def test_scalar_arguments(backend):
    args = (Z, 0.3 - 0.8j, np.complex128(1.5 + 0.25j), 0.7)
    grads = check_grad(scalar_args, args, ("z", "c", "t", "x"), backend)
    assert isinstance(grads[1], complex) and isinstance(grads[3], float)


def tree_loss(p, s):
    return np.sum(np.abs(p["z"] * p["c"] + s) ** 2)


def test_pytree_with_complex_leaves(backend):
    p, s = {"z": Z, "c": 0.5 - 1j}, np.complex64(1 + 1j)
    gp, gs = flowgrad.grad(tree_loss, wrt=("p", "s"), backend=backend)(p, s)
    assert gp["z"].dtype == np.complex128 and isinstance(gp["c"], complex)
    want = check_grad(lambda z, c, s: np.sum(np.abs(z * c + s) ** 2), (Z, 0.5 - 1j, complex(s)), ("z", "c", "s"),
                      backend)
    np.testing.assert_allclose(gp["z"], want[0])
    np.testing.assert_allclose([gp["c"], gs], want[1:], rtol=1e-6)


def promotion(x32, z64, n):
    a = x32 * 1j                    # float32 with a Python complex: complex64
    b = x32 + z64                   # float32 with complex64: complex64
    c = np.arange(n) * 1j           # int64 with a Python complex: complex128
    return a, b, c, a * np.float64(2.0), np.exp(z64) * 2.0


def test_promotion_follows_numpy(backend):
    x32 = np.arange(3, dtype=np.float32)
    z64 = (np.arange(3) + 1j).astype(np.complex64)
    got = flowgrad.jit(promotion, backend=backend)(x32, z64, 3)
    want = promotion(x32, z64, 3)
    for g, w in zip(got, want):
        assert g.dtype == w.dtype, (g.dtype, w.dtype)
        np.testing.assert_allclose(g, w, rtol=1e-6)


def complex64_loss(z):
    return np.sum(np.abs(np.exp(z) * z) ** 2)


def test_complex64_gradient(backend):
    z = (0.5 * Z).astype(np.complex64)
    g = flowgrad.grad(complex64_loss, backend=backend)(z)
    assert g.dtype == np.complex64
    (want,) = check_grad(complex64_loss, (z.astype(np.complex128),), "z", backend)
    np.testing.assert_allclose(g, want, rtol=2e-5)


def elementwise_out(z, x):
    return z * np.exp(z) + 1j * x * z


@pytest.mark.parametrize("cotangent", [np.ones(5), 1j * np.ones(5), W], ids=["one", "i", "complex"])
def test_vjp_with_complex_cotangent(cotangent, backend):
    check_vjp(elementwise_out, (Z, X), ("z", "x"), cotangent, backend)


def scalar_out(z, x):
    return np.sum(z * z) * x


def test_vjp_of_a_complex_scalar(backend):
    for ct in (1.0, 1j, 0.3 - 2j):
        check_vjp(scalar_out, (Z, 0.7), ("z", "x"), ct, backend)


def test_vjp_default_wrt_includes_complex_arguments(backend):
    out, pull = flowgrad.vjp(elementwise_out, Z, X, backend=backend)
    gz, gx = pull(W)
    assert gz.dtype == np.complex128 and gx.dtype == np.float64


@pytest.mark.jax
@needs_jax
@pytest.mark.parametrize("cotangent", [np.ones(5), W], ids=["one", "complex"])
def test_vjp_matches_jax(cotangent, backend):
    check_jax_vjp(elementwise_out, twin(elementwise_out), (Z, X), ("z", "x"), cotangent, backend)


def test_grad_of_a_complex_result_is_refused(backend):
    with pytest.raises(flowgrad.InputError, match="real scalar result.*np.abs"):
        flowgrad.grad(lambda z: np.sum(z * z), backend=backend)(Z)


def test_real_result_needs_a_real_cotangent(backend):
    _, pull = flowgrad.vjp(lambda z: np.abs(z), Z, backend=backend)
    with pytest.raises(flowgrad.InputError, match="cotangent is complex"):
        pull(1j * np.ones(5))


def test_abs_at_zero_has_gradient_zero(backend):
    z = np.array([0j, 1 + 1j])
    g = flowgrad.grad(lambda z: np.sum(np.abs(z)), backend=backend)(z)
    np.testing.assert_allclose(g, [0, (1 - 1j) / np.sqrt(2)])


def indexing(z, x, idx):
    """Gathers, scatters, masks, tuple-assigned butterflies and cumulative sums of complex arrays."""
    y = z.astype(complex) * np.outer(x[:2], x[:2]).sum()
    y[idx] = y[idx][::-1] * 1j                     # a scatter of a gather
    y[np.abs(y) > 1.0] *= 0.5                      # a mask
    e, o = y[0], y[1] * np.exp(-0.25j * np.pi)
    y[0], y[1] = e + o, e - o                      # a butterfly
    c = np.cumsum(y * x)
    return np.sum(np.abs(c) ** 2) + np.linalg.norm(y) + np.real(np.sum(x.astype(np.complex128) * y))


def test_indexing(backend):
    check_grad(indexing, (Z, X, np.array([3, 1, 4])), ("z", "x"), backend)


@pytest.mark.jax
@needs_jax
def test_indexing_matches_jax(backend):
    def jax_indexing(z, x, idx):
        import jax.numpy as jnp
        y = z.astype(complex) * jnp.outer(x[:2], x[:2]).sum()
        y = y.at[idx].set(y[idx][::-1] * 1j)
        y = jnp.where(jnp.abs(y) > 1.0, 0.5 * y, y)
        e, o = y[0], y[1] * jnp.exp(-0.25j * jnp.pi)
        y = y.at[0].set(e + o).at[1].set(e - o)
        c = jnp.cumsum(y * x)
        return jnp.sum(jnp.abs(c) ** 2) + jnp.linalg.norm(y) + jnp.real(jnp.sum(x.astype(jnp.complex128) * y))
    check_jax_grad(indexing, jax_indexing, (Z, X, np.array([3, 1, 4])), ("z", "x"), backend)


# ---------------------------------------------------------------- linear algebra


def products(a, b, z, w):
    c = a @ b                                  # matrix @ matrix
    v = a @ z[:3]                              # matrix @ vector
    u = z[:3] @ a                              # vector @ matrix
    d = np.dot(z, w)                           # vector . vector, no conjugate
    e = np.vdot(z, w)                          # conjugates its first argument
    return np.sum(np.abs(c) ** 2) + np.real(np.sum(v * u)) + np.imag(d) + np.abs(e) ** 2


def real_with_complex(a, x, y):
    m = np.exp(1j * x)                         # a real matrix argument times a complex one
    return np.sum(np.abs(a @ (m @ y)) ** 2)


def solves(a, b, z):
    x = np.linalg.solve(a + 3.0 * np.eye(3), b)
    y = np.linalg.solve(a.T + 3.0j * np.eye(3), z[:3])
    return np.sum(np.abs(x) ** 2) + np.real(np.sum(y * y)) + np.abs(np.trace(np.linalg.inv(a + 2.0 * np.eye(3))))


LINALG = [(products, (A, B, Z, W), ("a", "b", "z", "w")),
          (real_with_complex, (A, RNG.standard_normal((3, 3)), RNG.standard_normal((3, 2))), ("a", "x", "y")),
          (solves, (A, B, Z), ("a", "b", "z"))]


@pytest.mark.parametrize("fn, args, wrt", LINALG, ids=[c[0].__name__ for c in LINALG])
def test_linear_algebra(fn, args, wrt, backend):
    check_grad(fn, args, wrt, backend)


@pytest.mark.jax
@needs_jax
@pytest.mark.parametrize("fn, args, wrt", LINALG, ids=[c[0].__name__ for c in LINALG])
def test_linear_algebra_matches_jax(fn, args, wrt, backend):
    check_jax_grad(fn, twin(fn), args, wrt, backend)


def matmul_out(a, b):
    return a @ b


@pytest.mark.jax
@needs_jax
def test_matmul_vjp_transposes_without_conjugating(backend):
    check_jax_vjp(matmul_out, twin(matmul_out), (A, B), ("a", "b"), RNG.standard_normal((3, 2)) + 1j, backend)


# ---------------------------------------------------------------- refused, with the line and a fix


def compares(z):
    if z[0] > 0:
        return np.sum(np.abs(z))
    return 0.0


def maximum(z):
    return np.sum(np.abs(np.maximum(z, 0.0)))


def sorts(z):
    return np.sum(np.abs(np.sort(z)))


def eigh(z):
    return np.sum(np.linalg.eigvalsh(np.outer(z, z)))


def det(z):
    return np.abs(np.linalg.det(np.outer(z, z)))


def largest(z):
    return np.abs(np.max(z))


def to_float(z):
    return np.sum(z.astype(np.float64))


def into_real(z, x):
    y = x.copy()
    y[1:3] = z[:2]
    return np.sum(y)


def added_to_real(z, x):
    y = x.copy()
    y += z
    return np.sum(y)


def rfft_of_complex(z):
    return np.sum(np.abs(np.fft.rfft(z)))


def argmax(z):
    return np.abs(z[np.argmax(z)])


def sign(z):
    return np.sum(np.abs(np.sign(z)))


def hypot(z, x):
    return np.sum(np.hypot(z, x))


def python_float(z):
    return float(z[0]) + np.sum(np.abs(z))


def write_through_real(z):
    z = z.copy()
    r = z.real
    r[0] = 5.0
    return np.sum(np.abs(z))


REFUSED = [(compares, "> of complex values"), (maximum, "np.maximum of complex values"),
           (sorts, "of complex values"), (eigh, "eigh of a complex128 matrix"),
           (det, "np.linalg.det of a complex matrix"),
           (largest, "max of complex values"), (to_float, "conversion of complex values to float64"),
           (into_real, "complex values into a float64 array"), (added_to_real, "complex values into a float64 array"),
           (rfft_of_complex, "np.fft.rfft of complex values"), (write_through_real, "z.real of a complex array"),
           (argmax, "argmax of complex values"), (sign, "np.sign of complex values"),
           (hypot, "np.hypot of complex values"), (python_float, "conversion of complex values to float64")]


@pytest.mark.parametrize("fn, message", REFUSED, ids=[r[0].__name__ for r in REFUSED])
def test_refused_with_the_line(fn, message, backend):
    args = (Z, X) if fn.__code__.co_argcount == 2 else (Z,)
    with pytest.raises(flowgrad.UnsupportedError, match=r"test_complex\.py:\d+: unsupported .*" + message):
        flowgrad.grad(fn, backend=backend)(*args)


# ---------------------------------------------------------------- interop and the ML front doors


def field(x, z):
    return np.exp(1j * x) * z


@pytest.mark.jax
@needs_jax
def test_jax_function_differentiates_complex_arguments(backend):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    f = flowgrad.jax.function(field, backend=backend)

    def loss(fn, x, z):
        return jnp.sum(jnp.abs(fn(x, z) - 1.0) ** 2)
    ours = jax.grad(lambda x, z: loss(f, x, z), argnums=(0, 1))(jnp.asarray(X), jnp.asarray(Z))
    theirs = jax.grad(lambda x, z: loss(twin(field), x, z), argnums=(0, 1))(jnp.asarray(X), jnp.asarray(Z))
    for a, b in zip(ours, theirs):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-10)


@pytest.mark.ml
@pytest.mark.skipif(not have_module("torch"), reason="torch is not installed")
def test_torch_function_with_a_complex_result(backend):
    import torch
    f = flowgrad.torch.function(lambda x, y: np.exp(1j * x) * y, backend=backend)
    x = torch.tensor(X, requires_grad=True)
    y = torch.tensor(X[::-1].copy(), requires_grad=True)
    c = torch.tensor(W)
    torch.sum(torch.abs(f(x, y) - c) ** 2).backward()
    xt, yt = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
    torch.sum(torch.abs(torch.exp(1j * xt) * yt - c) ** 2).backward()
    np.testing.assert_allclose(x.grad.numpy(), xt.grad.numpy(), rtol=1e-10)
    np.testing.assert_allclose(y.grad.numpy(), yt.grad.numpy(), rtol=1e-10)


@pytest.mark.ml
@pytest.mark.skipif(not have_module("torch"), reason="torch is not installed")
def test_complex_in_a_torch_model_is_refused():
    import torch

    class Model(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3, dtype=torch.complex64))

        def forward(self, x):
            return torch.abs(x * self.w).sum()
    with pytest.raises(flowgrad.UnsupportedError, match="complex values"):
        flowgrad.from_torch(Model(), np.ones(3, dtype=np.float32))
    with pytest.raises(flowgrad.UnsupportedError, match="complex values"):
        flowgrad.from_torch(torch.nn.Identity(), np.ones(3, dtype=np.complex64))
