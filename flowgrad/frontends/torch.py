"""PyTorch frontend: an ``nn.Module`` captured with ``torch.export`` into the IR.

``torch.export`` traces the module for one input signature into an ATen graph (the training
IR: ``aten.linear``, ``aten.conv2d``, ``aten.layer_norm``, ... with in-place ops kept); each
node becomes IR through ``NNBuilder``. Parameters and buffers become arguments read from the
module on every call, so training the module in PyTorch changes what the program computes.
Elementwise ATen ops become IR expressions (fused, not materialised until needed); matmuls
and reductions become the existing Calls; convolution is im2col + GEMM. Nodes that depend
only on constants are evaluated by PyTorch at capture time.

Data-dependent Python control flow (``if x.sum() > 0:``) makes ``torch.export`` fail; the
failure is reported with the module path and source line, never frozen to the branch that
the example inputs took.
"""
from __future__ import annotations

import operator
import os
import re

import numpy as np

from ..errors import FlowgradError, Loc, UnsupportedError
from ..ir.core import Assign, Expr, Read, Ref, iter_reads, op
from ..nn_builder import REDUCTIONS, ModelProgram, NNBuilder

# ---------------------------------------------------------------- the op table
# Each handler takes the builder and the op's arguments by schema name (values already IR
# expressions, NumPy constants or Python literals) and returns the result (or a tuple).


def _binary(name):
    def handler(b, input, other, alpha=1, **_):
        if alpha != 1:
            other = op("multiply", b.to_expr(other), alpha)
        return op(name, b.to_expr(input), b.to_expr(other))
    return handler


def _extreme(name):
    """torch.maximum / torch.minimum: where the operands tie, each gets half the gradient, as in
    PyTorch (NumPy's rule, flowgrad's own, gives it all to the first)."""
    def handler(b, input, other, **_):
        x, y = b.to_expr(input), b.to_expr(other)
        if np.result_type(x.dtype, y.dtype).kind != "f":
            return op(name, x, y)
        first, second = ("greater", "less") if name == "maximum" else ("less", "greater")
        return op("where", op(first, x, y), x, op("where", op(second, x, y), y, x * 0.5 + y * 0.5))
    return handler


def _unary(name):
    return lambda b, input, **_: op(name, b.to_expr(input))


def _div(b, input, other, rounding_mode=None, **_):
    q = op("divide", b.to_expr(input), b.to_expr(other))
    if rounding_mode == "floor":
        return op("floor", q)
    if rounding_mode == "trunc":
        q = b.read(q)
        return op("where", op("less", q, 0), op("ceil", q), op("floor", q))
    return q


def _pow(b, input, exponent, **_):
    return op("power", b.to_expr(input), b.to_expr(exponent))


def _clamp(b, input, min=None, max=None, **_):
    x = b.to_expr(input)
    if min is not None:
        x = op("maximum", x, b.to_expr(min))
    if max is not None:
        x = op("minimum", x, b.to_expr(max))
    return x


def _hardtanh(b, input, min_val=-1.0, max_val=1.0, **_):
    x = b.read(input)
    return op("where", op("logical_and", op("greater", x, min_val), op("less", x, max_val)), x,
              op("where", op("greater_equal", x, max_val), max_val, min_val))


def _leaky_relu(b, input, negative_slope=0.01, **_):
    x = b.read(input)
    return op("where", op("greater", x, 0), x, x * negative_slope)


def _elu(b, input, alpha=1.0, scale=1.0, input_scale=1.0, **_):
    x = b.read(input)
    neg = alpha * op("expm1", x * input_scale)
    return op("where", op("greater", x, 0), x, neg) * scale if scale != 1 else \
        op("where", op("greater", x, 0), x, neg)


def _softplus(b, input, beta=1.0, threshold=20.0, **_):
    x = b.to_expr(input)             # PyTorch's softplus is linear where beta * x > threshold
    return op("where", op("greater", x * beta if beta != 1 else x, threshold), x, b.softplus(x, beta))


def _hardsigmoid(b, input, **_):
    return op("minimum", op("maximum", b.to_expr(input) / 6.0 + 0.5, 0.0), 1.0)


def _hardswish(b, input, **_):
    x = b.read(input)
    return x * _hardsigmoid(b, x)


def _where(b, condition, input, other, **_):
    return op("where", b.to_expr(condition), b.to_expr(input), b.to_expr(other))


def _masked_fill(b, input, mask, value, **_):
    return op("where", b.to_expr(mask), b.to_expr(value), b.to_expr(input))


def _ints(v, n=None):
    if isinstance(v, (int, np.integer)):
        return [int(v)] * (n or 1)
    return [int(x) for x in v]


def _dims(b, x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return None
    return _ints(dim)


def _reduction(name):
    def handler(b, input, dim=None, keepdim=False, dtype=None, **_):
        x = b.to_expr(input)
        if dtype is not None:
            x = b.cast(x, _np_dtype(dtype))
        return b.reduce(name, x, _dims(b, x, dim), keepdim)
    return handler


def _amax(name):
    def handler(b, input, dim=(), keepdim=False, **_):
        return b.reduce(name, input, _dims(b, input, dim), keepdim)
    return handler


def _max_dim(b, input, dim, keepdim=False, **_):
    x = b.read(input)
    axis = int(dim) % len(x.shape)
    shape = tuple(d for k, d in enumerate(b.shape(x)) if k != axis)
    values = b.call("max_first", [x], shape, x.dtype, {"axis": axis}, hint="max")
    index = b.reduce("argmax", x, (axis,), False) if len(x.shape) else None
    if keepdim:
        values, index = b.unsqueeze(values, axis), b.unsqueeze(index, axis)
    return values, index


def _argmax(b, input, dim=None, keepdim=False, **_):
    x = b.to_expr(input)
    return b.reduce("argmax", x, None if dim is None else (int(dim),), keepdim)


def _var(b, input, dim=None, correction=None, keepdim=False, unbiased=True, **_):
    x = b.to_expr(input)
    axes = _dims(b, x, dim)
    red = range(len(x.shape)) if axes is None else axes
    n = int(np.prod([b.shape(x)[a] for a in red]))
    corr = (1 if unbiased else 0) if correction is None else correction
    xc = b.read(x - b.reduce("mean", x, axes, True), "centred")
    return b.reduce("sum", xc * xc, axes, keepdim) / float(max(n - corr, 0))


def _std(b, **kw):
    return op("sqrt", _var(b, **kw))


def _logsumexp(b, input, dim, keepdim=False, **_):
    return b.logsumexp(input, _ints(dim), keepdim)


def _vector_norm(b, input, ord=2, dim=None, keepdim=False, dtype=None, **_):
    x = b.read(input)
    axes = _dims(b, x, dim)
    if ord == 2:
        return op("sqrt", b.reduce("sum", x * x, axes, keepdim))
    mag = op("abs", x)
    if ord in (float("inf"), float("-inf")):
        return b.reduce("max" if ord > 0 else "min", mag, axes, keepdim)
    if ord == 0:
        return op(x.dtype.name, b.reduce("sum", op("int64", op("not_equal", x, 0)), axes, keepdim))
    if ord == 1:
        return b.reduce("sum", mag, axes, keepdim)
    return op("power", b.reduce("sum", op("power", mag, float(ord)), axes, keepdim), 1.0 / float(ord))


# --- shapes and views


def _view(b, input, size=None, shape=None, **_):
    return b.reshape(input, _ints(size if shape is None else shape))


def _flatten(b, input, start_dim=0, end_dim=-1, **_):
    shape = b.shape(b.to_expr(input))
    if not shape:
        return b.reshape(input, (1,))
    s, e = start_dim % len(shape), end_dim % len(shape)
    return b.reshape(input, shape[:s] + (int(np.prod(shape[s:e + 1])),) + shape[e + 1:])


def _unflatten(b, input, dim, sizes, **_):
    shape = b.shape(b.to_expr(input))
    d = dim % len(shape)
    return b.reshape(input, shape[:d] + tuple(_ints(sizes)) + shape[d + 1:])


def _transpose(b, input, dim0, dim1, **_):
    n = len(b.to_expr(input).shape)
    perm = list(range(n))
    perm[dim0 % n], perm[dim1 % n] = perm[dim1 % n], perm[dim0 % n]
    return b.permute(input, perm)


def _t(b, input, **_):
    n = len(b.to_expr(input).shape)
    return b.permute(input, (1, 0)) if n == 2 else b.to_expr(input)


def _select(b, input, dim, index, **_):
    n = len(b.to_expr(input).shape)
    return b.view(input, (slice(None),) * (dim % n) + (int(index),))


def _slice(b, input, dim=0, start=None, end=None, step=1, **_):
    x = b.to_expr(input)
    n = len(x.shape)
    size = b.shape(x)[dim % n]
    start = None if start is None else max(min(int(start), size), -size)
    end = None if end is None else max(min(int(end), size), -size - 1)
    return b.view(x, (slice(None),) * (dim % n) + (slice(start, end, int(step)),))


def _narrow(b, input, dim, start, length, **_):
    return _slice(b, input, dim, int(start), int(start) + int(length))


def _squeeze(b, input, dim=None, **_):
    return b.squeeze(input, None if dim is None else _ints(dim))


def _expand(b, input, size, **_):
    x = b.to_expr(input)
    size = _ints(size)
    cur = (1,) * (len(size) - len(x.shape)) + b.shape(x)
    return b.expand(x, [c if s == -1 else s for s, c in zip(size, cur)])


def _repeat(b, input, repeats, **_):
    x = b.to_expr(input)
    reps = _ints(repeats)
    shape = (1,) * (len(reps) - len(x.shape)) + b.shape(x)
    x = b.reshape(x, shape)
    inter = []
    for r, d in zip(reps, shape):
        inter += [r, d]
    index = tuple(s for _ in shape for s in (None, slice(None)))
    return b.reshape(b.expand(b.view(x, index), inter), [r * d for r, d in zip(reps, shape)])


def _split(b, input, split_size, dim=0, **_):
    x = b.to_expr(input)
    n = b.shape(x)[dim % len(x.shape)]
    sizes = _ints(split_size) if isinstance(split_size, (list, tuple)) else \
        [min(int(split_size), n - k) for k in range(0, n, int(split_size))]
    out, off = [], 0
    for s in sizes:
        out.append(_slice(b, x, dim, off, off + s))
        off += s
    return tuple(out)


def _chunk(b, input, chunks, dim=0, **_):
    n = b.shape(b.to_expr(input))[dim]
    return _split(b, input, -(-n // int(chunks)), dim)


def _unbind(b, input, dim=0, **_):
    x = b.to_expr(input)
    return tuple(_select(b, x, dim, k) for k in range(b.shape(x)[dim % len(x.shape)]))


def _stack(b, tensors, dim=0, **_):
    n = len(b.to_expr(tensors[0]).shape) + 1
    return b.concat([b.unsqueeze(t, dim % n) for t in tensors], dim % n)


def _identity(b, input, **_):
    return b.to_expr(input)


def _broadcast_tensors(b, tensors, **_):
    from ..ir.core import broadcast_shapes
    exprs = [b.to_expr(t) for t in tensors]
    shape = tuple(int(d.value) for d in broadcast_shapes(*(e.shape for e in exprs)))
    return tuple(b.expand(e, shape) for e in exprs)


def _to_copy(b, input, dtype=None, **_):
    return b.to_expr(input) if dtype is None else b.cast(input, _np_dtype(dtype))


def _index(b, input, indices, **_):
    idx = tuple(slice(None) if i is None else b.whole(i, "idx") for i in indices)
    from . import indexing
    return indexing.getitem(b, b.whole(input), idx, b.loc)


def _index_put(b, input, indices, values, accumulate=False, **_):
    """``input`` with ``values`` written at ``indices`` (integer tensors or a mask; ``accumulate``:
    added, repeated indices summing, as ``np.add.at``), a new tensor the in-place form writes back."""
    from . import indexing
    from .numpy_api import _add_at
    y = b.materialize(b.to_expr(input), "put")
    idx = tuple(slice(None) if i is None else b.whole(i, "idx") for i in indices)
    if accumulate:
        _add_at(b, b.loc, y, idx, values)
    else:
        indexing.setitem(b, y, idx, b.to_expr(values), b.loc)
    return y


def _index_select(b, input, dim, index, **_):
    return _index(b, input, [None] * (dim % len(b.shape(b.to_expr(input)))) + [index])


def _gather(b, input, dim, index, sparse_grad=False, **_):
    from .numpy_composites import gather_along
    idx = b.to_expr(index)
    return gather_along(b, b.loc, b.whole(input), idx, dim, b.shape(idx))


def _item(b, input, **_):
    x = b.to_expr(input)
    return x if not x.shape else b.view(x, (0,) * len(x.shape))


def _like(fill):
    def handler(b, input, dtype=None, fill_value=None, **_):
        x = b.to_expr(input)
        value = fill_value if fill is None else fill
        dt = _np_dtype(dtype) if dtype is not None else x.dtype
        return b.expand(b.cast(b.to_expr(np.asarray(value, dtype=dt)), dt), b.shape(x))
    return handler


def _tri(name):
    def handler(b, input, diagonal=0, **_):
        x = b.read(input)
        return b.call(name, [x], b.shape(x), x.dtype, {"k": int(diagonal)})
    return handler


def _cumsum(b, input, dim, dtype=None, **_):
    x = b.read(input)
    return b.call("cumsum", [x], b.shape(x), x.dtype, {"axis": int(dim) % len(x.shape)})


def _einsum(b, equation, tensors, **_):
    from .numpy_api import _einsum as einsum
    return einsum(b, b.loc, equation, *[b.read(t) for t in tensors])


# --- layers


def _linear(b, input, weight, bias=None, **_):
    return b.linear(input, weight, bias)


def _matmul(b, input, other=None, mat2=None, **_):
    return b.matmul(input, other if mat2 is None else mat2)


def _addmm(b, input, mat1, mat2, beta=1, alpha=1, **_):
    prod = b.matmul(mat1, mat2)
    return (prod * alpha if alpha != 1 else prod) + (b.to_expr(input) * beta if beta != 1 else b.to_expr(input))


def _conv_padding(b, padding, kernel, dilation, nd):
    if isinstance(padding, str):
        if padding == "valid":
            return [(0, 0)] * nd
        total = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return [(t // 2, t - t // 2) for t in total]
    return [(p, p) for p in _ints(padding, nd)]


def _conv(b, input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, transposed=False,
          output_padding=None, **_):
    w = b.to_expr(weight)
    nd = len(w.shape) - 2
    if transposed:
        return _conv_transpose(b, input, weight, bias, stride, padding, output_padding or 0, groups, dilation)
    kernel = b.shape(w)[2:]
    dil = _ints(dilation, nd)
    return b.conv(input, w, bias, _ints(stride, nd), _conv_padding(b, padding, kernel, dil, nd), dil, groups)


def _conv_transpose(b, input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1, **_):
    nd = len(b.to_expr(weight).shape) - 2
    if isinstance(padding, str):
        raise UnsupportedError(f"{b.loc}: unsupported transposed convolution with padding={padding!r}")
    return b.conv_transpose(input, weight, bias, _ints(stride, nd), [(p, p) for p in _ints(padding, nd)],
                            _ints(output_padding, nd), _ints(dilation, nd), groups)


def _max_pool(b, input, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, **_):
    nd = len(b.to_expr(input).shape) - 2
    kernel = _ints(kernel_size, nd)
    stride = _ints(stride, nd) if stride not in (None, [], ()) else kernel
    return b.max_pool(input, kernel, stride, [(p, p) for p in _ints(padding, nd)], _ints(dilation, nd), ceil_mode)


def _max_pool_with_indices(b, **kw):
    return _max_pool(b, **kw), None


def _avg_pool(b, input, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
              divisor_override=None, **_):
    nd = len(b.to_expr(input).shape) - 2
    kernel = _ints(kernel_size, nd)
    stride = _ints(stride, nd) if stride not in (None, [], ()) else kernel
    return b.avg_pool(input, kernel, stride, [(p, p) for p in _ints(padding, nd)], ceil_mode, count_include_pad,
                      divisor_override)


def _adaptive_avg_pool(b, input, output_size, **_):
    nd = len(b.to_expr(input).shape) - 2
    size = b.shape(b.to_expr(input))[2:]
    out = [s if o is None else int(o) for o, s in zip(_ints(output_size, nd) if output_size is not None else size,
                                                      size)]
    return b.adaptive_avg_pool(input, out)


def _batch_norm(b, input, weight, bias, running_mean, running_var, training=False, momentum=0.1, eps=1e-5, **_):
    if training:
        raise UnsupportedError(f"{b.loc}: unsupported BatchNorm in training mode (it updates the running "
                               "statistics): call module.eval() before flowgrad.from_torch")
    return b.batch_norm(input, weight, bias, running_mean, running_var, eps)


def _batch_norm_no_training(b, input, weight, bias, running_mean, running_var, momentum=0.1, eps=1e-5, **_):
    return b.batch_norm(input, weight, bias, running_mean, running_var, eps), None, None


def _layer_norm(b, input, normalized_shape, weight=None, bias=None, eps=1e-5, **_):
    return b.layer_norm(input, len(_ints(normalized_shape)), weight, bias, eps)


def _native_layer_norm(b, **kw):
    return _layer_norm(b, **kw), None, None


def _group_norm(b, input, num_groups, weight=None, bias=None, eps=1e-5, **_):
    x = b.to_expr(input)
    shape = b.shape(x)
    y = b.reshape(b.layer_norm(b.reshape(x, (shape[0], int(num_groups), -1)), 1, None, None, eps), shape)
    per_channel = (slice(None),) + (None,) * (len(shape) - 2)
    if weight is not None:
        y = y * b.view(weight, per_channel)
    return y if bias is None else y + b.view(bias, per_channel)


def _dropout(b, input, p=0.5, train=False, **_):
    if train and p > 0:
        raise UnsupportedError(f"{b.loc}: unsupported dropout in training mode (it is random): call "
                               "module.eval() before flowgrad.from_torch")
    return b.to_expr(input)


def _native_dropout(b, input, p=0.5, train=False, **_):
    return _dropout(b, input, p, train), None


def _softmax(log):
    def handler(b, input, dim, dtype=None, half_to_float=False, **_):
        x = b.to_expr(input) if dtype is None else b.cast(input, _np_dtype(dtype))
        return b.log_softmax(x, int(dim)) if log else b.softmax(x, int(dim))
    return handler


def _sdpa(b, query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False,
          **_):
    if dropout_p:
        raise UnsupportedError(f"{b.loc}: unsupported attention dropout (dropout_p={dropout_p}): call "
                               "module.eval() before flowgrad.from_torch")
    if enable_gqa:                   # grouped-query attention: each key/value head serves a group of queries
        heads = b.shape(b.to_expr(query))[-3]
        key, value = _repeat_heads(b, key, heads), _repeat_heads(b, value, heads)
    return b.attention(query, key, value, attn_mask, is_causal, scale)


def _repeat_heads(b, t, heads):
    """``t`` (..., h, S, E) with each head repeated ``heads // h`` times in place (repeat_interleave)."""
    e = b.to_expr(t)
    shape = b.shape(e)
    if shape[-3] == heads:
        return e
    group = heads // shape[-3]
    v = b.view(e, (slice(None),) * (len(shape) - 2) + (None, slice(None), slice(None)))
    v = b.expand(v, shape[:-2] + (group,) + shape[-2:])
    return b.reshape(v, shape[:-3] + (heads,) + shape[-2:])


def _embedding(b, weight, indices, padding_idx=-1, **_):
    return b.embedding(weight, indices, padding_idx)


def _cross_entropy(b, input, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0, **_):
    return b.cross_entropy(input, target, weight, REDUCTIONS[reduction], ignore_index, label_smoothing)


def _nll_loss(b, input, target, weight=None, reduction=1, ignore_index=-100, **_):
    return b.nll(input, target, weight, REDUCTIONS[reduction], ignore_index)


def _nll_loss_forward(b, **kw):
    return _nll_loss(b, **kw), None


def _mse_loss(b, input, target, reduction=1, **_):
    return b.mse(input, target, REDUCTIONS[reduction])


def _l1_loss(b, input, target, reduction=1, **_):
    return b._reduce_loss(op("abs", b.to_expr(input) - b.to_expr(target)), REDUCTIONS[reduction])


def _bce_logits(b, input, target, weight=None, pos_weight=None, reduction=1, **_):
    x, t = b.read(input), b.to_expr(target)
    log_sig = -b.softplus(-x)                 # log(sigmoid(x))
    log_one_minus = -b.softplus(x)            # log(1 - sigmoid(x))
    pos = log_sig if pos_weight is None else log_sig * b.to_expr(pos_weight)
    loss = -(t * pos + (1.0 - t) * log_one_minus)
    if weight is not None:
        loss = loss * b.to_expr(weight)
    return b._reduce_loss(loss, REDUCTIONS[reduction])


def _no_op(b, *args, **kw):
    return None


def _rsub(b, input, other, alpha=1, **_):
    return op("subtract", b.to_expr(other), b.to_expr(input) * alpha if alpha != 1 else b.to_expr(input))


def _method(name, *fixed):
    """A handler calling ``NNBuilder.<name>(input, *fixed)``."""
    return lambda b, input, **_: getattr(b, name)(input, *fixed)


def _max(b, input, dim=None, keepdim=False, **_):
    return b.reduce("max", input) if dim is None else _max_dim(b, input, dim, keepdim)


def _min(b, input, dim=None, keepdim=False, **_):
    if dim is None:
        return b.reduce("min", input)
    values, index = _max_dim(b, b.read(-b.to_expr(input)), dim, keepdim)      # the first smallest
    return -b.to_expr(values), index


def _fill(b, input, value=0.0, **_):
    x = b.to_expr(input)
    return b.expand(b.cast(b.to_expr(value if hasattr(value, "shape") else np.asarray(value, dtype=x.dtype)),
                           x.dtype), b.shape(x))


def _smooth_l1(b, input, target, reduction=1, beta=1.0, **_):
    d = b.read(op("abs", b.to_expr(input) - b.to_expr(target)))
    loss = d if beta == 0 else op("where", op("less", d, beta), 0.5 * d * d / beta, d - 0.5 * beta)
    return b._reduce_loss(loss, REDUCTIONS[reduction])


def _huber(b, input, target, reduction=1, delta=1.0, **_):
    d = b.read(op("abs", b.to_expr(input) - b.to_expr(target)))
    return b._reduce_loss(op("where", op("less", d, delta), 0.5 * d * d, delta * (d - 0.5 * delta)),
                          REDUCTIONS[reduction])


def _mish(b, input, **_):
    x = b.read(input)
    return x * op("tanh", b.softplus(x))


def _cat(b, tensors, dim=0, **_):
    return b.concat(tensors, dim)


def _split_with_sizes(b, input, split_sizes, dim=0, **_):
    return _split(b, input, list(split_sizes), dim)


HANDLERS = {
    # arithmetic and elementwise functions
    "add": _binary("add"), "sub": _binary("subtract"), "rsub": _rsub, "mul": _binary("multiply"), "div": _div,
    "true_divide": _binary("divide"), "pow": _pow, "neg": _unary("negative"), "exp": _unary("exp"),
    "log": _unary("log"), "log1p": _unary("log1p"), "expm1": _unary("expm1"), "log2": _unary("log2"),
    "sqrt": _unary("sqrt"), "rsqrt": lambda b, input, **_: 1.0 / op("sqrt", b.to_expr(input)),
    "abs": _unary("abs"), "reciprocal": lambda b, input, **_: 1.0 / b.to_expr(input), "square": _unary("square"),
    "sin": _unary("sin"), "cos": _unary("cos"), "tan": _unary("tan"), "sign": _unary("sign"),
    "asin": _unary("arcsin"), "acos": _unary("arccos"), "atan": _unary("arctan"), "sinh": _unary("sinh"),
    "cosh": _unary("cosh"), "asinh": _unary("arcsinh"), "acosh": _unary("arccosh"), "atanh": _unary("arctanh"),
    "exp2": _unary("exp2"), "logaddexp": _binary("logaddexp"), "atan2": _binary("arctan2"),
    "hypot": _binary("hypot"),
    "floor": _unary("floor"), "ceil": _unary("ceil"), "round": _unary("round"), "erf": _method("erf"),
    "maximum": _extreme("maximum"), "minimum": _extreme("minimum"), "clamp": _clamp, "clip": _clamp,
    "clamp_min": lambda b, input, min, **_: _clamp(b, input, min=min),
    "clamp_max": lambda b, input, max, **_: _clamp(b, input, max=max), "where": _where,
    "masked_fill": _masked_fill, "eq": _binary("equal"), "ne": _binary("not_equal"), "lt": _binary("less"),
    "le": _binary("less_equal"), "gt": _binary("greater"), "ge": _binary("greater_equal"),
    "logical_not": _unary("logical_not"), "logical_and": _binary("logical_and"),
    "logical_or": _binary("logical_or"), "bitwise_not": _unary("logical_not"),
    # activations
    "relu": _method("relu"), "sigmoid": _method("sigmoid"), "tanh": lambda b, input, **_: b.activation("tanh", input),
    "silu": _method("silu"), "gelu": lambda b, input, approximate="none", **_: b.gelu(input, approximate),
    "hardtanh": _hardtanh, "relu6": lambda b, input, **_: _hardtanh(b, input, 0.0, 6.0),
    "leaky_relu": _leaky_relu, "elu": _elu, "softplus": _softplus, "hardsigmoid": _hardsigmoid,
    "hardswish": _hardswish, "mish": _mish,
    # reductions
    "sum": _reduction("sum"), "mean": _reduction("mean"), "prod": _reduction("prod"), "amax": _amax("max"),
    "amin": _amax("min"), "max": _max, "min": _min, "fill": _fill, "zero": _fill, "argmax": _argmax, "var": _var, "std": _std, "logsumexp": _logsumexp,
    "linalg_vector_norm": _vector_norm,
    # shapes and views
    "view": _view, "reshape": _view, "_unsafe_view": _view, "flatten": _flatten, "unflatten": _unflatten,
    "permute": lambda b, input, dims, **_: b.permute(input, _ints(dims)), "transpose": _transpose, "t": _t,
    "unsqueeze": lambda b, input, dim, **_: b.unsqueeze(input, dim), "squeeze": _squeeze, "select": _select,
    "slice": _slice, "narrow": _narrow, "expand": _expand,
    "expand_as": lambda b, input, other, **_: _expand(b, input, b.shape(b.to_expr(other))), "repeat": _repeat, "cat": _cat, "concat": _cat,
    "stack": _stack, "split": _split, "split_with_sizes": _split_with_sizes, "chunk": _chunk, "unbind": _unbind,
    "broadcast_tensors": _broadcast_tensors, "contiguous": _identity, "clone": _identity, "alias": _identity,
    "detach": _method("stop_gradient"), "lift_fresh_copy": _identity, "_to_copy": _to_copy, "to": _to_copy,
    "type_as": lambda b, input, other, **_: b.cast(input, other.dtype), "index": _index,
    "index_select": _index_select, "gather": _gather, "index_put": _index_put, "_local_scalar_dense": _item, "item": _item, "zeros_like": _like(0),
    "ones_like": _like(1), "full_like": _like(None), "tril": _tri("tril"), "triu": _tri("triu"), "cumsum": _cumsum,
    "einsum": _einsum,
    # layers
    "linear": _linear, "matmul": _matmul, "mm": _matmul, "bmm": _matmul, "addmm": _addmm,
    "conv1d": _conv, "conv2d": _conv, "conv3d": _conv, "convolution": _conv, "_convolution": _conv,
    "conv_transpose1d": _conv_transpose, "conv_transpose2d": _conv_transpose, "conv_transpose3d": _conv_transpose,
    "max_pool1d": _max_pool, "max_pool2d": _max_pool, "max_pool3d": _max_pool,
    "max_pool2d_with_indices": _max_pool_with_indices, "avg_pool1d": _avg_pool, "avg_pool2d": _avg_pool,
    "avg_pool3d": _avg_pool, "adaptive_avg_pool1d": _adaptive_avg_pool, "adaptive_avg_pool2d": _adaptive_avg_pool,
    "_adaptive_avg_pool2d": _adaptive_avg_pool, "batch_norm": _batch_norm,
    "_native_batch_norm_legit_no_training": _batch_norm_no_training, "layer_norm": _layer_norm,
    "native_layer_norm": _native_layer_norm, "group_norm": _group_norm, "dropout": _dropout,
    "feature_dropout": _dropout, "alpha_dropout": _dropout, "native_dropout": _native_dropout,
    "softmax": _softmax(False), "_softmax": _softmax(False), "log_softmax": _softmax(True),
    "_log_softmax": _softmax(True), "scaled_dot_product_attention": _sdpa, "embedding": _embedding,
    # losses
    "cross_entropy_loss": _cross_entropy, "nll_loss": _nll_loss, "nll_loss_nd": _nll_loss,
    "nll_loss_forward": _nll_loss_forward, "mse_loss": _mse_loss, "l1_loss": _l1_loss,
    "binary_cross_entropy_with_logits": _bce_logits, "smooth_l1_loss": _smooth_l1, "huber_loss": _huber,
    # checks that torch.export inserts
    "_assert_tensor_metadata": _no_op, "_assert_scalar": _no_op, "sym_constrain_range_for_size": _no_op,
    "_assert_async": _no_op,
}
# In-place variants (``relu_``, ``add_``, ``copy_``, ...) write into their first argument.
_VIEWS = {"view", "reshape", "_unsafe_view", "flatten", "unflatten", "permute", "transpose", "t", "unsqueeze",
          "squeeze", "select", "slice", "narrow", "expand", "expand_as", "alias", "split", "split_with_sizes", "chunk", "unbind",
          "contiguous", "detach", "clone", "lift_fresh_copy", "_to_copy", "to"}
_COPIES = {"contiguous", "clone", "lift_fresh_copy", "_to_copy", "to"}


def supported_ops():
    """The ATen operations the PyTorch frontend lowers (in-place ``op_`` forms included)."""
    return sorted(n for n in HANDLERS if not n.startswith("_assert") and n != "sym_constrain_range_for_size")


# ---------------------------------------------------------------- torch helpers


def _np_dtype(torch_dtype):
    import torch
    return torch.empty((), dtype=torch_dtype).numpy().dtype


_TORCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _user_frame(stack_trace):
    """The innermost ``file:line`` of a node's stack trace outside PyTorch itself."""
    frames = re.findall(r'File "([^"]+)", line (\d+)', stack_trace or "")
    if not frames:
        return None
    import torch
    torch_dir = os.path.dirname(torch.__file__)
    for path, line in reversed(frames):
        if not os.path.abspath(path).startswith(torch_dir):
            return Loc(path, int(line))
    return Loc(*frames[-1][:1], int(frames[-1][1]))


def _module_path(node):
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "<root>"
    path, kind = list(stack.values())[-1]
    name = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    return f"{path or '<root>'} ({name.rsplit('.', 1)[-1]})"


def _export(module, tensors):
    """``torch.export`` the module, turning its failures into flowgrad errors that name the module."""
    import torch
    try:
        return torch.export.export(module, tuple(tensors), strict=False)
    except Exception as exc:  # noqa: BLE001 - every export failure is reported as a flowgrad error
        raise _export_error(module, exc) from exc


def _export_error(module, exc):
    names = {id(m): n for n, m in module.named_modules()}
    torch_dir = os.path.dirname(__import__("torch").__file__)
    where, path = None, None
    tb = exc.__traceback__
    while tb is not None:
        frame = tb.tb_frame
        owner = frame.f_locals.get("self")
        fname = os.path.abspath(frame.f_code.co_filename)
        if id(owner) in names and not fname.startswith(torch_dir):
            where, path = Loc(fname, tb.tb_lineno), names[id(owner)] or "<root>"
            path = f"{path} ({type(owner).__name__})"
        tb = tb.tb_next
    text = str(exc)
    if where is None:
        m = re.search(r'File "([^"]+)", line (\d+), in \w+\n\s*(.*)', text)
        if m:
            where = Loc(m.group(1), int(m.group(2)))
    data_dependent = "data-dependent" in text or "data dependent" in text or \
        type(exc).__name__ in ("GuardOnDataDependentSymNode", "DataDependentOutputException")
    prefix = f"{where}: " if where else ""
    module_text = f" in module {path}" if path else ""
    if data_dependent:
        line = ""
        if where is not None:
            import linecache
            line = linecache.getline(where.filename, where.lineno).strip()
        return UnsupportedError(
            f"{prefix}unsupported data-dependent Python control flow{module_text}"
            f"{': `' + line + '`' if line else ''}: the branch depends on tensor values, which torch.export "
            "cannot follow (flowgrad does not freeze the branch the example inputs took). Use torch.where "
            "for a data-dependent choice, or write the function with NumPy and use flowgrad.grad")
    first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    return UnsupportedError(f"{prefix}torch.export could not capture {type(module).__name__}{module_text}: "
                            f"{type(exc).__name__}: {first}")


# ---------------------------------------------------------------- graph -> IR


class _Converter:
    def __init__(self, prog, ep):
        self.prog, self.ep = prog, ep
        self.b = NNBuilder(prog.__name__)
        self.env = {}

    def value(self, a):
        import torch.fx
        if isinstance(a, torch.fx.Node):
            return self.env[a]
        if isinstance(a, (list, tuple)):
            return type(a)(self.value(x) for x in a)
        return a

    def run(self, arrays):
        import torch
        from torch.export.graph_signature import InputKind
        b, ep = self.b, self.ep
        specs = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
        declared = set()
        user = 0
        for node in ep.graph.nodes:
            if node.op != "placeholder":
                continue
            spec = specs[node.name]
            if spec.kind == InputKind.USER_INPUT:
                a = arrays[user]
                self.env[node] = b.arg(node.name, a.dtype, a.shape, ("input", user), key=self.prog.input_names[user])
                user += 1
            elif spec.kind == InputKind.PARAMETER:
                target = self.prog.canonical_name(spec.target)      # tied parameters: one container
                c = b.arg_containers.get("param:" + target)
                if c is not None:
                    self.env[node] = Read(Ref(c) if c.ndim else Ref(c, ()))
                else:
                    v = self.prog._param_value(target)
                    self.env[node] = b.arg(node.name, v.dtype, v.shape, ("param", target), key="param:" + target)
                declared.add(target)
            elif spec.kind == InputKind.BUFFER:
                target = spec.target
                v = self.prog._buffer_value(target)
                read = (lambda t=target: self.prog._buffer_value(t))       # the buffer's value at call time
                self.env[node] = b.arg(node.name, v.dtype, v.shape, ("live", read))
            elif spec.kind == InputKind.CONSTANT_TENSOR:
                self.env[node] = ep.constants[spec.target].detach().cpu().numpy()
            else:
                raise UnsupportedError(f"unsupported torch.export input {node.name} of kind {spec.kind.name}")
        for name in self.prog.param_names:
            if name not in declared:       # a parameter the forward pass never reads: its gradient is zero
                v = self.prog._param_value(name)
                b.arg("unused_" + name, v.dtype, v.shape, ("param", name), key="param:" + name)
        self.last_write = self._last_writes()
        mutated = set(self.last_write)          # nodes whose memory an in-place op writes
        self.order = {n: k for k, n in enumerate(ep.graph.nodes)}
        result = None
        for node in ep.graph.nodes:
            if node.op == "call_function":
                self.env[node] = self.call(node, node in mutated)
            elif node.op == "output":
                outs = node.args[0]
                user_outs = [o for o, s in zip(outs, ep.graph_signature.output_specs)
                             if s.kind.name == "USER_OUTPUT"]
                if len(user_outs) != 1 or not isinstance(user_outs[0], torch.fx.Node):
                    raise UnsupportedError(f"unsupported model output: {type(self.prog.module).__name__} returns "
                                           f"{len(user_outs)} values; return one tensor (e.g. the loss)")
                result = self.env[user_outs[0]]
            elif node.op != "placeholder":
                raise UnsupportedError(f"{_user_frame(node.meta.get('stack_trace'))}: unsupported graph node "
                                       f"{node.name} ({node.op}) in module {_module_path(node)}: control-flow "
                                       "operators (torch.cond, loops) are not supported")
        written = [specs[n.name].target for n in ep.graph.nodes if n.op == "placeholder" and n in mutated
                   and specs[n.name].kind in (InputKind.BUFFER, InputKind.PARAMETER)]
        if written:
            raise UnsupportedError(f"unsupported state update: {type(self.prog.module).__name__} writes "
                                   f"{', '.join(written)} in place in its forward pass, which flowgrad would not "
                                   "write back; keep such state outside the module, or update it after the call")
        if isinstance(result, np.ndarray):
            result = b.materialize(b.to_expr(result), "result")
        return b, result

    def _last_writes(self):
        """Node -> position of the last in-place op writing its memory (through views)."""
        import torch.fx
        out = {}
        for k, node in enumerate(self.ep.graph.nodes):
            if node.op == "call_function" and _is_inplace(node.target):
                t, seen = node.args[0], set()
                while isinstance(t, torch.fx.Node) and t not in seen:
                    seen.add(t)
                    out[t] = k
                    name = getattr(t.target, "_opname", None)
                    if t.op != "call_function" or (name not in _VIEWS and not _is_inplace(t.target)) or \
                            name in _COPIES:
                        break
                    t = t.args[0]
        return out

    def written_later(self, node):
        """Whether the memory ``node`` reads (its first argument's) is written in place after it."""
        import torch.fx
        src = node.args[0] if node.args else None
        return isinstance(src, torch.fx.Node) and self.last_write.get(src, -1) > self.order[node]

    def call(self, node, mutated):
        import torch
        from torch.fx.operator_schemas import normalize_function
        b = self.b
        b.loc = _user_frame(node.meta.get("stack_trace"))
        if node.target is operator.getitem:
            seq = self.env[node.args[0]]
            return seq[node.args[1]]
        target = node.target
        name = getattr(target, "_opname", None) or getattr(target, "__name__", str(target))
        inplace = _is_inplace(target)
        base = name[:-1] if inplace and name not in HANDLERS else name
        handler = HANDLERS.get(base) if isinstance(target, torch._ops.OpOverload) else None
        if base == "copy":
            handler = lambda b, input, src, **_: b.to_expr(src)  # noqa: E731
        seeded = torch.Tag.nondeterministic_seeded in getattr(target, "tags", ())
        if not inplace and not seeded and all(not isinstance(self.env.get(a), Expr) for a in node.all_input_nodes):
            folded = self._fold(node)      # every input is a constant: PyTorch computes it now
            if folded is not None:
                return folded
        if handler is None:
            raise UnsupportedError(
                f"{b.loc}: unsupported PyTorch operation {target} (graph node '{node.name}', module "
                f"{_module_path(node)}); flowgrad supports: {', '.join(supported_ops())}")
        norm = normalize_function(target, tuple(node.args), dict(node.kwargs), normalize_to_only_use_kwargs=True)
        kwargs = {k: self.value(v) for k, v in (norm.kwargs if norm else node.kwargs).items()}
        try:
            value = handler(b, **kwargs)
        except (FlowgradError, UnsupportedError):
            raise
        except TypeError as exc:
            raise UnsupportedError(f"{b.loc}: unsupported arguments to {target} (graph node '{node.name}', "
                                   f"module {_module_path(node)}): {exc}") from None
        if inplace:
            return self.write_inplace(node, value)
        if base in _COPIES and (mutated or self.written_later(node)) and isinstance(value, Read):
            value = b.materialize(value, node.name)        # a copy apart from what is written later
        if base in ("view", "reshape", "_unsafe_view", "flatten", "unflatten", "expand") and mutated:
            raise UnsupportedError(f"{b.loc}: unsupported in-place update through a reshaped tensor (graph node "
                                   f"'{node.name}', module {_module_path(node)}): update the original tensor")
        source = self.env.get(node.args[0]) if node.args else None
        if base in ("view", "reshape", "_unsafe_view", "flatten", "unflatten", "expand") and self.written_later(node) \
                and not (isinstance(value, Read) and isinstance(source, Read)
                         and value.ref.container is source.ref.container):      # a copy, not a view
            raise UnsupportedError(f"{b.loc}: unsupported {base} of a tensor updated in place afterwards (graph node "
                                   f"'{node.name}', module {_module_path(node)}): PyTorch's result is a view and "
                                   "shows the update, flowgrad's is a copy; take it after the update")
        return self.settle(node, value, mutated)

    def _fold(self, node):
        """Evaluate a node whose inputs are all constants with PyTorch itself."""
        import torch
        import torch.fx

        def conv(a):
            if isinstance(a, torch.fx.Node):
                v = self.env[a]
                return torch.from_numpy(np.array(v)) if isinstance(v, np.ndarray) else v
            if isinstance(a, (list, tuple)):
                return type(a)(conv(x) for x in a)
            return a
        try:
            out = node.target(*conv(node.args), **{k: conv(v) for k, v in node.kwargs.items()})
        except Exception:  # noqa: BLE001 - not foldable here; the handler lowers it instead
            return None
        if isinstance(out, torch.Tensor):
            return out.detach().cpu().numpy()
        return None

    def settle(self, node, value, mutated):
        """Check the value against PyTorch's own shape and dtype; keep an expression tree lazy
        only when exactly one op consumes it (and nothing writes it in place)."""
        import torch
        b = self.b
        if isinstance(value, tuple) or value is None or isinstance(value, np.ndarray):
            return value
        e = b.to_expr(value)
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            want = tuple(int(d) for d in val.shape)
            if b.shape(e) != want:
                raise FlowgradError(f"{b.loc}: internal error lowering {node.target} (node '{node.name}'): "
                                    f"shape {b.shape(e)}, PyTorch says {want}")
            dt = _np_dtype(val.dtype)
            if e.dtype != dt:
                e = b.cast(e, dt)
        if not isinstance(e, Read) and (len(node.users) != 1 or mutated):
            e = b.materialize(e, node.name)
        return e

    def write_inplace(self, node, value):
        b = self.b
        tgt_node = node.args[0]
        target = self.env[tgt_node]
        if not isinstance(target, Read):
            target = self.env[tgt_node] = b.materialize(target, tgt_node.name)
        c = target.ref.container
        for k, v in list(self.env.items()):      # pending expressions must see the old values
            if not isinstance(v, (Read, tuple, np.ndarray)) and v is not None and \
                    any(r.ref.container is c for r in iter_reads(v)):
                self.env[k] = b.materialize(v, k.name)
        e = b.to_expr(value)
        if e.dtype != target.dtype:
            e = b.cast(e, target.dtype)
        b.emit(Assign(target.ref, e))
        return target


def _is_inplace(target):
    name = getattr(target, "_opname", "")
    return name.endswith("_") and not name.startswith("_") or name == "copy_"


# ---------------------------------------------------------------- the program object


class TorchProgram(ModelProgram):
    """An ``nn.Module`` captured with ``torch.export``; see ``flowgrad.from_torch``."""

    kind = "PyTorch"

    def __init__(self, module, example_inputs, backend=None):
        import torch
        if not isinstance(module, torch.nn.Module):
            raise FlowgradError(f"flowgrad.from_torch takes a torch.nn.Module, not {type(module).__name__}")
        self.module = module
        self._exports = {}
        self._params = dict(module.named_parameters())
        self.param_names = list(self._params)
        arrays = [self._as_array(a) for a in example_inputs]
        ep = self._export(arrays)
        from torch.export.graph_signature import InputKind
        names = [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
        super().__init__(type(module).__name__, names, backend)
        self._build(arrays)      # report unsupported operations now, not at the first call

    def __reduce__(self):
        # pickled (to another process, a Dask worker): the module (its class by reference, its
        # parameters and buffers as they are now) and the input names; exported and compiled again
        # there at the first call
        return _restore_torch_program, (self.module, self.input_names, self.backend)

    @staticmethod
    def _as_array(a):
        if hasattr(a, "detach"):
            return a.detach().cpu().numpy()
        return np.asarray(a)

    def _export(self, arrays):
        import torch
        key = tuple((a.shape, a.dtype.str) for a in arrays)
        ep = self._exports.get(key)
        if ep is None:
            ep = self._exports[key] = _export(self.module, [torch.from_numpy(np.array(a)) for a in arrays])
        return ep

    def _build(self, args):
        return _Converter(self, self._export(args)).run(args)

    def canonical_name(self, name):
        """The ``named_parameters()`` name of the Parameter at ``name`` (a tied one, such as an
        output layer sharing its embedding's weight, is listed once, under its first name)."""
        p = self.module.get_parameter(name)
        return next((n for n, q in self.module.named_parameters() if q is p), name)

    def _param_value(self, name):
        # the module's Parameter objects (optimisers update them in place), read on every call
        p = self._params.get(name)
        if p is None:
            p = self._params[name] = self.module.get_parameter(name)
        return p.detach().cpu().numpy()

    def _buffer_value(self, name):
        return self.module.get_buffer(name).detach().cpu().numpy()


def _restore_torch_program(module, input_names, backend):
    """A ``TorchProgram`` unpickled: ``module`` with nothing exported or compiled yet."""
    prog = object.__new__(TorchProgram)
    prog.module = module
    prog._exports = {}
    prog._params = dict(module.named_parameters())
    prog.param_names = list(prog._params)
    ModelProgram.__init__(prog, type(module).__name__, input_names, backend)
    return prog


def from_torch(module, *example_inputs, backend=None):
    """Capture a PyTorch module into a flowgrad program.

    Args:
      module: a ``torch.nn.Module`` (call ``.eval()`` first if it has dropout or batch norm).
      *example_inputs: example inputs (NumPy arrays or tensors) fixing the input shapes and dtypes;
        other shapes are captured again when first called.
      backend: ``"numpy"`` (default: a model's time is in BLAS calls, and it compiles at once) or
        ``"native"`` (Numba; fuses elementwise work, but compiling a model takes up to a minute).

    Returns:
      A program: ``prog(*inputs)`` runs the forward pass with the module's current parameters
      (NumPy in, NumPy out); ``flowgrad.vjp(prog, *inputs)`` returns ``(output, pullback)`` and
      ``pullback(cotangent)`` returns ``(input_grads, param_grads)``: one array per input (None
      for integer inputs) and a dict from each ``named_parameters()`` name to its gradient.

    Example:
      >>> prog = flowgrad.from_torch(model.eval(), x)                          # doctest: +SKIP
      >>> out, pullback = flowgrad.vjp(prog, x)                                # doctest: +SKIP
      >>> (gx,), gparams = pullback(np.ones_like(out))                         # doctest: +SKIP
    """
    return TorchProgram(module, example_inputs, backend)


__all__ = ["from_torch", "TorchProgram", "supported_ops", "HANDLERS"]
