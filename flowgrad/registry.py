"""The op registry: every Call op family, declared once and composed here.

Each family declares its ops in its own module, in two tables it owns and nobody else writes:
its rules (``CallRule``: NumPy source, cost, adjoint, tangent, flags) and its native lowerings.
``FAMILIES`` lists them; the registry composes them, in this order, into the two tables the
rest of flowgrad reads, ``autodiff.rules.CALLS`` and ``backends.native_calls.CALL_LOWERING``,
and derives ``ir.core.INPLACE_CALLS`` from the rules. No family module patches another: adding
a family is one entry here. ``autodiff.rules.coverage`` reports the composed tables.
"""
from __future__ import annotations

from . import fft_ops, implicit, linalg_ops, nn_ops
from .autodiff import rules
from .backends import native_calls
from .ir.core import INPLACE_CALLS

# name -> (rules, native lowerings)
FAMILIES = {
    "core": (rules.CORE_CALLS, native_calls.CORE_LOWERING),
    "nn": (nn_ops.NN_CALLS, nn_ops.NN_LOWERING),
    "linalg": (linalg_ops.LINALG_CALLS, linalg_ops.LINALG_LOWERING),
    "fft": (fft_ops.FFT_CALLS, fft_ops.FFT_LOWERING),
    "implicit": (implicit.IMPLICIT_CALLS, implicit.IMPLICIT_LOWERING),
}


def _compose():
    seen = {}
    for family, (calls, lowering) in FAMILIES.items():
        for name in calls:
            if name in seen:
                raise RuntimeError(f"op {name!r} is declared by both the {seen[name]} and the {family} family")
            seen[name] = family
        rules.CALLS.update(calls)
        native_calls.CALL_LOWERING.update(lowering)
    INPLACE_CALLS.update(name for name, rule in rules.CALLS.items() if rule.inplace)
    return seen


FAMILY_OF = _compose()          # op name -> the family declaring it

__all__ = ["FAMILIES", "FAMILY_OF"]
