"""flowgrad: automatic differentiation of unmodified NumPy programs.

    >>> import numpy as np, flowgrad
    >>> def f(x, steps):
    ...     for t in range(steps):
    ...         x[1:-1] += 0.1 * (x[2:] - 2 * x[1:-1] + x[:-2])
    ...     return np.sum(x * x)
    >>> g = flowgrad.grad(f, wrt="x")(np.linspace(0, 1, 8), 5)
"""
from . import registry  # noqa: F401 - composes the op families' tables (flowgrad/registry.py)
from .api import Pullback, explain, grad, jit, value_and_grad, vjp
from .api_forward import hessian, hvp, jacfwd, jacrev, jvp, linearize
from .autodiff.rules import coverage
from .errors import FlowgradError, InputError, UnsupportedError
from .implicit import fixed_point
from .frontends.fortran import from_fortran
from .frontends.onnx import from_onnx
from .frontends.torch import from_torch

__version__ = "0.1.0"
__all__ = ["grad", "value_and_grad", "vjp", "Pullback", "jit", "jvp", "linearize", "jacfwd", "jacrev", "hvp", "hessian", "fixed_point", "explain", "coverage", "from_torch", "from_onnx", "from_fortran",
           "FlowgradError",
           "InputError", "UnsupportedError"]


def __getattr__(name):
    # flowgrad.torch / flowgrad.jax / flowgrad.dask: interop, imported (with its framework) on first use
    if name in ("torch", "jax", "dask"):
        import importlib
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
