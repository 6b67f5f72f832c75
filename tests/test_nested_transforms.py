"""Transforms that nest: ``grad``, ``value_and_grad``, ``jvp``, ``vjp`` and ``hvp`` called inside a
function another transform captures, and reverse mode over a gradient program with tapes.

Oracles: central differences of the reverse-mode gradient (numpy backend) along a random
direction for every second derivative (``grad(lambda x: grad(f)(x) @ v)`` is ``H v``); JAX's
nested transforms where JAX is installed.
"""

import copy

import numpy as np
import pytest

import flowgrad
from conftest import have_module
from test_forward_mode import EPS, HVP_PROGRAMS, U, _direction, newton_cubic


def _position(fn, wrt):
    return wrt if isinstance(wrt, int) else fn.__code__.co_varnames.index(wrt)


def _hv_differences(fn, args, wrt, v):
    """``H v`` by central differences of the gradient along ``v``."""
    pos = _position(fn, wrt)
    g = flowgrad.grad(fn, wrt=wrt, backend="numpy")
    plus, minus = list(copy.deepcopy(args)), list(copy.deepcopy(args))
    plus[pos], minus[pos] = plus[pos] + EPS * v, minus[pos] - EPS * v
    return (np.asarray(g(*plus)) - np.asarray(g(*minus))) / (2 * EPS)


def _spread(n, body):
    """A function of ``n`` positional arguments calling ``body`` with their tuple (so that the
    transform around it sees each argument by its position)."""
    return [lambda a0: body((a0,)), lambda a0, a1: body((a0, a1)), lambda a0, a1, a2: body((a0, a1, a2))][n - 1]


PROGRAMS = HVP_PROGRAMS + [("newton_cubic", newton_cubic, lambda: (np.array([1.3, 0.8]), 1.0), "p")]


@pytest.mark.parametrize("name,fn,make,wrt", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_grad_of_grad_dot_v(name, fn, make, wrt, backend):
    """Reverse over reverse, nested in captured code: the inner gradient program's tapes (loops,
    in-place updates, ``while``, branches) are reversed with adjoint tapes."""
    args = make()
    pos = _position(fn, wrt)
    v = _direction(np.random.default_rng(7), args[pos])
    saved = copy.deepcopy(args)

    outer = _spread(len(args), lambda a: np.sum(flowgrad.grad(fn, wrt=wrt)(*a) * v))
    hv = flowgrad.grad(outer, wrt=pos, backend=backend)(*args)
    assert np.shape(hv) == np.shape(args[pos])
    np.testing.assert_allclose(hv, _hv_differences(fn, args, wrt, v), rtol=1e-5, atol=1e-6)
    for a, b in zip(args, saved):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("name,fn,make,wrt", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_grad_of_jvp_and_jvp_of_grad(name, fn, make, wrt, backend):
    """Reverse over forward (``grad`` of a function calling ``jvp``) and forward over reverse
    (``jvp`` of a function calling ``grad``) both give ``H v``."""
    args = make()
    pos = _position(fn, wrt)
    v = _direction(np.random.default_rng(8), args[pos])
    expected = _hv_differences(fn, args, wrt, v)

    tangents = tuple(v if k == pos else None for k in range(len(args)))
    directional = _spread(len(args), lambda a: flowgrad.jvp(fn, a, tangents, wrt=pos)[1])
    np.testing.assert_allclose(flowgrad.grad(directional, wrt=pos, backend=backend)(*args), expected,
                               rtol=1e-5, atol=1e-6)

    _, hv = flowgrad.jvp(_spread(len(args), lambda a: flowgrad.grad(fn, wrt=wrt)(*a)), tuple(args), tangents,
                         wrt=pos, backend=backend)
    np.testing.assert_allclose(hv, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name,fn,make,wrt", PROGRAMS[:4], ids=[p[0] for p in PROGRAMS[:4]])
def test_jacrev_of_grad_is_the_hessian(name, fn, make, wrt, backend):
    """Reverse over a gradient program at the top level: the rows of ``jacrev(grad(f))`` are
    vector-Hessian products, ``hessian`` computes forward over reverse."""
    args = make()
    H = flowgrad.hessian(fn, wrt=wrt, backend=backend)(*args)
    J = flowgrad.jacrev(flowgrad.grad(fn, wrt=wrt), wrt=wrt, backend=backend)(*args)
    np.testing.assert_allclose(J, H, rtol=1e-9, atol=1e-10)


def test_gradient_through_gradient_descent_steps(backend):
    """An inner gradient in every pass of a loop (unrolled optimisation, as in meta-learning):
    the derivative of the final loss in the starting point and the step size."""
    A = U((4, 4), seed=3)

    def loss(x):
        y = x.copy()
        for i in range(3):
            y[1:] = np.tanh(y[1:] + A[i, 1:] * y[:-1])
        return np.sum(y ** 2) + 0.1 * np.sum(x ** 4)

    def descend(x0, lr):
        x = x0
        for step in range(4):
            x = x - lr * flowgrad.grad(loss)(x)
        return loss(x)

    x0, lr = U(4, seed=5), 0.3
    np.testing.assert_allclose(flowgrad.jit(descend, backend=backend)(x0, lr), _descend_numpy(loss, x0, lr),
                               rtol=1e-12)
    g_x, g_lr = flowgrad.grad(descend, wrt=(0, 1), backend=backend)(x0, lr)
    rng = np.random.default_rng(4)
    d = rng.standard_normal(4)
    fd = (_descend_numpy(loss, x0 + EPS * d, lr) - _descend_numpy(loss, x0 - EPS * d, lr)) / (2 * EPS)
    np.testing.assert_allclose(g_x @ d, fd, rtol=1e-6, atol=1e-8)
    fd = (_descend_numpy(loss, x0, lr + EPS) - _descend_numpy(loss, x0, lr - EPS)) / (2 * EPS)
    np.testing.assert_allclose(g_lr, fd, rtol=1e-6, atol=1e-8)


def _descend_numpy(loss, x0, lr):
    g = flowgrad.grad(loss, backend="numpy")
    x = x0
    for _ in range(4):
        x = x - lr * g(x)
    return loss(x)


def test_vjp_and_its_pullback_inside_captured_code(backend):
    w = U(5, seed=9)

    def f(x, s):
        y = np.sin(x) * s
        for i in range(1, 5):
            y[i] = y[i] * y[i - 1] + x[i]
        return y

    def h(x, s):
        out, pull = flowgrad.vjp(f, x, s)
        gx, gs = pull(w * out)
        return np.sum(gx ** 2) + gs * np.sum(out)

    def h_numpy(x, s):
        out, pull = flowgrad.vjp(f, x, s, backend="numpy")
        gx, gs = pull(w * out)
        return np.sum(gx ** 2) + gs * np.sum(out)

    x, s = U(5, seed=10), 0.7
    np.testing.assert_allclose(flowgrad.jit(h, backend=backend)(x, s), h_numpy(x, s), rtol=1e-12)
    gx, gs = flowgrad.grad(h, wrt=(0, 1), backend=backend)(x, s)
    d = np.random.default_rng(1).standard_normal(5)
    fd = (h_numpy(x + EPS * d, s) - h_numpy(x - EPS * d, s)) / (2 * EPS)
    np.testing.assert_allclose(gx @ d, fd, rtol=1e-6, atol=1e-8)
    fd = (h_numpy(x, s + EPS) - h_numpy(x, s - EPS)) / (2 * EPS)
    np.testing.assert_allclose(gs, fd, rtol=1e-6, atol=1e-8)


def test_value_and_grad_hvp_and_jit_inside_captured_code(backend):
    def f(x):
        return np.sum(np.sin(x) ** 2 * x)

    x, v, w = U(5, seed=1), U(5, seed=2), U(5, seed=3)

    def k(x):
        value, g = flowgrad.value_and_grad(f)(x)
        return value + flowgrad.hvp(f, (x,), (v,)) @ w + flowgrad.jit(f)(2.0 * x) + g @ v

    expected = f(x) + flowgrad.hvp(f, (x,), (v,), backend="numpy") @ w + f(2.0 * x) + \
        flowgrad.grad(f, backend="numpy")(x) @ v
    np.testing.assert_allclose(flowgrad.jit(k, backend=backend)(x), expected, rtol=1e-12)


def test_transforms_made_inside_captured_code_with_wrt_by_name(backend):
    def f(a, x):
        return np.sum(a * np.tanh(x) ** 2)

    def outer(x, a):
        g = flowgrad.grad(f, wrt="x")(a, x)
        return np.sum(g * g)

    x, a = U(4, seed=4), U(4, seed=5)

    def outer_numpy(x, a):
        g = flowgrad.grad(f, wrt="x", backend="numpy")(a, x)
        return np.sum(g * g)
    gx = flowgrad.grad(outer, backend=backend)(x, a)
    d = np.random.default_rng(2).standard_normal(4)
    fd = (outer_numpy(x + EPS * d, a) - outer_numpy(x - EPS * d, a)) / (2 * EPS)
    np.testing.assert_allclose(gx @ d, fd, rtol=1e-6, atol=1e-8)


def test_an_inner_function_writing_a_value_from_outside_it_is_refused():
    def outer(x):
        log = np.zeros(3)

        def f(y):
            log[0] = np.sum(y)          # an array of the enclosing function: a side effect
            return np.sum(y ** 2)
        return np.sum(flowgrad.grad(f)(x)) + log[0]
    with pytest.raises(flowgrad.UnsupportedError, match=r"test_nested_transforms.py:\d+: unsupported grad\(f\) of f, "
                                                        r"which writes here into an array of the code around it.*: transforms take pure functions"):
        flowgrad.grad(outer)(np.ones(3))


def test_nested_wrt_errors_name_the_call():
    def f(x, n):
        return np.sum(x ** n)

    def outer(x):
        return np.sum(flowgrad.grad(f, wrt=1)(x, 2))
    with pytest.raises(flowgrad.InputError, match=r"test_nested_transforms.py:\d+: argument 1 of grad\(f\) has dtype "
                                                  r"int64; only float arguments can be differentiated"):
        flowgrad.grad(outer)(np.ones(3))

    def outer2(x):
        return np.sum(flowgrad.grad(f, wrt="y")(x, 2))
    with pytest.raises(flowgrad.InputError, match=r"wrt name 'y' is not an argument of f \(x, n\)"):
        flowgrad.grad(outer2)(np.ones(3))


@pytest.mark.jax
@pytest.mark.skipif(not have_module("jax"), reason="needs jax")
def test_nesting_against_jax(backend):
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def f(x):
        y = x.copy()
        for i in range(3):
            y = np.tanh(y) * 1.1 + 0.1 * x
        return np.sum(y ** 2)

    def fj(x):
        y = x
        for i in range(3):
            y = jnp.tanh(y) * 1.1 + 0.1 * x
        return jnp.sum(y ** 2)

    x, v = U(5, seed=11), U(5, seed=12)
    got = flowgrad.grad(lambda x: flowgrad.grad(f)(x) @ v, backend=backend)(x)
    np.testing.assert_allclose(got, jax.grad(lambda x: jax.grad(fj)(x) @ v)(x), rtol=1e-11, atol=1e-13)
    # third order: the gradient of a Hessian-vector product's norm
    got = flowgrad.grad(lambda x: np.sum(flowgrad.hvp(f, (x,), (v,)) ** 2), backend=backend)(x)
    ref = jax.grad(lambda x: jnp.sum(jax.jvp(jax.grad(fj), (x,), (v,))[1] ** 2))(x)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-12)


def test_pytree_arguments_of_nested_transforms(backend):
    """A nested grad of a dict of parameters returns a dict; a nested jvp takes a tuple primal and a
    tangent of its structure; a vjp pullback gives a pytree argument's gradient in its structure."""
    rng = np.random.default_rng(6)
    W, b, x = rng.normal(size=(3, 4)), rng.normal(size=3), rng.normal(size=4)

    def loss(params, x):
        return np.sum(np.tanh(params["W"] @ x + params["b"]) ** 2)

    def outer(W, b, x):
        g = flowgrad.grad(loss)({"W": W, "b": b}, x)
        return np.sum(g["W"] ** 2) + np.sum(g["b"] * b)

    def outer_numpy(W, b, x):
        g = flowgrad.grad(loss, backend="numpy")({"W": W, "b": b}, x)
        return np.sum(g["W"] ** 2) + np.sum(g["b"] * b)

    def directional(W, b, x):
        out, t = flowgrad.jvp(lambda p: loss({"W": p[0], "b": p[1]}, x), ((W, b),), ((np.ones((3, 4)), b),))
        _, pull = flowgrad.vjp(lambda p: np.tanh(p[0] @ x) * p[1], (W, b))
        (g,) = pull(b)
        return t * out + np.sum(g[0] * W) + np.sum(g[1])

    def directional_numpy(W, b, x):
        out, t = flowgrad.jvp(lambda p: loss({"W": p[0], "b": p[1]}, x), ((W, b),), ((np.ones((3, 4)), b),),
                              backend="numpy")
        _, pull = flowgrad.vjp(lambda p: np.tanh(p[0] @ x) * p[1], (W, b), backend="numpy")
        (g,) = pull(b)
        return t * out + np.sum(g[0] * W) + np.sum(g[1])

    d = rng.normal(size=3)
    for fn, ref in ((outer, outer_numpy), (directional, directional_numpy)):
        np.testing.assert_allclose(flowgrad.jit(fn, backend=backend)(W, b, x), ref(W, b, x), rtol=1e-12)
        gb = flowgrad.grad(fn, wrt=1, backend=backend)(W, b, x)
        fd = (ref(W, b + EPS * d, x) - ref(W, b - EPS * d, x)) / (2 * EPS)
        np.testing.assert_allclose(gb @ d, fd, rtol=1e-6, atol=1e-8)


FORTRAN_ENERGY = """
subroutine energy(n, x, e)
  integer, intent(in) :: n
  double precision, intent(in) :: x(n)
  double precision, intent(out) :: e
  double precision :: y(n)
  integer :: i, it
  y = x
  do it = 1, 3
    do i = 2, n
      y(i) = y(i) + 0.3d0 * sin(y(i - 1))
    end do
  end do
  e = sum(y ** 2)
end subroutine
"""


@pytest.mark.skipif(not have_module("fparser"), reason="needs fparser (the Fortran front door)")
def test_grad_of_grad_of_a_fortran_subroutine(backend):
    """The Fortran front door nests too: the subroutine's gradient program (a loop that overwrites
    its array) is reversed again, in a Python function calling flowgrad.grad of the program."""
    prog = flowgrad.from_fortran(FORTRAN_ENERGY, "energy")
    x = np.linspace(-1.0, 1.0, 6)
    v = np.random.default_rng(9).standard_normal(6)
    hv = flowgrad.grad(lambda x: flowgrad.grad(prog, wrt="x")(6, x) @ v, backend=backend)(x)
    g = flowgrad.grad(lambda x: prog(6, x), backend="numpy")
    fd = (g(x + EPS * v) - g(x - EPS * v)) / (2 * EPS)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(hv, flowgrad.hvp(lambda x: prog(6, x), (x,), (v,), backend=backend), rtol=1e-12)


@pytest.mark.ml
@pytest.mark.skipif(not have_module("torch"), reason="needs torch")
def test_a_pytorch_model_inside_captured_code_nests(backend):
    """A from_torch program called inside a Python function: its IR stands where the call stands,
    so the function's gradient, and the gradient of that gradient, go through the model (torch's
    double backward is the oracle)."""
    import torch
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3)).double()
    x = np.random.default_rng(0).normal(size=(5, 4))
    v = np.random.default_rng(1).normal(size=(5, 4))
    prog = flowgrad.from_torch(model, x)

    def loss(x):
        return np.sum(np.sin(prog(x)) ** 2)
    xt = torch.tensor(x, requires_grad=True)
    (gt,) = torch.autograd.grad(torch.sum(torch.sin(model(xt)) ** 2), xt, create_graph=True)
    (hvt,) = torch.autograd.grad(torch.sum(gt * torch.tensor(v)), xt)
    np.testing.assert_allclose(flowgrad.grad(loss, backend=backend)(x), gt.detach().numpy(), rtol=1e-12, atol=1e-14)
    hv = flowgrad.grad(lambda x: np.sum(flowgrad.grad(loss)(x) * v), backend=backend)(x)
    np.testing.assert_allclose(hv, hvt.numpy(), rtol=1e-10, atol=1e-13)


def test_grad_of_grad_through_a_view_of_a_size_known_only_at_run_time(backend):
    """The inner gradient program keeps ``x[:k + 1]`` on a tape; its adjoint tape's entries have that
    run-time size (native tapes store the size with such an entry)."""
    def f(x, k):
        x[:k + 1] = np.sin(x[:k + 1])
        return np.sum(np.sin(x) * np.arange(1.0, 9.0))

    x = U(8, seed=21)
    d = np.random.default_rng(22).standard_normal(8)
    hv = flowgrad.grad(lambda x, k: np.sum(flowgrad.grad(f)(x, k) * d), backend=backend)(x, 3)
    g = flowgrad.grad(f, backend="numpy")
    fd = (g(x + EPS * d, 3) - g(x - EPS * d, 3)) / (2 * EPS)
    np.testing.assert_allclose(hv, fd, rtol=1e-6, atol=1e-8)
