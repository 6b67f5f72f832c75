"""flowgrad inside PyTorch (``flowgrad.torch.function``) and JAX (``flowgrad.jax.function``):
gradients through a NumPy simulator match the same simulator written in the framework, and
the hybrid example trains (its loss decreases)."""
import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.ml
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def heat(u0, kappa, steps):
    """NumPy: explicit diffusion with in-place updates in a loop."""
    u = u0.copy()
    for t in range(steps):
        u[1:-1] += kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2])
    return u * u


def heat_field(kappa, u0, steps):
    """NumPy: a spatially varying coefficient (an array argument)."""
    u = u0.copy()
    for t in range(steps):
        u[1:-1] += 0.2 * kappa[1:-1] * (u[2:] - 2.0 * u[1:-1] + u[:-2])
    return np.sum(u * u)


# ---------------------------------------------------------------------------------------
# PyTorch
# ---------------------------------------------------------------------------------------


@pytest.fixture
def torch():
    return pytest.importorskip("torch", reason="flowgrad.torch needs torch (pip install torch==2.13.0)")


def torch_heat(torch, u, kappa, steps):
    for t in range(steps):
        u = torch.cat([u[:1], u[1:-1] + kappa * (u[2:] - 2 * u[1:-1] + u[:-2]), u[-1:]])
    return u * u


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_torch_function_gradients_match_torch(torch, backend):
    import flowgrad.torch
    sim = flowgrad.torch.function(heat, backend=backend)
    u = torch.linspace(0, 1, 12, dtype=torch.float64).requires_grad_()
    kappa = torch.tensor(0.2, dtype=torch.float64, requires_grad=True)
    ct = torch.randn(12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    (sim(u, kappa, 7) * ct).sum().backward()
    u2, k2 = u.detach().clone().requires_grad_(), kappa.detach().clone().requires_grad_()
    (torch_heat(torch, u2, k2, 7) * ct).sum().backward()
    torch.testing.assert_close(u.grad, u2.grad, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(kappa.grad, k2.grad, rtol=1e-12, atol=1e-14)


def test_torch_function_only_differentiates_what_requires_grad(torch):
    import flowgrad.torch
    sim = flowgrad.torch.function(heat, backend="numpy")
    u = torch.linspace(0, 1, 8, dtype=torch.float64)
    kappa = torch.tensor(0.1, dtype=torch.float64, requires_grad=True)
    out = sim(u, kappa, 3)
    assert out.requires_grad and out.dtype == torch.float64 and out.shape == (8,)
    out.sum().backward()
    assert u.grad is None and kappa.grad is not None
    plain = sim(u, 0.1, 3)                       # nothing requires grad: a forward call
    assert not plain.requires_grad
    torch.testing.assert_close(plain, out.detach())


def test_torch_function_inside_a_module_with_retain_graph(torch):
    import flowgrad.torch
    sim = flowgrad.torch.function(heat_field, backend="numpy")
    net = torch.nn.Linear(1, 1).double()
    x = torch.linspace(0, 1, 10, dtype=torch.float64)
    u0 = np.sin(np.pi * np.linspace(0, 1, 10))
    loss = sim(torch.sigmoid(net(x[:, None]))[:, 0], u0, 5)
    loss.backward(retain_graph=True)
    first = net.weight.grad.clone()
    loss.backward()                              # a second backward runs the forward sweep again
    torch.testing.assert_close(net.weight.grad, 2 * first)


def test_hybrid_example_trains(torch):
    spec = importlib.util.spec_from_file_location("hybrid_torch_sim", EXAMPLES / "hybrid_torch_sim.py")
    example = importlib.util.module_from_spec(spec)
    sys.modules["hybrid_torch_sim"] = example
    spec.loader.exec_module(example)
    losses = example.main(n=32, steps=60, train_steps=25, lr=0.03, backend="numpy", verbose=False)
    assert all(np.isfinite(losses))
    assert losses[-1] < 0.5 * losses[0], f"the loss did not decrease: {losses[0]:.3e} -> {losses[-1]:.3e}"


def test_torch_function_of_a_torch_program(torch):
    import flowgrad
    import flowgrad.torch
    layer = torch.nn.Linear(3, 2).double()
    x = torch.randn(4, 3, dtype=torch.float64)
    f = flowgrad.torch.function(flowgrad.from_torch(layer, x))
    xg = x.clone().requires_grad_()
    f(xg).square().sum().backward()
    x2 = x.clone().requires_grad_()
    layer(x2).square().sum().backward()
    torch.testing.assert_close(xg.grad, x2.grad)


# ---------------------------------------------------------------------------------------
# JAX
# ---------------------------------------------------------------------------------------


@pytest.fixture
def jax():
    jax = pytest.importorskip("jax", reason="flowgrad.jax needs jax (pip install -e '.[jax]')")
    jax.config.update("jax_enable_x64", True)
    return jax


def jax_heat(jnp, u, kappa, steps):
    for t in range(steps):
        u = u.at[1:-1].add(kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2]))
    return u * u


@pytest.mark.parametrize("backend", ["numpy", pytest.param("native", marks=pytest.mark.native)])
def test_jax_function_under_jit_and_grad(jax, backend):
    import flowgrad.jax
    jnp = jax.numpy
    sim = flowgrad.jax.function(heat, backend=backend)
    u = jnp.linspace(0.0, 1.0, 12)
    ct = jnp.asarray(np.random.default_rng(0).standard_normal(12))

    def loss(f):
        return lambda u, k: jnp.sum(f(u, k, 6) * ct)
    np.testing.assert_allclose(jax.jit(loss(sim))(u, 0.2), loss(lambda u, k, s: jax_heat(jnp, u, k, s))(u, 0.2),
                               rtol=1e-12)
    got = jax.jit(jax.grad(loss(sim), argnums=(0, 1)))(u, 0.2)
    want = jax.grad(loss(lambda u, k, s: jax_heat(jnp, u, k, s)), argnums=(0, 1))(u, 0.2)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-13)


def test_jax_function_vjp_of_an_array_argument(jax):
    import flowgrad.jax
    jnp = jax.numpy
    sim = flowgrad.jax.function(heat_field, backend="numpy")
    kappa = jnp.linspace(0.1, 0.9, 10)
    u0 = jnp.sin(jnp.pi * jnp.linspace(0.0, 1.0, 10))
    value, g = jax.value_and_grad(lambda k: sim(k, u0, 4))(kappa)
    assert np.isclose(value, heat_field(np.asarray(kappa), np.asarray(u0), 4))
    eps, d = 1e-6, np.random.default_rng(1).standard_normal(10)
    fd = (heat_field(np.asarray(kappa) + eps * d, np.asarray(u0), 4)
          - heat_field(np.asarray(kappa) - eps * d, np.asarray(u0), 4)) / (2 * eps)
    assert abs(fd - float(jnp.dot(g, d))) < 1e-7 * max(1.0, abs(fd))
