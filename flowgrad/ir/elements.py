"""The elementwise primitives, each declared once.

An entry says what the primitive is (its arity, and how its result's dtype follows its operands':
``kind``), how the backends write it, what it costs, and how it differentiates: its partial
derivatives, from which both its tangent (``autodiff.forward``) and its adjoint
(``autodiff.reverse``) follow. The tables the layers read are views of ``ELEMENTS``:
``ir.core.ELEMENTWISE`` and ``CHEAP_OPS``; ``autodiff.rules.PARTIALS``, ``ZERO_DERIVATIVE``,
``NO_PARTIALS`` and ``ELEMENTWISE_FLOPS``; the output partials, kept outputs and finite partials of
``autodiff.reverse``; the operators and functions of the printer and of both backends. A new
elementwise primitive is one entry here (and a lowering in a backend only where it needs more than
an operator or a function call). The non-elementwise ops (``Call``) are declared by their families,
composed in ``flowgrad.registry``.

Kinds: ``same`` numeric promotion, ``float`` promotes integers to float64, ``bool`` comparison or
logic, ``cast`` takes its dtype from its name, ``where`` its branches' promotion; ``real`` and
``real_float`` are ``same`` and ``float`` with a complex operand's real dtype (``abs``, ``real``).

Partials: ``partials(g, out, *operands)`` gives, per operand, ``g`` times the derivative of the
result by that operand (None: no derivative flows to it), ``out`` being the result. Complex values
follow JAX's convention: the adjoint of ``z = x + i y`` is ``dL/dx - i dL/dy``, so a holomorphic
function's partial is its complex derivative (no conjugate), ``conj`` passes the conjugate of its
adjoint on, and a real value's adjoint keeps only the real part (``autodiff.reverse``).
"""
from __future__ import annotations

import numpy as np

from .core import Const, op


class Element:
    """One elementwise primitive.

    Attributes:
      arity, kind: operands and result dtype rule (see the module's text).
      partials: the partial derivatives, or None (then ``zero`` or ``exempt`` says why).
      infix: the Python operator the printer and the backends write it with, or None.
      function: the NumPy function the numpy backend calls (``np.<name>`` unless given).
      native: the function native (Numba) code calls, where it is not ``function`` (one starting
        with a dot is a method of the element: ``.real``).
      flops: cost per element (a transcendental function counts as several).
      cheap: cheap enough to evaluate again rather than store or hoist (no division, no
        transcendental): backends and passes may duplicate it freely.
      weak: applied to Python scalars by Python's operators and builtins, it gives a Python scalar
        (NEP 50's weak promotion carries through it).
      finite: its partials are finite wherever its operands are.
      zero: piecewise constant or boolean: its derivative is zero almost everywhere.
      output: its derivative is cheap in its result (``tanh``: ``1 - out**2``), which the adjoint
        reads instead of evaluating the transcendental again.
      kept: its result costs more to compute again than to keep: a gradient's forward sweep keeps
        it as an array of its own rather than fusing it into its one reader.
      exempt: why an op with neither partials nor ``zero`` needs none.
    """

    def __init__(self, arity, kind, partials=None, *, infix=None, function=None, native=None, flops=None,
                 cheap=False, weak=False, finite=False, zero=False, output=False, kept=False, exempt=""):
        self.arity, self.kind, self.partials = arity, kind, partials
        self.infix, self.function, self.native, self.flops = infix, function, native, flops
        self.cheap, self.weak, self.finite, self.zero = cheap, weak, finite, zero
        self.output, self.kept, self.exempt = output, kept, exempt


def _sq(x):
    """``x * x``, in float64 for an integer ``x`` (whose square may overflow)."""
    if x.dtype.kind not in "fc":
        x = op("float64", x)
    return x * x


def _complex(x):
    return x.dtype.kind == "c"


def _abs_partial(g, out, a):
    """``|z|``: ``g * conj(z) / |z|``, 0 at ``z = 0`` (as JAX); a real one's ``g * sign(x)``."""
    if not _complex(a):
        return (g * op("sign", a),)
    return (g * op("conj", a) / op("where", op("equal", out, 0.0), 1.0, out),)


def _power_partials(g, out, a, b):
    base = op("where", op("equal", a, 0.0), 1.0, a) if _complex(a) else op("where", op("greater", a, 0), a, 1)
    return g * b * op("power", a, b - 1), g * op("log", base) * out


def _arccosh_partial(g, out, a):
    if _complex(a):        # sqrt(z - 1) sqrt(z + 1), the principal branches' derivative
        return (g / (op("sqrt", a - 1.0) * op("sqrt", a + 1.0)),)
    return (g / op("sqrt", (a - 1.0) * (a + 1.0)),)


def _same(g, out, a):
    return (g,)


_E = Element
_CMP = dict(cheap=True, zero=True)

ELEMENTS = {
    # arithmetic
    "add": _E(2, "same", lambda g, out, a, b: (g, g), infix="+", cheap=True, weak=True, finite=True),
    "subtract": _E(2, "same", lambda g, out, a, b: (g, -g), infix="-", cheap=True, weak=True, finite=True),
    "multiply": _E(2, "same", lambda g, out, a, b: (g * b, g * a), infix="*", cheap=True, weak=True, finite=True),
    "divide": _E(2, "float", lambda g, out, a, b: (g / b, -g * a / _sq(b)), infix="/", weak=True, flops=1),
    "floor_divide": _E(2, "same", infix="//", weak=True, zero=True),
    # a % b = a - floor(a / b) * b (float operands; integer ones carry no adjoint)
    "mod": _E(2, "same", lambda g, out, a, b: (g, -g * op("floor", a / b)), infix="%", weak=True),
    "power": _E(2, "same", _power_partials, infix="**", weak=True),
    "maximum": _E(2, "same", lambda g, out, a, b: (op("where", op("greater_equal", a, b), g, 0.0),
                                                   op("where", op("less", a, b), g, 0.0)),
                  cheap=True, weak=True, finite=True),
    "minimum": _E(2, "same", lambda g, out, a, b: (op("where", op("less_equal", a, b), g, 0.0),
                                                   op("where", op("greater", a, b), g, 0.0)),
                  cheap=True, weak=True, finite=True),
    "negative": _E(1, "same", lambda g, out, a: (-g,), cheap=True, weak=True, finite=True),
    "abs": _E(1, "real", _abs_partial, function="np.absolute", native="np.abs", cheap=True, weak=True,
              finite=True),
    "sign": _E(1, "same", zero=True),
    "square": _E(1, "same", lambda g, out, a: (g * 2.0 * a,), cheap=True, finite=True),
    # exponentials and logarithms
    "exp": _E(1, "float", lambda g, out, a: (g * out,), output=True, kept=True),
    "expm1": _E(1, "float", lambda g, out, a: (g * (out + 1.0),), output=True, kept=True),
    "exp2": _E(1, "float", lambda g, out, a: (g * out * float(np.log(2.0)),)),
    "log": _E(1, "float", lambda g, out, a: (g / a,)),
    "log1p": _E(1, "float", lambda g, out, a: (g / (a + 1.0),)),
    "log2": _E(1, "float", lambda g, out, a: (g / (a * float(np.log(2.0))),)),
    "log10": _E(1, "float", lambda g, out, a: (g / (a * float(np.log(10.0))),)),
    # out >= max(a, b), so neither exponential overflows
    "logaddexp": _E(2, "float", lambda g, out, a, b: (g * op("exp", a - out), g * op("exp", b - out))),
    "sqrt": _E(1, "float", lambda g, out, a: (g * 0.5 / out,), output=True),
    "cbrt": _E(1, "float", lambda g, out, a: (g / (3.0 * _sq(out)),)),
    # trigonometric and hyperbolic
    "sin": _E(1, "float", lambda g, out, a: (g * op("cos", a),), finite=True),
    "cos": _E(1, "float", lambda g, out, a: (-g * op("sin", a),), finite=True),
    "tan": _E(1, "float", lambda g, out, a: (g * (_sq(out) + 1.0),)),
    "arcsin": _E(1, "float", lambda g, out, a: (g / op("sqrt", 1.0 - _sq(a)),)),
    "arccos": _E(1, "float", lambda g, out, a: (-g / op("sqrt", 1.0 - _sq(a)),)),
    "arctan": _E(1, "float", lambda g, out, a: (g / (_sq(a) + 1.0),), finite=True),
    "arctan2": _E(2, "float", lambda g, out, y, x: (g * x / (_sq(x) + _sq(y)), -g * y / (_sq(x) + _sq(y)))),
    "hypot": _E(2, "float", lambda g, out, a, b: (g * a / out, g * b / out)),
    "sinh": _E(1, "float", lambda g, out, a: (g * op("cosh", a),)),
    "cosh": _E(1, "float", lambda g, out, a: (g * op("sinh", a),)),
    "tanh": _E(1, "float", lambda g, out, a: (g * (1.0 - _sq(out)),), finite=True, output=True, kept=True),
    "arcsinh": _E(1, "float", lambda g, out, a: (g / op("sqrt", _sq(a) + 1.0),)),
    "arccosh": _E(1, "float", _arccosh_partial),
    "arctanh": _E(1, "float", lambda g, out, a: (g / (1.0 - _sq(a)),)),
    # log |Gamma(x)| and its derivatives (SciPy's gammaln, digamma, polygamma(n, x)), in the runtimes
    "gammaln": _E(1, "float", lambda g, out, a: (g * op("digamma", a),), function="_rt.gammaln"),
    "digamma": _E(1, "float", lambda g, out, a: (g * op("trigamma", a),), function="_rt.digamma"),
    "trigamma": _E(1, "float", lambda g, out, a: (g * op("polygamma", Const(2), a),), function="_rt.trigamma"),
    # the n-th derivative of digamma (n an integer >= 1)
    "polygamma": _E(2, "float", lambda g, out, n, a: (None, g * op("polygamma", op("add", n, Const(1)), a)),
                    function="_rt.polygamma"),
    # rounding
    "floor": _E(1, "same", zero=True),
    "ceil": _E(1, "same", zero=True),
    "round": _E(1, "same", function="np.round", native="np.rint", zero=True),
    # selection, comparison and logic
    "where": _E(3, "where", lambda g, out, c, a, b: (None, op("where", c, g, 0.0), op("where", c, 0.0, g)),
                cheap=True, weak=True, finite=True),
    "less": _E(2, "bool", infix="<", **_CMP),
    "less_equal": _E(2, "bool", infix="<=", **_CMP),
    "greater": _E(2, "bool", infix=">", **_CMP),
    "greater_equal": _E(2, "bool", infix=">=", **_CMP),
    "equal": _E(2, "bool", infix="==", **_CMP),
    "not_equal": _E(2, "bool", infix="!=", **_CMP),
    "logical_and": _E(2, "bool", **_CMP),
    "logical_or": _E(2, "bool", **_CMP),
    "logical_not": _E(1, "bool", **_CMP),
    "isnan": _E(1, "bool", zero=True),
    "isfinite": _E(1, "bool", zero=True),
    # casts
    "float64": _E(1, "cast", _same, cheap=True, finite=True),
    "float32": _E(1, "cast", _same, cheap=True, finite=True),
    "complex128": _E(1, "cast", _same, finite=True),
    "complex64": _E(1, "cast", _same, finite=True),
    "int64": _E(1, "cast", cheap=True, zero=True),
    "int32": _E(1, "cast", cheap=True, zero=True),
    "bool": _E(1, "cast", native="np.bool_", cheap=True, zero=True),
    # complex numbers: parts, conjugate and argument (of a real operand: itself, 0, itself, 0 or pi)
    "real": _E(1, "real", _same, native=".real", finite=True),
    "imag": _E(1, "real", lambda g, out, a: (g * -1j if _complex(a) else None,), native=".imag", finite=True),
    "conj": _E(1, "same", lambda g, out, a: (op("conj", g),), native=".conjugate()", finite=True),
    # angle(z) = arctan2(y, x): -i g / z (NaN at 0, as JAX); a real one's is piecewise constant
    "angle": _E(1, "real_float", lambda g, out, a: (g * -1j / a if _complex(a) else None,)),
    # NumPy's integer index ``i`` into an axis of length ``n``: ``i + n`` for a negative one, an
    # IndexError outside ``-n .. n - 1`` (where the frontend cannot prove it inside)
    "checked_index": _E(2, "same", function="_rt.checked_index",
                        exempt="an integer index, bounds-checked: never differentiated"),
}

for _name, _e in ELEMENTS.items():
    _e.name = _name
    _e.function = _e.function or f"np.{_name}"
    _e.native = _e.native or _e.function
    if _e.flops is None:          # a transcendental function counts as several
        _e.flops = 8 if _e.kind in ("float", "real_float") else 1

INFIX = {n: e.infix for n, e in ELEMENTS.items() if e.infix}

__all__ = ["Element", "ELEMENTS", "INFIX"]
