"""The layer builder the PyTorch and ONNX frontends share (``NNBuilder``: linear layers,
convolutions, pooling, normalisations, activations, attention, losses as IR) and the callable
program object they return (``ModelProgram``). The operations it emits, their derivative rules
and their lowering are in ``nn_ops``."""
from __future__ import annotations

import inspect
import math

import numpy as np

from .errors import FlowgradError, InputError, UnsupportedError
from .frontends import Captured, indexing, numpy_api
from .frontends.python import Namer
from .ir.core import Assign, Call, Const, Container, Expr, Read, Ref, const_value, op
from .nn_ops import _out_shape, _prod
# ================================================================ the layer builder


def _geometry(size, kernel, stride, pad_lo, pad_hi, dilation, ceil_mode):
    """Output length of a window op along one axis, and the high padding that realises it."""
    span = dilation * (kernel - 1) + 1
    room = size + pad_lo + pad_hi - span
    if room < 0:
        raise FlowgradError(f"window of size {span} is larger than the padded input ({size + pad_lo + pad_hi})")
    out = (-(-room // stride) if ceil_mode else room // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_lo:
        out -= 1
    return out, max(pad_hi, (out - 1) * stride + span - size - pad_lo)


# the name generators of the captures a model is being inlined into (``ModelProgram._flowgrad_inline``):
# the model's containers are named by the capture's, so that they cannot clash with its own
_NAMERS = []


class NNBuilder:
    """Emits the IR of one model for one call signature.

    The frontend declares the arguments (``arg``), walks its graph calling the layer methods,
    and finally calls ``captured``. Values are IR expressions: a ``Read`` (of a container or a
    view of one) or an elementwise ``Op`` tree, materialised only when an op needs memory.
    ``loc`` is attached to every statement (a source line or a graph node name).
    """

    def __init__(self, name):
        self.name = name
        self.namer = _NAMERS[-1] if _NAMERS else Namer()
        self.containers = {}
        self.body = []
        self.params = []            # argument containers, in call order (constants last)
        self.sources = []           # what each parameter is filled from: ("input", k), ("param", name), ...
        self.arg_containers = {}
        self._consts = {}
        self.loc = None

    # ------------------------------------------------------------ the frontend interface

    def arg(self, hint, dtype, shape, source, key=None):
        """Declare an argument container filled from ``source`` at call time."""
        c = self.container(hint, dtype, shape, "arg")
        self.params.append(c)
        self.sources.append(source)
        if key is not None:
            self.arg_containers[key] = c
        return Read(Ref(c) if c.ndim else Ref(c, ()))

    def container(self, hint, dtype, shape, kind="transient"):
        if np.dtype(dtype).kind == "c":
            where = f"{self.loc}: " if self.loc is not None else ""
            raise UnsupportedError(f"{where}unsupported complex values ({np.dtype(dtype)}, {hint!r}) in the model: "
                                   "flowgrad differentiates complex numbers in NumPy programs; pass real arrays "
                                   "(the real and imaginary parts as two) to models")
        c = Container(self.namer(hint), dtype, tuple(Const(int(d)) if isinstance(d, (int, np.integer)) else d
                                                      for d in shape), kind)
        self.containers[c.name] = c
        return c

    def emit(self, stmt):
        if getattr(stmt, "loc", None) is None:
            stmt.loc = self.loc
        self.body.append(stmt)
        return stmt

    def alloc(self, hint, dtype, shape, loc=None, covered=False):
        c = self.container(hint, dtype, shape)
        self.emit(Assign(Ref(c) if c.ndim else Ref(c, ()), Const(0, c.dtype), loc=loc))
        return c

    def materialize(self, value, hint="t", loc=None):
        e = self.to_expr(value)
        c = self.container(hint, e.dtype, e.shape)
        self.emit(Assign(Ref(c) if c.ndim else Ref(c, ()), e, loc=loc))
        return Read(Ref(c) if c.ndim else Ref(c, ()))

    def to_expr(self, value, loc=None):
        if isinstance(value, Expr):
            return value
        if isinstance(value, np.ndarray):
            if value.ndim == 0:
                return Const(value.item(), value.dtype, weak=False)
            return self.const_array(value)
        if isinstance(value, np.generic):
            return Const(value.item(), value.dtype, weak=False)
        if isinstance(value, (bool, int, float)):
            return Const(value)
        raise UnsupportedError(f"{self.loc}: unsupported value of type {type(value).__name__} in the model")

    def const_array(self, value):
        """A constant array (e.g. a class-index table), passed to the program as a hidden argument."""
        key = id(value)
        if key not in self._consts:
            value = np.ascontiguousarray(value)
            self._consts[key] = (self.arg("const", value.dtype, value.shape, ("const", value)), value)
        return self._consts[key][0]

    def captured(self, result, values_of):
        """The ``Captured`` record; ``values_of(sources, call_args)`` gives the arguments' values."""
        e = self.to_expr(result)
        if not isinstance(e, Read) or e.ref.container.kind == "arg" or not e.ref.is_whole() and e.shape:
            e = self.materialize(e, "result")
        res = e.ref.container
        sources = list(self.sources)
        return Captured(self.name, self.params, self.body, res, self.containers, self.namer,
                        self.arg_containers, lambda call_args: values_of(sources, call_args))

    # ------------------------------------------------------------ values, shapes, views

    @staticmethod
    def shape(e):
        return tuple(int(const_value(d)) for d in e.shape)

    def read(self, value, hint="t"):
        """``value`` as a Read (a view is fine); an expression tree is computed into memory."""
        e = self.to_expr(value)
        return e if isinstance(e, Read) else self.materialize(e, hint)

    def whole(self, value, hint="t"):
        """``value`` as a Read of a whole container (views are copied)."""
        e = self.to_expr(value)
        return e if isinstance(e, Read) and (e.ref.is_whole() or not e.shape) else self.materialize(e, hint)

    def cast(self, value, dtype):
        e = self.to_expr(value)
        dtype = np.dtype(dtype)
        if e.dtype == dtype:
            return e
        name = {"float64": "float64", "float32": "float32", "int64": "int64", "int32": "int32",
                "bool": "bool"}.get(dtype.name)
        if name is None:
            raise UnsupportedError(f"{self.loc}: unsupported dtype {dtype}: use float32, float64, int64, int32 "
                                   "or bool")
        return op(name, e)

    def view(self, value, index):
        """Basic indexing (ints, slices, None) as a view when the layout allows it, else on a copy."""
        e = self.read(value)
        try:
            return Read(indexing.view(e.ref, index, self.loc))
        except UnsupportedError:
            return Read(indexing.view(self.materialize(e).ref, index, self.loc))

    def permute(self, value, perm):
        e = self.read(value)
        n = len(e.shape)
        return numpy_api._transpose(self, self.loc, e, tuple(int(p) % n for p in perm))

    def reshape(self, value, shape):
        e = self.to_expr(value)
        shape = tuple(int(d) for d in shape)
        if -1 in shape:
            known = _prod(d for d in shape if d != -1)
            shape = tuple(_prod(self.shape(e)) // max(known, 1) if d == -1 else d for d in shape)
        if shape == self.shape(e):
            return e
        if _prod(shape) != _prod(self.shape(e)):
            raise FlowgradError(f"{self.loc}: cannot reshape {self.shape(e)} into {shape}")
        e = self.read(e)
        out = self.container("reshape", e.dtype, shape)
        self.emit(Call("reshape", [e], [out], {"shape": out.shape}))
        return Read(Ref(out) if out.ndim else Ref(out, ()))

    def unsqueeze(self, value, axis):
        n = len(self.to_expr(value).shape) + 1
        axis = int(axis) % n
        return self.view(value, (slice(None),) * axis + (None,))

    def squeeze(self, value, axes=None):
        e = self.to_expr(value)
        shape = self.shape(e)
        axes = [k for k, d in enumerate(shape) if d == 1] if axes is None else \
            [int(a) % len(shape) for a in axes if shape[int(a) % len(shape)] == 1]
        if not axes:
            return e
        return self.view(e, tuple(0 if k in axes else slice(None) for k in range(len(shape))))

    def expand(self, value, shape):
        e = self.to_expr(value)
        shape = tuple(int(d) for d in shape)
        if self.shape(e) == shape:
            return e
        c = self.container("expand", e.dtype, shape)
        self.emit(Assign(Ref(c), e))
        return Read(Ref(c))

    def concat(self, values, axis):
        exprs = [self.to_expr(v) for v in values]
        ndim = len(exprs[0].shape)
        axis = int(axis) % ndim
        dtype = np.result_type(*[e.dtype for e in exprs])
        shape = list(self.shape(exprs[0]))
        shape[axis] = sum(self.shape(e)[axis] for e in exprs)
        c = self.alloc("cat", dtype, shape)
        off = 0
        for e in exprs:
            n = self.shape(e)[axis]
            index = (slice(None),) * axis + (slice(off, off + n),)
            self.emit(Assign(indexing.view(Ref(c), index, self.loc), e))
            off += n
        return Read(Ref(c))

    def reduce(self, name, value, axes=None, keepdims=False):
        e = self.to_expr(value)
        if axes is not None:
            axes = tuple(sorted({int(a) % max(len(e.shape), 1) for a in axes}))
        return numpy_api.reduce(self, name, e, axes, keepdims, self.loc)

    def logsumexp(self, value, axes=None, keepdims=False):
        """``log(sum(exp(x)))`` over ``axes`` (None: all), shifted by the maximum, which the
        gradient treats as a constant (it cancels)."""
        x = self.read(value)
        red = tuple(range(len(x.shape))) if axes is None else tuple(sorted({int(a) % len(x.shape) for a in axes}))
        shift = self.call("max_const", [x], tuple(1 if k in red else d for k, d in enumerate(self.shape(x))),
                          x.dtype, {"axis": red, "keepdims": True})
        out = op("log", self.reduce("sum", op("exp", x - shift), red, True)) + shift
        return out if keepdims else self.squeeze(self.read(out), red)

    def matmul(self, a, b):
        return numpy_api.matmul(self, self.read(a), self.read(b), self.loc)

    def call(self, name, inputs, shape, dtype, attrs=None, hint=None):
        """Emit a Call into a fresh container; returns its Read."""
        out = self.container(hint or name, dtype, shape)
        self.emit(Call(name, [self.read(i) if isinstance(i, Expr) else i for i in inputs], [out], attrs or {}))
        return Read(Ref(out) if out.ndim else Ref(out, ()))

    def stop_gradient(self, value):
        e = self.read(value)
        return self.call("stop_gradient", [e], self.shape(e), e.dtype, hint="detached")

    # ------------------------------------------------------------ activations

    def relu(self, x):
        return self.activation("relu", x)

    def activation(self, fn, x):
        """relu, tanh, sigmoid or exp into memory; the adjoint reads the result instead of recomputing it."""
        x = self.read(x)
        return self.call("activation", [x], self.shape(x), x.dtype, {"fn": fn}, hint=fn)

    def sigmoid(self, x):
        return self.activation("sigmoid", x)

    def silu(self, x):
        x = self.read(x)
        return x * self.sigmoid(x)

    def softplus(self, x, beta=1.0):
        """log(1 + exp(beta x)) / beta, computed without overflow."""
        bx = self.read(self.to_expr(x) * beta if beta != 1 else x)
        out = op("maximum", bx, 0.0) + op("log1p", op("exp", -op("abs", bx)))
        return out / beta if beta != 1 else out

    def erf(self, x):
        x = self.read(x)
        return self.call("erf", [x], self.shape(x), x.dtype)

    def gelu(self, x, approximate="none"):
        x = self.read(x)
        if approximate == "tanh":
            inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x * x * x)
            return 0.5 * x * (1.0 + op("tanh", inner))
        return 0.5 * x * (1.0 + self.erf(x * (1.0 / math.sqrt(2.0))))

    # ------------------------------------------------------------ linear layers

    def linear(self, x, w, b=None):
        """x @ w.T + b for x of shape (..., in) and w of shape (out, in)."""
        x, w = self.read(x), self.read(w)
        xs, (o, _) = self.shape(x), self.shape(w)
        if len(xs) == 1:
            y = self.matmul(x, self.permute(w, (1, 0)))
        else:
            x2 = self.reshape(x, (_prod(xs[:-1]), xs[-1])) if len(xs) > 2 else x
            y = self.call("linear", [x2, w], (self.shape(x2)[0], o), np.result_type(x.dtype, w.dtype))
            if len(xs) > 2:
                y = self.reshape(y, xs[:-1] + (o,))
        return y if b is None else y + self.to_expr(b)

    def conv(self, x, w, b, stride, padding, dilation, groups):
        """N-d convolution (cross-correlation); ``padding`` is one (low, high) pair per spatial axis."""
        x, w = self.read(x), self.read(w)
        n, c, *size = self.shape(x)
        o, cg, *kernel = self.shape(w)
        nd = len(kernel)
        if cg * groups != c:
            raise FlowgradError(f"{self.loc}: convolution weight expects {cg * groups} input channels, got {c}")
        attrs = {"stride": tuple(stride), "padding": tuple(map(tuple, padding)), "dilation": tuple(dilation),
                 "groups": int(groups)}
        out = _out_shape(size, kernel, stride, padding, dilation)
        y = self.call("conv", [x, w], (n, o) + out, np.result_type(x.dtype, w.dtype), attrs)
        if b is not None:
            y = y + self.view(b, (slice(None),) + (None,) * nd)
        return y

    def conv_transpose(self, x, w, b, stride, padding, output_padding, dilation, groups):
        """N-d transposed convolution (PyTorch's ``conv_transpose``, ONNX's ``ConvTranspose``): the
        adjoint of the convolution with the same geometry, ``w`` of shape (C_in, C_out / groups,
        *kernel); ``padding`` is one (low, high) pair per spatial axis, ``output_padding`` the
        extra length at the high end."""
        x, w = self.read(x), self.read(w)
        n, c, *size = self.shape(x)
        ci, cg, *kernel = self.shape(w)
        nd = len(kernel)
        if ci != c:
            raise FlowgradError(f"{self.loc}: transposed convolution weight expects {ci} input channels, got {c}")
        out = tuple((s - 1) * st - lo - hi + d * (k - 1) + op_ + 1
                    for s, st, (lo, hi), d, k, op_ in zip(size, stride, padding, dilation, kernel, output_padding))
        if any(op_ >= max(st, d) for op_, st, d in zip(output_padding, stride, dilation)) or min(out, default=1) < 1:
            raise FlowgradError(f"{self.loc}: transposed convolution: output padding {tuple(output_padding)} must "
                                f"be smaller than the stride or the dilation, and the output not empty ({out})")
        attrs = {"stride": tuple(stride), "padding": tuple(map(tuple, padding)), "dilation": tuple(dilation),
                 "groups": int(groups), "xshape": (n, cg * groups) + out}
        y = self.call("conv_grad_input", [x, w], (n, cg * groups) + out, np.result_type(x.dtype, w.dtype), attrs,
                      hint="conv_transpose")
        if b is not None:
            y = y + self.view(b, (slice(None),) + (None,) * nd)
        return y

    # ------------------------------------------------------------ pooling

    def _pool(self, x, mode, kernel, stride, padding, dilation, ceil_mode):
        x = self.read(x)
        n, c, *size = self.shape(x)
        stride = list(stride) or list(kernel)
        pads = tuple((lo, _geometry(s, k, st, lo, hi, d, ceil_mode)[1])
                     for s, k, st, (lo, hi), d in zip(size, kernel, stride, padding, dilation))
        attrs = {"mode": mode, "kernel": tuple(kernel), "stride": tuple(stride), "padding": pads,
                 "dilation": tuple(dilation)}
        out = _out_shape(size, kernel, stride, pads, dilation)
        return self.call("pool", [x], (n, c) + out, x.dtype, attrs, hint=mode + "pool"), stride, out

    def max_pool(self, x, kernel, stride, padding, dilation, ceil_mode=False):
        """Max pooling; ``padding`` is one (low, high) pair per spatial axis (filled with -inf)."""
        return self._pool(x, "max", kernel, stride, padding, dilation, ceil_mode)[0]

    def avg_pool(self, x, kernel, stride, padding, ceil_mode=False, count_include_pad=True, divisor=None):
        nd = len(kernel)
        total, stride, out = self._pool(x, "sum", kernel, stride, padding, (1,) * nd, ceil_mode)
        size = self.shape(self.to_expr(x))[2:]
        if divisor is None:
            counts = np.ones(out, dtype=np.float64)
            for j in range(nd):
                start = np.arange(out[j]) * stride[j] - padding[j][0]
                end = np.minimum(start + kernel[j], size[j] + padding[j][1])
                if not count_include_pad:
                    start, end = np.maximum(start, 0), np.minimum(end, size[j])
                shape = [1] * nd
                shape[j] = out[j]
                counts = counts * (end - start).reshape(shape)
            if np.all(counts == counts.flat[0]):
                return total * (1.0 / float(counts.flat[0]))
            return total * self.const_array((1.0 / counts).astype(total.dtype))
        return total * (1.0 / float(divisor))

    def adaptive_avg_pool(self, x, out_size):
        """Adaptive average pooling: per axis, a product with a constant averaging matrix."""
        x = self.read(x)
        size = self.shape(x)[2:]
        y = x
        for j, (s, o) in enumerate(zip(size, out_size)):
            if s == o:
                continue
            avg = np.zeros((o, s), dtype=x.dtype)
            for i in range(o):
                lo, hi = (i * s) // o, -(-((i + 1) * s) // o)
                avg[i, lo:hi] = 1.0 / (hi - lo)
            axis = 2 + j
            nd = len(self.shape(y))
            moved = self.permute(y, [k for k in range(nd) if k != axis] + [axis])
            z = self.matmul(moved, self.permute(self.const_array(avg), (1, 0)))
            back = list(range(nd - 1))
            back.insert(axis, nd - 1)
            y = self.permute(z, back)
        return y

    # ------------------------------------------------------------ normalisation and softmax

    def batch_norm(self, x, w, b, mean, var, eps):
        """Batch normalisation with fixed statistics (inference mode), channels on axis 1."""
        x = self.read(x)
        nd = len(x.shape)

        def per_channel(v):
            return self.view(v, (slice(None),) + (None,) * (nd - 2))
        scale = 1.0 / op("sqrt", self.to_expr(var) + eps)
        if w is not None:
            scale = scale * self.to_expr(w)
        y = (x - per_channel(mean)) * per_channel(self.read(scale, "bn_scale"))
        return y if b is None else y + per_channel(b)

    def layer_norm(self, x, ndims, w, b, eps):
        """Normalise over the last ``ndims`` axes, then scale by w and shift by b."""
        x = self.to_expr(x)
        axes = tuple(range(len(x.shape) - ndims, len(x.shape)))
        xc = self.read(x - self.reduce("mean", x, axes, True), "centred")
        rstd = self.read(1.0 / op("sqrt", self.reduce("mean", xc * xc, axes, True) + eps), "rstd")
        y = xc * rstd
        if w is not None:
            y = y * self.to_expr(w)
        return y if b is None else y + self.to_expr(b)

    def _shifted(self, x, axis):
        x = self.read(x)
        m = self.call("max_const", [x], tuple(1 if k == axis % len(x.shape) else d for k, d in
                                             enumerate(self.shape(x))),
                      x.dtype, {"axis": (axis % len(x.shape),), "keepdims": True}, hint="shift")
        return x - m

    def softmax(self, x, axis):
        e = self.activation("exp", self._shifted(x, axis))
        return e / self.reduce("sum", e, (axis,), True)

    def log_softmax(self, x, axis):
        z = self.read(self._shifted(x, axis), "shifted")
        return z - op("log", self.reduce("sum", op("exp", z), (axis,), True))

    def attention(self, q, k, v, mask=None, causal=False, scale=None):
        """softmax(q @ k^T * scale + mask) @ v over the last two axes."""
        q, k = self.read(q), self.read(k)
        qs, ks = self.shape(q), self.shape(k)
        scale = 1.0 / math.sqrt(qs[-1]) if scale is None else float(scale)
        nd = len(ks)
        s = self.matmul(q, self.permute(k, list(range(nd - 2)) + [nd - 1, nd - 2])) * scale
        if causal:
            s = op("where", self.const_array(np.tril(np.ones((qs[-2], ks[-2]), dtype=bool))), s, -math.inf)
        if mask is not None:
            mask = self.to_expr(mask)
            s = op("where", mask, s, -math.inf) if mask.dtype.kind == "b" else s + mask
        return self.matmul(self.softmax(s, -1), v)

    # ------------------------------------------------------------ embedding and losses

    def embedding(self, w, idx, padding_idx=None):
        w, idx = self.whole(w), self.whole(idx, "idx")
        out = indexing.getitem(self, w, (idx,), self.loc)
        if padding_idx is None or padding_idx < 0:
            return out
        frozen = indexing.getitem(self, self.stop_gradient(w), (idx,), self.loc)
        return op("where", op("equal", self.unsqueeze(idx, -1), int(padding_idx)), frozen, out)

    def _reduce_loss(self, loss, reduction, denominator=None):
        if reduction == "none":
            return loss
        total = self.reduce("sum", loss)
        if reduction == "sum":
            return total
        if denominator is None:
            return self.reduce("mean", loss)
        return total / denominator

    def nll(self, logp, target, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0):
        """Negative log-likelihood of log-probabilities ``logp`` (classes on axis 1, or 0 when 1-d)."""
        logp = self.read(logp)
        shape = self.shape(logp)
        axis = 1 if len(shape) > 1 else 0
        ncls = shape[axis]
        tail = (None,) * (len(shape) - axis - 1)
        wv = None if weight is None else self.view(weight, (slice(None),) + tail)
        target = self.to_expr(target)
        if target.dtype.kind == "f":
            t = target if not label_smoothing else target * (1.0 - label_smoothing) + label_smoothing / ncls
            per = t * logp if wv is None else t * logp * wv
            return self._reduce_loss(-self.reduce("sum", per, (axis,)), reduction)
        classes = self.const_array(np.arange(ncls, dtype=np.int64).reshape((ncls,) + (1,) * len(tail)))
        t = self.whole(target, "target")
        hot = self.read(op("equal", self.unsqueeze(t, axis), classes), "onehot")
        picked = self.reduce("sum", op("where", hot, logp, 0.0), (axis,))
        valid = self.cast(op("not_equal", t, int(ignore_index)), logp.dtype)
        wt = valid if wv is None else self.read(self.reduce("sum", op("where", hot, wv, 0.0), (axis,)) * valid)
        loss = -(picked * wt)
        if label_smoothing:
            smooth = -self.reduce("sum", logp if wv is None else logp * wv, (axis,)) * valid
            loss = (1.0 - label_smoothing) * loss + (label_smoothing / ncls) * smooth
        return self._reduce_loss(loss, reduction, self.reduce("sum", wt))

    def cross_entropy(self, x, target, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0):
        x = self.to_expr(x)
        return self.nll(self.log_softmax(x, 1 if len(x.shape) > 1 else 0), target, weight, reduction,
                        ignore_index, label_smoothing)

    def mse(self, a, b, reduction="mean"):
        d = self.read(self.to_expr(a) - self.to_expr(b), "diff")
        return self._reduce_loss(d * d, reduction)


REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}


# ================================================================ the program object


class ModelProgram:
    """A model captured into the IR: a callable program that flowgrad differentiates.

    ``prog(*inputs)`` runs the forward pass with the model's current parameters (NumPy arrays
    in and out). ``flowgrad.vjp(prog, *inputs)`` returns ``(output, pullback)``, and
    ``pullback(cotangent)`` returns ``(input_grads, param_grads)``: one array per input (None
    for integer inputs) and a dict from each parameter name to its gradient. The program is
    captured and compiled once per input signature (shapes and dtypes), then cached.

    Subclasses give ``_build(args) -> (NNBuilder, result)``, ``param_names`` and
    ``_param_value(name)``.
    """

    kind = "model"

    def __init__(self, name, input_names, backend=None):
        from . import api
        self.__name__ = name
        self.input_names = list(input_names)
        self.__signature__ = inspect.Signature(
            [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in self.input_names])
        backend = backend or "numpy"     # a model's time is in BLAS calls; Numba would compile for minutes
        if backend not in api.BACKENDS:
            raise InputError(f"unknown backend {backend!r}; available: {', '.join(api.BACKENDS)}")
        self.backend = backend
        self._entries = {}

    # --- subclass hooks
    param_names: list

    def _build(self, args):
        raise NotImplementedError

    def _param_value(self, name):
        raise NotImplementedError

    # --- capture

    def _arrays(self, args):
        if len(args) != len(self.input_names):
            raise InputError(f"{self.__name__} takes {len(self.input_names)} inputs "
                             f"({', '.join(self.input_names)}), got {len(args)}")
        out = []
        for name, a in zip(self.input_names, args):
            if hasattr(a, "detach") and hasattr(a, "numpy"):
                a = a.detach().cpu().numpy()
            a = np.asarray(a)
            if a.dtype.kind not in "biuf":
                raise InputError(f"input {name!r} has dtype {a.dtype}; pass real NumPy arrays")
            out.append(a)
        return out

    def parameters(self):
        """The current parameter values, by name."""
        return {n: np.asarray(self._param_value(n)) for n in self.param_names}

    def _values_of(self, sources, call_args):
        arrays = self._arrays(call_args)
        out = []
        for kind, what in sources:
            if kind == "input":
                out.append(arrays[what])
            elif kind == "param":
                out.append(self._param_value(what))
            elif kind == "live":
                out.append(what())          # a buffer, read now
            else:
                out.append(what)            # a constant
        return out

    def _flowgrad_capture(self, args):
        b, result = self._build(self._arrays(args))
        return b.captured(result, self._values_of)

    def _flowgrad_inline(self, fe, args, kwargs, loc):
        """A call of the model inside a Python function flowgrad captures (``fe``): its IR, named by
        that capture, stands where the call stands, the inputs the call's values, the parameters
        and buffers the model's arrays (read when the program runs), so every transform of the
        function (gradients, tangents, nested ones) goes through the model."""
        from .errors import unsupported
        try:
            bound = self.__signature__.bind(*args, **kwargs)
        except TypeError as exc:
            raise InputError(f"{loc}: calling {self.__name__}: {exc}") from None
        exprs = [fe.to_expr(a, loc) for a in bound.args]
        examples = []
        for name, e in zip(self.input_names, exprs):
            shape = tuple(const_value(d) for d in e.shape)
            if None in shape:
                raise unsupported(loc, f"input {name!r} of {self.__name__} of a size known only at run time",
                                  "give the model inputs of fixed shapes")
            examples.append(np.zeros(shape, dtype=e.dtype))
        _NAMERS.append(fe.namer)
        try:
            b, result = self._build(examples)
            cap = b.captured(result, self._values_of)
        finally:
            _NAMERS.pop()
        fe.containers.update(cap.containers)
        for c, (kind, what) in zip(b.params, b.sources):
            if kind == "input":
                c.kind = "transient"
                fe.emit(Assign(Ref(c), exprs[what], loc=loc))
                continue
            value = np.asarray(self._param_value(what) if kind == "param" else what() if kind == "live" else what)
            if id(value) in fe.consts:          # the same array is already an input of the capture
                c.kind = "transient"
                fe.emit(Assign(Ref(c), Read(Ref(fe.consts[id(value)][0])), loc=loc))
            else:
                fe.consts[id(value)] = (c, value)
        for st in cap.body:
            fe.emit(st)
        return Read(Ref(cap.result))

    def _entry(self, args, backend, mode):
        from . import api
        backend = backend or self.backend
        if backend not in api.BACKENDS:
            raise InputError(f"unknown backend {backend!r}; available: {', '.join(api.BACKENDS)}")
        arrays = self._arrays(args)
        key = (tuple((a.shape, a.dtype.str) for a in arrays), backend, mode)
        entry = self._entries.get(key)
        if entry is None:
            wrt = ()
            if mode != "forward":
                wrt = tuple(n for n, a in zip(self.input_names, arrays) if a.dtype.kind == "f") + \
                    tuple("param:" + n for n in self.param_names)
            entry = api._Compiled(self, arrays, wrt, backend, mode)
            entry.wrt_names = wrt
            entry.layouts = {n: (tuple(int(const_value(d)) for d in c.shape), c.dtype)
                             for n, c in entry.cap.arg_containers.items()}
            self._entries[key] = entry
        return entry, arrays

    def __call__(self, *inputs):
        entry, arrays = self._entry(inputs, None, "forward")
        return entry.func(*entry.call_args(arrays))

    def _flowgrad_vjp(self, args, wrt=None, backend=None):
        if wrt is not None:
            raise InputError(f"flowgrad.vjp of a {self.kind} program differentiates every float input and "
                             "parameter; drop the wrt argument")
        entry, arrays = self._entry(args, backend, "reverse")
        if entry.result.dtype.kind != "f":
            raise InputError(f"{self.__name__} returns {entry.result.dtype} values, which cannot be differentiated")
        value, pull = entry.func(*entry.call_args(arrays))
        used = [False]
        shape = np.shape(value)

        def pullback(cotangent):
            ct = np.asarray(cotangent, dtype=entry.result.dtype)
            if ct.shape != shape:
                raise InputError(f"cotangent has shape {ct.shape} but the output of {self.__name__} has shape {shape}")
            nonlocal pull
            if used[0]:
                _, pull = entry.func(*entry.call_args(arrays))
            used[0] = True
            grads = dict(zip(entry.wrt_names, pull(ct if ct.ndim else ct.item())))

            def shaped(name):
                shape, dtype = entry.layouts[name]
                return np.asarray(grads[name], dtype=dtype).reshape(shape)
            ins = tuple(shaped(n) if n in grads else None for n in self.input_names)
            return ins, {n: shaped("param:" + n) for n in self.param_names}
        return value, pullback

    def source(self, *inputs, backend=None, mode="reverse"):
        """The generated Python source for this input signature."""
        return self._entry(inputs, backend, mode)[0].src

    def ir(self, *inputs, backend=None, mode="reverse"):
        """The IR (forward, and backward for gradients) as text, for this input signature."""
        return self._entry(inputs, backend, mode)[0].ir_text()
