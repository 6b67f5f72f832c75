"""User objects in captured code: attribute reads, bound methods, properties, objects built
in the function, and what a capture read from an object (a changed attribute captures again).
"""
import collections
import dataclasses

import numpy as np
import pytest

import flowgrad
from oracle import check_forward, check_grad
from tree_oracle import check_tree_forward, check_tree_grad


class Simulation:
    """A plain class whose ``step`` is called in a time loop."""

    def __init__(self, dt, kappa, source):
        self.dt = dt
        self.kappa = kappa
        self.source = source

    def laplacian(self, u):
        return np.roll(u, 1) - 2.0 * u + np.roll(u, -1)

    def step(self, u):
        return u + self.dt * (self.kappa * self.laplacian(u) + self.source)

    @property
    def rate(self):
        return self.kappa / self.dt

    def run(self, u, steps):
        for t in range(steps):
            u = self.step(u)
        return u


SIM = Simulation(0.1, 0.5, np.linspace(0.0, 1.0, 8))


def simulate(u, steps):
    for t in range(steps):
        u = SIM.step(u)
    return np.sum(u * u) * SIM.rate


def simulate_with(sim, u, steps):
    u = sim.run(u, steps)
    return np.sum(np.sin(u))


def u0():
    return np.random.default_rng(0).standard_normal(8)


def test_method_called_in_a_time_loop(backend):
    check_forward(simulate, (u0(), 5), backend=backend)
    check_grad(simulate, (u0(), 5), wrt="u", backend=backend)


def test_object_argument_is_folded(backend):
    sim = Simulation(0.05, 0.3, np.zeros(8))
    check_tree_forward(simulate_with, (sim, u0(), 4), backend=backend)
    check_tree_grad(simulate_with, (sim, u0(), 4), wrt="u", backend=backend)


def test_changed_attribute_captures_again(backend):
    sim = Simulation(0.1, 0.5, np.zeros(8))
    f = flowgrad.jit(simulate_with, backend=backend)
    u = u0()
    first = f(sim, u, 3)
    sim.kappa = 0.2                      # an attribute rebound between calls
    assert np.isclose(f(sim, u, 3), simulate_with(sim, u.copy(), 3))
    assert not np.isclose(first, f(sim, u, 3))
    sim.source = np.ones(8)              # an array attribute replaced
    assert np.isclose(f(sim, u, 3), simulate_with(sim, u.copy(), 3))
    sim.source[:] = 2.0                  # an array attribute changed in place: read at run time
    assert np.isclose(f(sim, u, 3), simulate_with(sim, u.copy(), 3))
    Simulation.laplacian = lambda self, u: np.roll(u, 1) - u     # a method redefined
    try:
        assert np.isclose(f(sim, u, 3), simulate_with(sim, u.copy(), 3))
    finally:
        del Simulation.laplacian
        Simulation.laplacian = _laplacian


_laplacian = Simulation.laplacian


def test_same_float_value_does_not_capture_again():
    sim = Simulation(0.1, 0.5, np.zeros(8))
    f = flowgrad.jit(simulate_with, backend="numpy")
    f(sim, u0(), 2)
    entry = next(iter(f.cache.values()))
    sim.kappa = float("0.5")             # another float object, the same value
    f(sim, u0(), 2)
    assert next(iter(f.cache.values())) is entry


CONFIG = {"gain": 2.0, "offsets": [0.5, 1.5]}


def uses_a_global_dict(x):
    return np.sum(x * CONFIG["gain"]) + CONFIG["offsets"][1]


def test_global_dict_and_list_changed_in_place(backend):
    f = flowgrad.jit(uses_a_global_dict, backend=backend)
    x = np.arange(3.0)
    assert f(x) == uses_a_global_dict(x)
    CONFIG["gain"] = 3.0
    CONFIG["offsets"][1] = -1.0
    try:
        assert f(x) == uses_a_global_dict(x)
    finally:
        CONFIG["gain"], CONFIG["offsets"][1] = 2.0, 1.5


class Constants:
    rtt = 0.25                           # a class attribute


class Derived(Constants):
    pass


def uses_class_constants(x):
    return np.sum(x) * Derived.rtt + Constants().rtt


def test_class_attributes(backend):
    f = flowgrad.jit(uses_class_constants, backend=backend)
    assert f(np.ones(3)) == uses_class_constants(np.ones(3))
    Constants.rtt = 0.5
    try:
        assert f(np.ones(3)) == uses_class_constants(np.ones(3))
    finally:
        Constants.rtt = 0.25


@dataclasses.dataclass
class Model:
    W: np.ndarray
    b: np.ndarray
    scale: float

    def predict(self, x):
        return np.tanh(x @ self.W + self.b) * self.scale

    @staticmethod
    def loss(pred, y):
        return np.mean((pred - y) ** 2)

    @classmethod
    def zeros_like(cls, other):
        return cls(np.zeros_like(other.W), np.zeros_like(other.b), 0.0)


def model_loss(model, x, y):
    return Model.loss(model.predict(x), y)


RNG = np.random.default_rng(3)
X, Y = RNG.standard_normal((5, 3)), RNG.standard_normal((5, 2))


def make_model():
    return Model(RNG.standard_normal((3, 2)), RNG.standard_normal(2), 1.5)


def test_dataclass_in_wrt_gets_a_dataclass_gradient(backend):
    _, g = check_tree_grad(model_loss, (make_model(), X, Y), wrt="model", backend=backend)
    assert type(g) is Model


def test_plain_object_in_wrt(backend):
    sim = Simulation(0.1, 0.5, np.linspace(0.0, 1.0, 8))
    _, g = check_tree_grad(simulate_with, (sim, u0(), 3), wrt="sim", backend=backend)
    assert type(g) is Simulation and g is not sim and set(vars(g)) == {"dt", "kappa", "source"}


def test_objects_built_in_the_function(backend):
    def f(x, y):
        m = Model(np.ones((3, 2)) * x[0], np.zeros(2), 2.0)
        zero = Model.zeros_like(m)
        m2 = dataclasses.replace(m, scale=m.scale + x[1])
        return Model.loss(m2.predict(x[None, :]), y) + zero.scale
    check_forward(f, (RNG.standard_normal(3), RNG.standard_normal((1, 2))), backend=backend)
    check_grad(f, (RNG.standard_normal(3), RNG.standard_normal((1, 2))), wrt=0, backend=backend)


class Accumulator:
    def __init__(self, x):
        self.total = x * 0.0
        self.count = 0

    def add(self, v):
        self.total = self.total + v
        self.count += 1


def builds_and_mutates_its_own_object(x):
    acc = Accumulator(x)
    for k in range(3):
        acc.add(x * k)
    return np.sum(acc.total) / acc.count


def test_methods_may_change_objects_the_function_built(backend):
    check_forward(builds_and_mutates_its_own_object, (np.arange(3.0),), backend=backend)
    check_grad(builds_and_mutates_its_own_object, (np.arange(3.0),), wrt=0, backend=backend)


def test_returning_a_dataclass(backend):
    def f(model, x):
        return Model(model.W * x, model.b + 1.0, model.scale * 2.0)
    out = check_tree_forward(f, (make_model(), 0.5), backend=backend)
    assert type(out) is Model


# ----------------------------------------------------------------------------- refusals


class Stateful:
    def __init__(self):
        self.t = 0.0
        self.u = np.zeros(3)

    def advance(self, dt):
        self.t += dt
        return self.t

    def store(self, u):
        self.u = u


STATEFUL = Stateful()


def calls_a_mutating_method(x):
    return STATEFUL.advance(0.1) * np.sum(x)


def calls_a_storing_method(x):
    STATEFUL.store(x * 2.0)
    return np.sum(x)


def mutates_an_argument(state, x):
    state.scale = 2.0
    return np.sum(x)


def writes_an_attribute_array(x):
    STATEFUL.u[0] = 3.0
    return np.sum(x)


def uses_a_deque(x):
    q = collections.deque()
    q.append(x)
    return np.sum(x)


def calls_a_builtin_method(x, buf):
    buf.extend([1.0])
    return np.sum(x)


@pytest.mark.parametrize("fn, args, pattern", [
    (calls_a_mutating_method, (np.ones(3),), r"test_objects.py:\d+: unsupported assignment to attribute self.t of a "
                                             r"Stateful object from outside the captured function: .*return the new"),
    (calls_a_storing_method, (np.ones(3),), r"test_objects.py:\d+: unsupported assignment to attribute self.u"),
    (mutates_an_argument, (make_model(), np.ones(3)), r"unsupported assignment to attribute state.scale of a "
                                                      r"Model argument"),
    (writes_an_attribute_array, (np.ones(3),), r"test_objects.py:\d+: unsupported assignment into STATEFUL.u, an "
                                               r"array from outside the captured function.*copy it first"),
    (uses_a_deque, (np.ones(3),), r"test_objects.py:\d+: unsupported .*deque"),
    (calls_a_builtin_method, (np.ones(3), [0.0]), r"test_objects.py:\d+: unsupported buf.extend\(\) on a list from "
                                                  r"outside the captured function"),
])
def test_refused_with_file_line_and_fix(fn, args, pattern, backend):
    with pytest.raises(flowgrad.UnsupportedError, match=pattern):
        flowgrad.jit(fn, backend=backend)(*args)


def test_c_extension_method_is_refused(backend):
    gen = np.random.default_rng(0)

    def f(x):
        return np.sum(x * gen.standard_normal(3))
    with pytest.raises(flowgrad.UnsupportedError, match=r"test_objects.py:\d+: unsupported"):
        flowgrad.jit(f, backend=backend)(np.ones(3))

    class Slotted:
        __slots__ = ("a",)

        def __init__(self):
            self.a = 2.0
    s = Slotted()

    def g(x):
        return np.sum(x) * s.a
    h = flowgrad.jit(g, backend=backend)
    assert h(np.ones(3)) == 6.0
    s.a = 3.0
    assert h(np.ones(3)) == 9.0
