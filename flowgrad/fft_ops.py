"""Fast Fourier transforms as Call ops along one axis: ``fft`` (``inverse``: ifft), ``rfft``,
``irfft``, and the adjoints ``rfft_vjp`` and ``irfft_vjp``, registered in the rule table
(``flowgrad.autodiff.rules.CALLS``) and the native backend (``native_calls.CALL_LOWERING``), like
``linalg_ops``. The frontend (``frontends.numpy_fft``) has applied NumPy's ``n`` before: an
``fft`` Call's input and output have the same shape, an ``rfft``'s input the transform's length.

Adjoints follow JAX's convention for complex values: ``fft`` and ``ifft`` are linear over the
complex numbers and their DFT matrices symmetric, so each is its own transpose (the same
``norm``); ``rfft`` and ``irfft`` have the adjoints of ``backends.fft_runtime``.
"""
from __future__ import annotations

import math

from .autodiff import rules
from .backends import native_calls
from .backends.fft_runtime import NORMS, TRANSFORMS
from .ir.core import Call, Read, Ref, const_value


def _read(c):
    return Read(Ref(c))


def _vjp_fft(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    t = ctx.temp(x.shape, call.outputs[0].dtype, "gfft")
    return [Call("fft", [_read(g)], [t], dict(call.attrs))] + ctx.accumulate(x, _read(t))


def _vjp_rfft(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    axis = call.attrs["axis"]
    t = ctx.temp(x.shape, x.dtype, "grfft")
    attrs = dict(call.attrs, n=const_value(x.shape[axis]))
    return [Call("rfft_vjp", [_read(g)], [t], attrs)] + ctx.accumulate(x, _read(t))


def _vjp_irfft(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    t = ctx.temp(x.shape, x.dtype, "girfft")
    return [Call("irfft_vjp", [_read(g)], [t], dict(call.attrs))] + ctx.accumulate(x, _read(t))


def _flops(c, size):
    """5 n log2 n per transform of length n (the longer of input and output along the axis)."""
    axis = c.attrs["axis"]
    n = max(const_value(c.inputs[0].shape[axis]) or 1, const_value(c.outputs[0].shape[axis]) or 1)
    return 5 * max(size(c.inputs[0].shape), size(c.outputs[0].shape)) * max(1, math.ceil(math.log2(max(n, 2))))


def _fft_src(i, a):
    return f"np.fft.{'ifft' if a['inverse'] else 'fft'}({i[0]}, axis={a['axis']}, norm={a['norm']!r})"


FFT_CALLS = {
    "fft": rules.CallRule(_fft_src, _vjp_fft, jvp=rules.jvp_linear(0), flops=_flops, complex=True,
                          doc="discrete Fourier transform along an axis (ifft with inverse; pocketfft)"),
    "rfft": rules.CallRule(lambda i, a: f"np.fft.rfft({i[0]}, axis={a['axis']}, norm={a['norm']!r})", _vjp_rfft,
                           jvp=rules.jvp_linear(0),
                           flops=_flops, complex=True, doc="Fourier transform of real values, the n // 2 + 1 "
                                                           "non-negative frequencies"),
    "irfft": rules.CallRule(lambda i, a: f"np.fft.irfft({i[0]}, n={a['n']}, axis={a['axis']}, norm={a['norm']!r})",
                            _vjp_irfft, jvp=rules.jvp_linear(0), flops=_flops, complex=True,
                            doc="inverse of rfft: n real values from n // 2 + 1 frequencies"),
    "rfft_vjp": rules.CallRule(lambda i, a: f"_rt.fft.rfft_vjp({i[0]}, {a['n']}, {a['axis']}, {a['norm']!r})",
                               jvp=rules.jvp_linear(0), adjoint_of="rfft", flops=_flops, complex=True,
                               doc="adjoint of rfft"),
    "irfft_vjp": rules.CallRule(lambda i, a: f"_rt.fft.irfft_vjp({i[0]}, {a['n']}, {a['axis']}, {a['norm']!r})",
                                jvp=rules.jvp_linear(0), adjoint_of="irfft", flops=_flops, complex=True,
                                doc="adjoint of irfft (JAX's rule)"),
}


def _lower(low, s, ind):
    """One object-mode call to NumPy's FFT (``backends.native_fft``) writing the output array."""
    c = native_calls._out(low, s, ind)
    code = TRANSFORMS.index("ifft" if s.op == "fft" and s.attrs["inverse"] else s.op)
    x = native_calls._operand_array(low, s.inputs[0], ind)
    n = s.attrs.get("n", 0)
    low.line(f"_rt.fft.transform({code}, {x}, {c.name}, {s.attrs['axis']}, {NORMS.index(s.attrs['norm'])}, {n})"
             f"  # np.fft.{TRANSFORMS[code]}", ind)

FFT_LOWERING = {name: _lower for name in FFT_CALLS}
