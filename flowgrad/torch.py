"""flowgrad inside PyTorch: ``flowgrad.torch.function(fn)`` is a ``torch.autograd.Function``.

A NumPy function that flowgrad differentiates (a simulator with loops and in-place updates)
becomes a differentiable PyTorch operation: the forward pass runs flowgrad's compiled program
on NumPy views of the tensors' memory (no copy for CPU tensors; flowgrad never writes its
arguments), and ``loss.backward()`` runs flowgrad's reverse program for the arguments that
require gradients. Importing this module imports PyTorch; ``import flowgrad`` alone does not.
"""
from __future__ import annotations

import functools

import numpy as np
import torch

from . import api
from .errors import InputError


class _Vjp:
    """``fn`` with one cached flowgrad transform per set of differentiated argument positions."""

    def __init__(self, fn, backend, param_names=()):
        self.fn, self.backend = fn, backend
        self.param_names = list(param_names)    # a module's parameters, passed after the inputs
        self.cache = {}

    def __call__(self, args, wrt):
        """Run the forward pass; returns ``(value, pullback)``, ``pullback(ct)`` giving one
        gradient per position in ``wrt`` (None when nothing is differentiated)."""
        if hasattr(self.fn, "param_names"):            # a program from from_torch / from_onnx
            n_in = len(args) - len(self.param_names)
            value, pull = api.vjp(self.fn, *args[:n_in], backend=self.backend)

            def pullback(ct):
                inputs, params = pull(ct)
                return [inputs[k] if k < n_in else params[self.param_names[k - n_in]] for k in wrt]
            return value, pullback if wrt else None
        if not wrt:
            f = self.cache.get(()) or self.cache.setdefault((), api.jit(self.fn, backend=self.backend))
            return f(*args), None
        t = self.cache.get(wrt)
        if t is None:
            t = self.cache[wrt] = api._Transform(self.fn, wrt, self.backend or api.DEFAULT_BACKEND, "reverse")
        entry = t.compiled(args)
        value, pull = entry.func(*entry.call_args(args))
        used = [False]

        def pullback(ct):
            nonlocal pull
            if used[0]:        # a second backward (retain_graph=True): run the forward sweep again
                _, pull = entry.func(*entry.call_args(args))
            used[0] = True
            ct = np.asarray(ct, dtype=entry.result.dtype)
            return list(pull(ct if ct.ndim else ct.item()))
        return value, pullback


def _to_numpy(a):
    if isinstance(a, torch.Tensor):
        if a.is_complex():
            raise InputError("flowgrad.torch.function: complex tensors are not supported")
        a = a.detach()
        return a.item() if a.dim() == 0 else a.cpu().numpy()   # a view of the tensor's memory
    return a


def _to_tensor(value, device):
    arr = np.asarray(value)
    if not arr.flags.writeable or any(s < 0 for s in arr.strides):
        arr = np.array(arr)
    return torch.from_numpy(arr).to(device)


class _Apply(torch.autograd.Function):
    @staticmethod
    def forward(ctx, vjp, wrt, *args):
        value, ctx.pullback = vjp([_to_numpy(a) for a in args], wrt)
        ctx.wrt, ctx.nargs = wrt, len(args)
        ctx.meta = {k: (args[k].shape, args[k].dtype, args[k].device) for k in wrt}
        device = next((a.device for a in args if isinstance(a, torch.Tensor)), torch.device("cpu"))
        return _to_tensor(value, device)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_out):
        grads = [None] * ctx.nargs
        ct = grad_out.detach().cpu().numpy()
        # PyTorch's adjoint of a complex result is the conjugate of JAX's, which flowgrad takes
        ct = np.conj(ct) if np.iscomplexobj(ct) else ct
        for k, g in zip(ctx.wrt, ctx.pullback(ct)):
            shape, dtype, device = ctx.meta[k]
            grads[k] = torch.as_tensor(np.asarray(g)).reshape(shape).to(dtype=dtype, device=device)
        return (None, None) + tuple(grads)


def function(fn, backend=None):
    """Wrap a flowgrad-differentiable function as a PyTorch operation.

    Args:
      fn: a Python function using NumPy (loops, in-place updates, views, branches) returning one
        array or float, or a program from ``flowgrad.from_torch`` / ``flowgrad.from_onnx`` (a
        ``from_torch`` program's module parameters get their gradients too, as from ``module(x)``).
      backend: the flowgrad backend (default: flowgrad's default).

    Returns:
      ``f(*args)``: takes tensors (and Python numbers), returns a tensor. Gradients flow to
      every floating-point tensor argument that requires grad, through flowgrad's reverse
      program, so ``loss.backward()`` works as for any PyTorch operation.

    Example:
      >>> sim = flowgrad.torch.function(simulate)           # simulate(u0, kappa, steps) in NumPy
      >>> loss = sim(net(x), kappa, 100).square().mean()     # doctest: +SKIP
      >>> loss.backward()                                     # doctest: +SKIP
    """
    if len(getattr(fn, "outputs", ())) > 1 and hasattr(fn, "_flowgrad_inline"):
        raise InputError(f"{fn.__name__} has several outputs ({', '.join(fn.outputs)}); wrap it in a NumPy "
                         "function that returns the one to differentiate")
    module = getattr(fn, "module", None) if hasattr(fn, "_flowgrad_vjp") else None
    names = list(fn.param_names) if isinstance(module, torch.nn.Module) else []
    vjp = _Vjp(fn, backend, names)

    @functools.wraps(fn)
    def apply(*args):
        # a module's parameters go in as arguments too, so that autograd hands them their gradients
        args = args + tuple(module.get_parameter(n) for n in names)
        wrt = tuple(k for k, a in enumerate(args)
                    if isinstance(a, torch.Tensor) and a.requires_grad and a.is_floating_point())
        return _Apply.apply(vjp, wrt, *args)
    return apply


__all__ = ["function"]
