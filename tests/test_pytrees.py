"""Pytree arguments and results, with JAX's conventions (``flowgrad.pytree``).

Arguments that are (nested) tuples, lists, dicts, NamedTuples or dataclasses of arrays and
numbers; ``wrt`` naming one gives a gradient of its structure (as ``jax.grad`` with
``argnums``); ``vjp`` of functions returning tuples, lists and dicts; the structure, leaf
shapes and dtypes are part of the cache signature, float leaves are run-time values.
"""
import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import flowgrad
from conftest import have_module
from tree_oracle import check_tree_forward, check_tree_grad, check_tree_vjp

RNG = np.random.default_rng(0)


def make_params(sizes=(3, 4, 2), seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((m, n)) / np.sqrt(m), rng.standard_normal(n) * 0.1)
            for m, n in zip(sizes[:-1], sizes[1:])]


def mlp_loss(params, x, y):
    h = x
    for W, b in params:
        h = np.tanh(h @ W + b)
    return np.mean((h - y) ** 2)


X = RNG.standard_normal((6, 3))
Y = RNG.standard_normal((6, 2))


def heat(u, p):
    for t in range(p["steps"]):
        u = u + p["kappa"] * (np.roll(u, 1) - 2.0 * u + np.roll(u, -1)) - p["decay"] * u
    return np.sum(u * u)


class Point(NamedTuple):
    x: np.ndarray
    scale: float


def namedtuple_fn(pt, w):
    return np.sum(np.sin(pt.x * pt.scale) * w)


@dataclasses.dataclass
class Params:
    W: np.ndarray
    b: np.ndarray
    alpha: float
    name: str = "layer"


def dataclass_fn(p, x):
    return np.sum(np.tanh(x @ p.W + p.b) ** 2) * p.alpha


def nested_fn(tree):
    a = tree["a"]
    total = np.sum(a["w"] * a["v"][0]) + a["v"][1] * tree["c"]
    for item in tree["items"]:
        total = total + np.sum(item ** 3)
    return total


NESTED = {"a": {"w": RNG.standard_normal(3), "v": (RNG.standard_normal(3), 0.5)}, "c": -1.5,
          "items": [RNG.standard_normal(2), RNG.standard_normal((2, 2))]}


def test_mlp_params_list_of_tuples(backend):
    value, g = check_tree_grad(mlp_loss, (make_params(), X, Y), wrt="params", backend=backend)
    assert isinstance(g, list) and all(isinstance(t, tuple) and len(t) == 2 for t in g)


def test_dict_of_settings_with_an_integer_leaf(backend):
    p = {"kappa": 0.2, "steps": 5, "decay": 0.01}
    _, g = check_tree_grad(heat, (RNG.standard_normal(8), p), wrt=("u", "p"), backend=backend)
    assert list(g[1]) == ["kappa", "steps", "decay"] and g[1]["steps"] == 0 and type(g[1]["steps"]) is int


def test_namedtuple_argument(backend):
    _, g = check_tree_grad(namedtuple_fn, (Point(RNG.standard_normal(4), 1.5), RNG.standard_normal(4)),
                           wrt=(0, 1), backend=backend)
    assert isinstance(g[0], Point)


def test_dataclass_argument(backend):
    p = Params(RNG.standard_normal((3, 2)), RNG.standard_normal(2), 0.7)
    _, g = check_tree_grad(dataclass_fn, (p, X), wrt="p", backend=backend)
    assert isinstance(g, Params) and g.name == "layer" and g is not p


def test_nested_dicts_lists_tuples(backend):
    check_tree_grad(nested_fn, (NESTED,), wrt=0, backend=backend)
    check_tree_forward(nested_fn, (NESTED,), backend=backend)


def test_tree_not_in_wrt_is_run_time(backend):
    # a pytree argument that is not differentiated still has run-time leaves
    def f(x, p):
        return np.sum(x * p[0]) + p[1]
    g = flowgrad.value_and_grad(f, wrt="x", backend=backend)
    v1, g1 = g(np.ones(3), (2.0, 1.0))
    v2, g2 = g(np.ones(3), (3.0, -1.0))
    assert (v1, v2) == (7.0, 8.0) and np.all(g1 == 2.0) and np.all(g2 == 3.0)
    assert len(g.cache) == 1


def test_float_leaves_do_not_recompile_but_structure_does(backend):
    g = flowgrad.grad(heat, wrt="p", backend=backend)
    u = RNG.standard_normal(8)
    g(u, {"kappa": 0.2, "steps": 3, "decay": 0.0})
    g(u, {"kappa": 0.3, "steps": 7, "decay": 0.1})          # new floats and int: same program
    assert len(g.cache) == 1
    g(u, {"kappa": 0.3, "steps": 7, "decay": 0.1, "extra": 1.0})   # a new key: captured again
    assert len(g.cache) == 2
    m = flowgrad.grad(mlp_loss, wrt="params", backend=backend)
    m(make_params(), X, Y)
    m(make_params(seed=1), X, Y)
    assert len(m.cache) == 1
    m(make_params((3, 5, 2)), X, Y)                             # a leaf of another shape
    m(make_params((3, 4, 4, 2)), X, Y)                          # one more layer
    assert len(m.cache) == 3


def test_static_leaf_is_part_of_the_signature(backend):
    def f(x, cfg):
        return np.sum(x * x) if cfg["kind"] == "square" else np.sum(x)
    g = flowgrad.grad(f, backend=backend)
    assert np.allclose(g(np.ones(3), {"kind": "square"}), 2.0)
    assert np.allclose(g(np.ones(3), {"kind": "sum"}), 1.0)


def tuple_result(x, y):
    return x * y, np.sum(x), {"p": y[0] * 2.0, "q": [x[1:], y]}


def test_vjp_of_a_tuple_result(backend):
    out, _ = check_tree_vjp(tuple_result, (RNG.standard_normal(3), RNG.standard_normal(3)), wrt=(0, 1),
                            backend=backend)
    assert isinstance(out, tuple) and isinstance(out[2], dict) and isinstance(out[2]["q"], list)
    check_tree_forward(tuple_result, (RNG.standard_normal(3), RNG.standard_normal(3)), backend=backend)


def test_vjp_with_pytree_arguments_and_result(backend):
    def f(params, x):
        (W1, b1), (W2, b2) = params
        h = np.tanh(x @ W1 + b1)
        return {"hidden": h, "out": h @ W2 + b2}
    check_tree_vjp(f, (make_params(), X), wrt="params", backend=backend)
    out, pull = flowgrad.vjp(f, make_params(), X, backend=backend)       # default: every float argument
    grads = pull({"hidden": np.ones((6, 4)), "out": np.ones((6, 2))})
    assert len(grads) == 2 and isinstance(grads[0], list) and grads[1].shape == X.shape


def test_vjp_cotangent_of_the_wrong_structure(backend):
    out, pull = flowgrad.vjp(tuple_result, np.ones(3), np.ones(3), backend=backend)
    with pytest.raises(flowgrad.InputError, match="cotangent"):
        pull((np.ones(3), 1.0))
    with pytest.raises(flowgrad.InputError, match="cotangent"):
        pull((np.ones(3), 1.0, {"p": 1.0, "r": [np.ones(2), np.ones(3)]}))


def test_jit_result_with_integer_leaves_and_run_time_sizes():
    def f(x, n):
        return x[:n] * 2.0, n + 1, (np.sum(x[n:]), x.shape[0])
    x = RNG.standard_normal(6)
    for n in (0, 2, 6):
        out = check_tree_forward(f, (x, n), backend="numpy")
        assert type(out[1]) in (int, np.int64) and out[2][1] == 6


@pytest.mark.native
def test_jit_result_with_integer_leaves_native():
    def f(x, n):
        return x * 2.0, n + 1, (np.sum(x[n:]), np.max(x))
    check_tree_forward(f, (RNG.standard_normal(6), 2), backend="native")


def test_grad_of_a_tuple_result_is_an_input_error(backend):
    with pytest.raises(flowgrad.InputError, match="requires a float scalar result.*tuple"):
        flowgrad.grad(tuple_result, backend=backend)(np.ones(3), np.ones(3))


def test_float_leaf_gradients_are_floats(backend):
    def f(p):
        return p["a"] * p["a"] + 3.0 * p["b"][0]
    g = flowgrad.grad(f, backend=backend)({"a": 2.0, "b": [1.5]})
    assert g == {"a": 4.0, "b": [3.0]} and type(g["a"]) is float


# ----------------------------------------------------------------------------- wrt errors


def plain(x, n, s):
    return np.sum(x) * n


@pytest.mark.parametrize("args, wrt, message", [
    ((np.ones(3, dtype=np.int64), 2, "a"), "x", r"wrt argument 'x' is an integer or boolean array \(dtype int64"),
    ((np.ones(3), 2, "a"), "n", r"wrt argument 'n' is an integer \(2\).*pass 2\.0"),
    ((np.ones(3), 2, "a"), "s", r"wrt argument 's' is a str; expected a float array, a float, or a tuple"),
    ((np.ones(3), 2, ("a", 3)), "s", r"wrt argument 's' is a tuple holding no float arrays or floats"),
    ((np.ones(3), 2, None), 2, r"wrt argument 's' is a NoneType"),
])
def test_wrt_of_the_wrong_kind_names_the_argument(args, wrt, message, backend):
    with pytest.raises(flowgrad.InputError, match=message):
        flowgrad.grad(plain, wrt=wrt, backend=backend)(*args)


def test_reverse_mode_over_grad():
    def f(x):
        return x * x * x
    # a gradient program without tapes is a program like any other: grad of grad is the second derivative
    assert flowgrad.grad(flowgrad.grad(f, backend="numpy"), backend="numpy")(1.3) == pytest.approx(7.8, rel=1e-14)

    def looped(x):
        y = x
        for i in range(3):
            y = np.sin(y) * x
        return y

    def d2(x, h=1e-4):
        return (flowgrad.grad(looped, backend="numpy")(x + h) - flowgrad.grad(looped, backend="numpy")(x - h)) / (2 * h)
    # one whose backward sweep pops values off a tape: the adjoint of a pop pushes onto an adjoint tape
    assert flowgrad.grad(flowgrad.grad(looped, backend="numpy"), backend="numpy")(1.0) == pytest.approx(d2(1.0), rel=1e-7)
    value, pull = flowgrad.vjp(flowgrad.grad(looped, backend="numpy"), 1.0, backend="numpy")
    assert pull(2.0)[0] == pytest.approx(2.0 * d2(1.0), rel=1e-7)
    # jit(f) is f to the other transforms
    assert flowgrad.jvp(flowgrad.jit(f), (1.0,), (1.0,))[1] == pytest.approx(3.0)
    with pytest.raises(flowgrad.UnsupportedError, match="a transform takes a function, grad.f. or jit.f."):
        flowgrad.grad(flowgrad.value_and_grad(f))(1.0)

    g = flowgrad.grad(f)

    def calls_a_transform(x):
        return g(x) * 2.0
    # a transform called inside captured code is lowered there
    assert flowgrad.grad(calls_a_transform, backend="numpy")(1.0) == pytest.approx(12.0, rel=1e-14)

    def calls_jacfwd(x):
        return flowgrad.jacfwd(f)(x) * 2.0
    with pytest.raises(flowgrad.UnsupportedError, match=r"test_pytrees.py:\d+: unsupported flowgrad.jacfwd\(\) "
                                                        r"inside a function flowgrad captures: of flowgrad's"):
        flowgrad.grad(calls_jacfwd)(1.0)


# ----------------------------------------------------------------------------- JAX


@pytest.mark.jax
@pytest.mark.skipif(not have_module("jax"), reason="needs jax")
def test_against_jax_grad_with_pytrees():
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)

    def jax_mlp(params, x, y):
        h = x
        for W, b in params:
            h = jnp.tanh(h @ W + b)
        return jnp.mean((h - y) ** 2)
    params = make_params()
    ours = flowgrad.grad(mlp_loss, wrt="params", backend="numpy")(params, X, Y)
    theirs = jax.grad(jax_mlp)(params, X, Y)
    assert jax.tree_util.tree_structure(ours) == jax.tree_util.tree_structure(theirs)
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs)):
        np.testing.assert_allclose(a, np.asarray(b), rtol=1e-10, atol=1e-12)

    def jax_heat(u, p):
        for t in range(p["steps"]):
            u = u + p["kappa"] * (jnp.roll(u, 1) - 2.0 * u + jnp.roll(u, -1)) - p["decay"] * u
        return jnp.sum(u * u)
    u = RNG.standard_normal(8)
    p = {"kappa": 0.2, "steps": 4, "decay": 0.05}
    ours = flowgrad.grad(heat, wrt="p", backend="numpy")(u, p)
    theirs = jax.grad(lambda q: jax_heat(u, dict(q, steps=4)))({"kappa": 0.2, "decay": 0.05})
    for k in ("kappa", "decay"):
        np.testing.assert_allclose(ours[k], float(theirs[k]), rtol=1e-10)

    def jax_nt(pt, w):
        return jnp.sum(jnp.sin(pt.x * pt.scale) * w)
    pt, w = Point(RNG.standard_normal(4), 1.5), RNG.standard_normal(4)
    ours = flowgrad.grad(namedtuple_fn, backend="numpy")(pt, w)
    theirs = jax.grad(jax_nt)(pt, w)
    assert isinstance(theirs, Point) and isinstance(ours, Point)
    np.testing.assert_allclose(ours.x, np.asarray(theirs.x), rtol=1e-10)
    np.testing.assert_allclose(ours.scale, float(theirs.scale), rtol=1e-10)


def test_result_known_at_capture(backend):
    def f(x):
        return {"n": x.shape[0], "tag": "sum", "pair": (1.5, None)}
    assert flowgrad.jit(f, backend=backend)(np.ones(3)) == {"n": 3, "tag": "sum", "pair": (1.5, None)}

    def g(x):
        return np.sum(x * x), "tag"
    out, pull = flowgrad.vjp(g, np.arange(3.0), backend=backend)
    assert out[1] == "tag" and np.allclose(pull((2.0, None))[0], 4.0 * np.arange(3.0))
