"""flowgrad: automatic differentiation of unmodified NumPy programs.

    >>> import numpy as np, flowgrad
    >>> def f(x, steps):
    ...     for t in range(steps):
    ...         x[1:-1] += 0.1 * (x[2:] - 2 * x[1:-1] + x[:-2])
    ...     return np.sum(x * x)
    >>> g = flowgrad.grad(f, wrt="x")(np.linspace(0, 1, 8), 5)
"""
from .api import grad, jit, value_and_grad, vjp
from .autodiff.rules import coverage
from .errors import FlowgradError, InputError, UnsupportedError

__version__ = "0.1.0"
__all__ = ["grad", "value_and_grad", "vjp", "jit", "coverage", "FlowgradError", "InputError",
           "UnsupportedError"]
