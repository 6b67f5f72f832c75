"""The oracles themselves: they pass a correct answer and catch wrong ones.

A checker that cannot fail proves nothing, so each kind of mistake an engine could make
is fed to the oracle here through hand-written stand-ins for flowgrad's functions.
"""

import numpy as np
import pytest

import flowgrad
import oracle
from oracle import check_forward, check_grad, check_vjp


def quadratic(A, x, c):
    return np.sum((A @ x) ** 2) + c * np.sum(x ** 3)


def quadratic_grads(A, x, c):
    r = A @ x
    return 2.0 * np.outer(r, x), 2.0 * A.T @ r + 3.0 * c * x ** 2, float(np.sum(x ** 3))


def inputs():
    rng = np.random.default_rng(0)
    return rng.uniform(-1, 1, (3, 4)), rng.uniform(-1, 1, 4), 0.7


def analytic_vg(tamper=None):
    """A value_and_grad stand-in for quadratic with wrt=("A", "x", "c"), optionally broken."""

    def vg(A, x, c):
        value, grads = quadratic(A, x, c), list(quadratic_grads(A, x, c))
        if tamper is not None:
            value, grads = tamper(A, x, c, value, grads)
        return value, tuple(grads)

    return vg


WRT = ("A", "x", "c")


def test_correct_gradient_passes():
    value, grads = check_grad(quadratic, inputs(), WRT, vg=analytic_vg())
    assert len(grads) == 3


def _nudge_one_entry(A, x, c, value, grads):
    grads[1] = grads[1].copy()
    grads[1][2] *= 1.0 + 1e-4
    return value, grads


def _wrong_value(A, x, c, value, grads):
    return value * (1.0 + 1e-9), grads


def _mutate_caller(A, x, c, value, grads):
    x[0] += 1e-3
    return value, grads


def _wrong_shape(A, x, c, value, grads):
    grads[0] = grads[0].T.copy()
    return value, grads


def _float32_gradient(A, x, c, value, grads):
    grads[0] = grads[0].astype(np.float32)
    return value, grads


@pytest.mark.parametrize(
    "tamper, message",
    [
        (_nudge_one_entry, r"argument 'x'.*MISMATCH"),
        (_wrong_value, r"value"),
        (_mutate_caller, r"caller's argument 'x'"),
        (_wrong_shape, r"shape"),
        (_float32_gradient, r"dtype"),
    ],
    ids=["wrong-gradient", "wrong-value", "mutates-caller", "wrong-shape", "wrong-dtype"],
)
def test_check_grad_catches(tamper, message):
    with pytest.raises(AssertionError, match=message):
        check_grad(quadratic, inputs(), WRT, vg=analytic_vg(tamper))


def test_check_grad_wants_one_gradient_for_one_wrt():
    def vg_tuple(A, x, c):
        return quadratic(A, x, c), (quadratic_grads(A, x, c)[1],)

    with pytest.raises(AssertionError, match="one gradient"):
        check_grad(quadratic, inputs(), "x", vg=vg_tuple)


def test_finite_differences_see_a_small_uniform_error():
    # An error of 1e-5 per entry, far below the gradient's size, must still fail.
    def tamper(A, x, c, value, grads):
        grads[0] = grads[0] + 1e-5
        return value, grads

    with pytest.raises(AssertionError, match="argument 'A'"):
        check_grad(quadratic, inputs(), WRT, vg=analytic_vg(tamper))


def matvec(A, x):
    return A @ x


def test_check_vjp_catches_a_wrong_pullback(monkeypatch):
    def fake_vjp(fn, A, x, wrt=None, backend="numpy"):
        out = fn(A, x)
        return out, lambda cot: (np.outer(cot, x), A.T @ cot * 1.001)

    monkeypatch.setattr(flowgrad, "vjp", fake_vjp, raising=False)
    A, x = inputs()[:2]
    with pytest.raises(AssertionError, match="argument 'x'"):
        check_vjp(matvec, (A, x), None)


def test_check_vjp_passes_a_correct_pullback(monkeypatch):
    def fake_vjp(fn, A, x, wrt=None, backend="numpy"):
        return fn(A, x), lambda cot: (np.outer(cot, x), A.T @ cot)

    monkeypatch.setattr(flowgrad, "vjp", fake_vjp, raising=False)
    check_vjp(matvec, inputs()[:2], None)


def test_check_forward_catches_a_wrong_forward(monkeypatch):
    monkeypatch.setattr(flowgrad, "jit", lambda fn, backend="numpy": lambda A, x: fn(A, x) + 1e-9, raising=False)
    with pytest.raises(AssertionError, match="differs from plain NumPy"):
        check_forward(matvec, inputs()[:2])


def test_check_forward_catches_a_wrong_dtype(monkeypatch):
    monkeypatch.setattr(
        flowgrad, "jit", lambda fn, backend="numpy": lambda A, x: fn(A, x).astype(np.float32), raising=False
    )
    with pytest.raises(AssertionError, match="dtype"):
        check_forward(matvec, inputs()[:2])


def test_resolve_wrt():
    args = inputs()
    assert oracle.resolve_wrt(quadratic, args, "x") == ((1,), True)
    assert oracle.resolve_wrt(quadratic, args, ("c", 0)) == ((2, 0), False)
    with pytest.raises(ValueError):
        oracle.resolve_wrt(quadratic, args, "nope")
