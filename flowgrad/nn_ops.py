"""Neural-network operations in the IR, shared by the PyTorch and ONNX frontends.

The Call ops that the NumPy frontend never needed, each registered in the rule table
(``flowgrad.autodiff.rules.CALLS``: NumPy forward template and adjoint) and in the native
backend (``flowgrad.backends.native_calls.CALL_LOWERING``: loop nests around BLAS calls):

``linear`` (x @ w.T with the weight's adjoint in its own layout), ``conv`` with its adjoints
``conv_grad_input``/``conv_grad_weight`` (im2col + one GEMM per group; the input adjoint is
a GEMM per kernel offset, so no column-sized adjoint buffer exists), ``pool``/``pool_grad``
(max or sum over windows; the max adjoint goes to the first maximal element, as in
PyTorch), ``max_first``/``max_first_grad``, ``max_const`` (a maximum treated as a constant:
the shift of a stable softmax), ``activation`` (tanh/sigmoid/exp whose adjoint reads the
saved output), ``erf`` and ``stop_gradient``.

``nn_builder.NNBuilder`` emits them, with the IR of layers (linear, convolution, pooling,
normalisation, softmax, attention, embedding, losses), for whichever frontend parsed the model.

The NumPy helpers the generated source calls are reachable there as ``_rt.nn.<name>`` (this
module registers itself on ``flowgrad.backends.runtime``); the native backend emits loop
nests and ``np.dot``, and calls ``_rt.nn_erf`` (``math.erf`` compiled by Numba) for ``erf``.
"""
from __future__ import annotations

import math

import numpy as np

from .autodiff import rules
from .backends import native_calls
from .backends import runtime as numpy_runtime
from .backends.numpy import dtype_src
from .ir.core import Assign, Call, Const, Read, Ref, const_value, op

# ================================================================ NumPy helpers (``_rt.nn.<name>``)


def _prod(xs):
    out = 1
    for x in xs:
        out *= int(x)
    return out


def _window_view(x, kernel, stride, padding, dilation, pad_value):
    """Every window of ``x`` (N, C, *S) as a view (N, C, *out, *kernel); only padding copies."""
    x = np.asarray(x)
    if any(lo or hi for lo, hi in padding):
        x = np.pad(x, ((0, 0), (0, 0)) + tuple(map(tuple, padding)), constant_values=pad_value)
    nd = len(kernel)
    span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
    win = np.lib.stride_tricks.sliding_window_view(x, span, axis=tuple(range(2, 2 + nd)))
    return win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in stride)
               + tuple(slice(None, None, d) for d in dilation)]


def _columns(x, kernel, stride, padding, dilation, groups):
    """im2col: (groups, C/groups * prod(kernel), N * L), rows (channel, *kernel), columns (sample, position)."""
    win = _window_view(x, kernel, stride, padding, dilation, 0.0)
    n, c = win.shape[:2]
    nd = len(kernel)
    out = win.shape[2:2 + nd]
    cols = win.transpose((1,) + tuple(range(2 + nd, 2 + 2 * nd)) + (0,) + tuple(range(2, 2 + nd)))
    return cols.reshape(groups, (c // groups) * _prod(kernel), n * _prod(out))


def _group_rows(g, groups):
    """(N, O, *out) -> (groups, O/groups, N * L), the GEMM layout of a convolution's output."""
    g = np.asarray(g)
    return g.swapaxes(0, 1).reshape(groups, g.shape[1] // groups, -1)


def _offset(k, dilation, stride, out):
    """The input positions that kernel offset ``k`` reads, as slices of the padded input."""
    return tuple(slice(kj * d, kj * d + s * (o - 1) + 1, s) for kj, d, s, o in zip(k, dilation, stride, out))


def _crop(acc, size, padding):
    return acc[(slice(None), slice(None)) + tuple(slice(lo, lo + s) for s, (lo, _) in zip(size, padding))]


def conv(x, w, stride, padding, dilation, groups):
    """Convolution (cross-correlation) of x (N, C, *S) with w (O, C/groups, *k): im2col, one GEMM per group."""
    w = np.asarray(w)
    n, o = np.shape(x)[0], w.shape[0]
    y = np.matmul(w.reshape(groups, o // groups, -1), _columns(x, w.shape[2:], stride, padding, dilation, groups))
    out = _out_shape(np.shape(x)[2:], w.shape[2:], stride, padding, dilation)
    return y.reshape((o, n) + out).swapaxes(0, 1)


def _out_shape(size, kernel, stride, padding, dilation):
    return tuple((s + lo + hi - d * (k - 1) - 1) // st + 1
                 for s, k, st, (lo, hi), d in zip(size, kernel, stride, padding, dilation))


def conv_grad_weight(g, x, wshape, stride, padding, dilation, groups):
    """The adjoint of ``conv`` w.r.t. the weight: (dY as rows) @ im2col(x)^T."""
    cols = _columns(x, wshape[2:], stride, padding, dilation, groups)
    return np.matmul(_group_rows(g, groups), cols.transpose(0, 2, 1)).reshape(wshape)


def conv_grad_input(g, w, xshape, stride, padding, dilation, groups):
    """The adjoint of ``conv`` w.r.t. the input: per kernel offset, one GEMM added into the input
    positions that offset read (col2im without materialising the column matrix)."""
    w = np.asarray(w)
    n, c, *size = xshape
    o, cg, *kernel = w.shape
    out = np.shape(g)[2:]
    rows = _group_rows(g, groups)
    w2 = w.reshape(groups, o // groups, cg, *kernel)
    padded = [s + lo + hi for s, (lo, hi) in zip(size, padding)]
    acc = np.zeros((c, n, *padded), dtype=np.result_type(rows, w))
    for k in np.ndindex(*kernel):
        part = np.matmul(w2[(slice(None),) * 3 + k].transpose(0, 2, 1), rows)
        acc[(slice(None), slice(None)) + _offset(k, dilation, stride, out)] += part.reshape(c, n, *out)
    return _crop(acc, size, padding).swapaxes(0, 1)


def _pad(x, padding, value):
    if any(lo or hi for lo, hi in padding):
        return np.pad(x, ((0, 0), (0, 0)) + tuple(map(tuple, padding)), constant_values=value)
    return x


def pool(x, mode, kernel, stride, padding, dilation):
    """The maximum (padding -inf) or the sum (padding 0) of every window: (N, C, *out), one
    vectorised pass per kernel offset."""
    x = np.asarray(x)
    xp = _pad(x, padding, -np.inf if mode == "max" else 0.0)
    out = _out_shape(x.shape[2:], kernel, stride, padding, dilation)
    acc = None
    for k in np.ndindex(*kernel):
        part = xp[(slice(None), slice(None)) + _offset(k, dilation, stride, out)]
        if acc is None:
            acc = part.copy()
        elif mode == "max":
            np.maximum(acc, part, out=acc)
        else:
            acc += part
    return acc


def pool_grad(g, x, y, mode, kernel, stride, padding, dilation):
    """The adjoint of ``pool`` (output ``y``): each output's adjoint goes to its whole window (sum)
    or to the window's first maximal element (max, as in PyTorch)."""
    x, g = np.asarray(x), np.asarray(g)
    n, c, *size = x.shape
    out = g.shape[2:]
    padded = [s + lo + hi for s, (lo, hi) in zip(size, padding)]
    acc = np.zeros((n, c, *padded), dtype=g.dtype)
    if mode == "max":
        xp = _pad(x, padding, -np.inf)
        open_ = np.ones(g.shape, dtype=bool)         # windows whose maximum is not yet assigned
    for k in np.ndindex(*kernel):
        where = (slice(None), slice(None)) + _offset(k, dilation, stride, out)
        if mode == "sum":
            acc[where] += g
        else:
            hit = (xp[where] == y) & open_
            acc[where] += g * hit
            open_ &= ~hit
    return _crop(acc, size, padding)


def pool_jvp(t, x, kernel, stride, padding, dilation):
    """The tangent of max pooling: each window's is the tangent ``t`` of its first maximal element
    of ``x`` (the element ``pool_grad`` gives the window's adjoint)."""
    x, t = np.asarray(x), np.asarray(t)
    xp, tp = _pad(x, padding, -np.inf), _pad(t, padding, 0.0)
    out = _out_shape(x.shape[2:], kernel, stride, padding, dilation)
    best = acc = None
    for k in np.ndindex(*kernel):
        where = (slice(None), slice(None)) + _offset(k, dilation, stride, out)
        if best is None:
            best, acc = xp[where].copy(), tp[where].copy()
            continue
        better = xp[where] > best
        best, acc = np.where(better, xp[where], best), np.where(better, tp[where], acc)
    return acc


def max_first_grad(g, x, axis):
    """``g`` placed at the first maximal element of ``x`` along ``axis`` (zeros elsewhere)."""
    x = np.asarray(x)
    at = np.expand_dims(np.argmax(x, axis=axis), axis)
    out = np.zeros(x.shape, dtype=np.result_type(g, x))
    np.put_along_axis(out, at, np.expand_dims(np.asarray(g), axis), axis)
    return out


def sigmoid(x):
    """The logistic function, as 0.5 tanh(x/2) + 0.5 (no overflow)."""
    return 0.5 * np.tanh(0.5 * x) + 0.5


def erf(x):
    """The error function, elementwise (SciPy)."""
    from scipy.special import erf as _erf
    return _erf(x)


numpy_runtime.nn = __import__(__name__, fromlist=["conv"])


# ================================================================ adjoints


def _shape_of(e):
    return tuple(int(const_value(d)) for d in e.shape)


def _conv_attrs(attrs):
    return {k: attrs[k] for k in ("stride", "padding", "dilation", "groups")}


def _vjp_conv(ctx, call, gouts):
    (x, w), (g,) = call.inputs, gouts
    attrs = _conv_attrs(call.attrs)
    return ctx.via_temp(x, "conv_grad_input", [Read(Ref(g)), w], attrs=dict(attrs, xshape=_shape_of(x))) + \
        ctx.via_temp(w, "conv_grad_weight", [Read(Ref(g)), x], attrs=dict(attrs, wshape=_shape_of(w)))


def _vjp_conv_grad_input(ctx, call, gouts):
    """``conv_grad_input`` as an operation of its own (a transposed convolution) is linear in both
    operands: ``<gy, conv_grad_input(x, w)> = <conv(gy, w), x>``, so its adjoint w.r.t. ``x`` is
    a convolution of ``gy`` and w.r.t. ``w`` the weight adjoint of that convolution."""
    (x, w), (g,) = call.inputs, gouts
    attrs = _conv_attrs(call.attrs)
    return ctx.via_temp(x, "conv", [Read(Ref(g)), w], attrs=attrs) + \
        ctx.via_temp(w, "conv_grad_weight", [x, Read(Ref(g))], attrs=dict(attrs, wshape=_shape_of(w)))


def _vjp_pool(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    return ctx.via_temp(x, "pool_grad", [Read(Ref(g)), x, Read(Ref(call.outputs[0]))], attrs=dict(call.attrs))


def _vjp_max_first(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    return ctx.via_temp(x, "max_first_grad", [Read(Ref(g)), x], attrs=dict(call.attrs))


def _vjp_pool_jvp(ctx, call, gouts):
    """``pool_jvp`` is linear in its tangent operand: the transpose is ``pool_grad`` (max)."""
    (t, x), (g,) = call.inputs, gouts
    y = ctx.temp(g.shape, g.dtype, "pmax")
    return [Call("pool", [x], [y], dict(call.attrs, mode="max"))] + \
        ctx.via_temp(t, "pool_grad", [Read(Ref(g)), x, Read(Ref(y))], attrs=dict(call.attrs, mode="max"))


def _jvp_pool(ctx, call, touts):
    """Sum pooling is linear; max pooling takes each window's first maximal element's tangent."""
    (x,), (t,) = call.inputs, touts
    if call.attrs["mode"] == "sum":
        return [Call("pool", [ctx.tangent(x)], [t], dict(call.attrs))]
    attrs = {k: v for k, v in call.attrs.items() if k != "mode"}
    return [Call("pool_jvp", [ctx.tangent(x), x], [t], attrs)]


def _jvp_max_first(ctx, call, touts):
    """The tangent of the first maximal element: ``sum(onehot * tx, axis)``, the one-hot mask
    being ``max_first_grad`` of ones."""
    (x,), (t,) = call.inputs, touts
    axis = call.attrs["axis"]
    ones, hot = ctx.temp(t.shape, t.dtype, "ones"), ctx.temp(x.shape, t.dtype, "hot")
    return [Assign(Ref(ones), Const(1.0)), Call("max_first_grad", [Read(Ref(ones)), x], [hot], {"axis": axis}),
            Call("sum", [Read(Ref(hot)) * ctx.tangent(x)], [t], {"axis": (axis,), "keepdims": False})]


def _vjp_erf(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    return ctx.accumulate(x, Read(Ref(g)) * (2.0 / math.sqrt(math.pi)) * op("exp", -(x * x)))


def _positive(y):
    """1 where y > 0, else 0, in y's dtype (a product with a mask: np.where is slow on random masks)."""
    return op("float32" if y.dtype == np.float32 else "float64", op("greater", y, 0))


# The adjoint of an activation, from its saved output y: nothing is recomputed. ReLU's is 0 at 0,
# as in PyTorch.
_ACTIVATION_PARTIAL = {"tanh": lambda y: 1.0 - y * y, "sigmoid": lambda y: y * (1.0 - y), "exp": lambda y: y,
                       "relu": _positive}
_ACTIVATION_NUMPY = {"tanh": "np.tanh({})", "sigmoid": "_rt.nn.sigmoid({})", "exp": "np.exp({})",
                     "relu": "np.maximum({}, 0)"}
# As IR expressions, so the native backend's element-wise lowering (vectorised transcendentals
# included) applies.
_ACTIVATION_EXPR = {"tanh": lambda x: op("tanh", x), "sigmoid": lambda x: op("tanh", x * 0.5) * 0.5 + 0.5,
                    "exp": lambda x: op("exp", x), "relu": lambda x: op("maximum", x, 0.0)}


def _vjp_activation(ctx, call, gouts):
    (x,), (g,) = call.inputs, gouts
    y = Read(Ref(call.outputs[0]) if call.outputs[0].ndim else Ref(call.outputs[0], ()))
    return ctx.accumulate(x, Read(Ref(g) if g.ndim else Ref(g, ())) * _ACTIVATION_PARTIAL[call.attrs["fn"]](y))


def _swap_last(r):
    n = len(r.shape)
    return Read(Ref(r.ref.container, r.ref.items, tuple(range(n - 2)) + (n - 1, n - 2)))


def _vjp_linear(ctx, call, gouts):
    (x, w), (g,) = call.inputs, gouts
    return ctx.via_temp(x, "matmul", [Read(Ref(g)), w]) + \
        ctx.via_temp(w, "matmul", [_swap_last(Read(Ref(g))), x])


def _no_vjp(ctx, call, gouts):
    return []


def _jvp_erf(ctx, call, touts):
    (x,), (t,) = call.inputs, touts
    return [Assign(Ref(t), ctx.tangent(x) * (2.0 / math.sqrt(math.pi)) * op("exp", -(x * x)))]


def _jvp_activation(ctx, call, touts):
    (x,), (t,) = call.inputs, touts
    y = Read(Ref(call.outputs[0]) if call.outputs[0].ndim else Ref(call.outputs[0], ()))
    return [Assign(Ref(t), ctx.tangent(x) * _ACTIVATION_PARTIAL[call.attrs["fn"]](y))]


def _float_src(v):
    return repr(float(v)) if math.isfinite(v) else ("np.inf" if v > 0 else "-np.inf")


def _geom_src(a):
    return (f"{tuple(a['stride'])!r}, {tuple(map(tuple, a['padding']))!r}, {tuple(a['dilation'])!r}")


NN_CALLS = {
    "linear": rules.CallRule(
        lambda i, a: f"np.matmul({i[0]}, {i[1]}.T)", _vjp_linear, jvp=rules.jvp_linear(0, 1),
        flops=lambda c, size: 2 * size(c.outputs[0].shape) * size(c.inputs[1].shape[-1:]),
        doc="x @ w.T (BLAS); the weight's adjoint is computed in the weight's own layout"),
    "conv": rules.CallRule(
        lambda i, a: f"_rt.nn.conv({i[0]}, {i[1]}, {_geom_src(a)}, {a['groups']})", _vjp_conv,
        jvp=rules.jvp_linear(0, 1),
        flops=lambda c, size: 2 * size(c.outputs[0].shape) * size(c.inputs[1].shape[1:]),
        doc="N-d convolution: im2col + one GEMM per group (BLAS)"),
    "conv_grad_input": rules.CallRule(
        lambda i, a: f"_rt.nn.conv_grad_input({i[0]}, {i[1]}, {tuple(a['xshape'])!r}, {_geom_src(a)}, "
                     f"{a['groups']})", _vjp_conv_grad_input, jvp=rules.jvp_linear(0, 1),
        doc="adjoint of conv w.r.t. its input (a GEMM per kernel offset); also the transposed convolution"),
    "conv_grad_weight": rules.CallRule(
        lambda i, a: f"_rt.nn.conv_grad_weight({i[0]}, {i[1]}, {tuple(a['wshape'])!r}, {_geom_src(a)}, "
                     f"{a['groups']})", jvp=rules.jvp_linear(0, 1), adjoint_of="conv",
        doc="adjoint of conv w.r.t. its weight (im2col + GEMM)"),
    "pool": rules.CallRule(
        lambda i, a: f"_rt.nn.pool({i[0]}, {a['mode']!r}, {tuple(a['kernel'])!r}, {_geom_src(a)})", _vjp_pool,
        jvp=_jvp_pool,
        doc="max or sum over sliding windows (max / average pooling)"),
    "pool_grad": rules.CallRule(
        lambda i, a: f"_rt.nn.pool_grad({i[0]}, {i[1]}, {i[2]}, {a['mode']!r}, {tuple(a['kernel'])!r}, "
                     f"{_geom_src(a)})", jvp=rules.jvp_linear(0), adjoint_of="pool",
        doc="adjoint of pool (max: to the first maximal element of each window)"),
    "pool_jvp": rules.CallRule(
        lambda i, a: f"_rt.nn.pool_jvp({i[0]}, {i[1]}, {tuple(a['kernel'])!r}, {_geom_src(a)})", _vjp_pool_jvp,
        jvp=rules.jvp_linear(0), doc="tangent of max pooling: each window's first maximal element's tangent"),
    "max_first": rules.CallRule(
        lambda i, a: f"np.max({i[0]}, axis={a['axis']})", _vjp_max_first, jvp=_jvp_max_first,
        doc="maximum over one axis; the adjoint goes to the first maximal element (torch.max(x, dim))"),
    "max_first_grad": rules.CallRule(
        lambda i, a: f"_rt.nn.max_first_grad({i[0]}, {i[1]}, {a['axis']})", jvp=rules.jvp_linear(0),
        adjoint_of="max_first", doc="adjoint of max_first"),
    "max_const": rules.CallRule(
        lambda i, a: f"np.max({i[0]}, axis={a['axis']!r}, keepdims={a['keepdims']!r})", _no_vjp, jvp=rules.jvp_zero,
        doc="maximum treated as a constant (the shift of a stable softmax, exact there)"),
    "activation": rules.CallRule(
        lambda i, a: _ACTIVATION_NUMPY[a["fn"]].format(i[0]), _vjp_activation, jvp=_jvp_activation,
        doc="relu / tanh / sigmoid / exp whose adjoint reads the saved output (nothing recomputed)"),
    "erf": rules.CallRule(lambda i, a: f"_rt.nn.erf({i[0]})", _vjp_erf, jvp=_jvp_erf, doc="error function (GELU)"),
    "stop_gradient": rules.CallRule(lambda i, a: f"np.array({i[0]})", _no_vjp, jvp=rules.jvp_zero,
                                    doc="copy whose derivative is zero (detach)"),
}


# ================================================================ native lowerings (loop nests + BLAS)


def _alloc(low, c, ind):
    if c.ndim and low.needs_allocation(c):
        low.allocate(c, ind)


def _ints(shape):
    return [int(const_value(d)) for d in shape]


def _loops(low, extents, ind, hint):
    names = []
    for ext in extents:
        n = low.fresh(hint)
        low.line(f"for {n} in range({ext}):", ind)
        names.append(n)
        ind += 1
    return names, ind


def _linear_index(names, extents):
    text = names[0]
    for n, e in zip(names[1:], extents[1:]):
        text = f"({text}) * {e} + {n}"
    return text


def _positions(low, a, outs, ks, ind):
    """Input positions read by output position ``outs`` at kernel offset ``ks``."""
    pos = []
    for j, (o, k) in enumerate(zip(outs, ks)):
        p = low.fresh(f"i{j}")
        low.line(f"{p} = {o} * {a['stride'][j]} - {a['padding'][j][0]} + {k} * {a['dilation'][j]}", ind)
        pos.append(p)
    return pos


def _inside(pos, size):
    return " and ".join(f"0 <= {p} < {s}" for p, s in zip(pos, size))


def _im2col_loops(low, x, a, kernel, groups, cols, out, ind, scatter=None):
    """cols[g, (c, *k), (n, *out)] = x[n, g * cg + c, positions] (``cols`` is a scratch array,
    zeroed when first allocated, so entries for positions in the padding, never written, are
    0); with ``scatter`` the reverse:
    image[n, channel, positions] += cols[...]. Each output axis runs only over the positions
    inside the image for the current kernel offset, so the innermost loop has no test."""
    n, c, *size = _ints(x.shape) if scatter is None else scatter[1]
    cg = c // groups
    names, inner = _loops(low, [groups, cg] + list(kernel), ind, "w")
    g_, c_, ks = names[0], names[1], names[2:]
    bounds = []
    for j, k in enumerate(ks):
        st, pad, dil = a["stride"][j], a["padding"][j][0], a["dilation"][j]
        lo, hi = low.fresh("lo"), low.fresh("hi")
        low.line(f"{lo} = max(0, -(({k} * {dil} - {pad}) // {st}))", inner)
        low.line(f"{hi} = min({out[j]}, ({size[j]} - 1 + {pad} - {k} * {dil}) // {st} + 1)", inner)
        bounds.append((lo, hi))
    n_ = low.fresh("w")
    low.line(f"for {n_} in range({n}):", inner)
    inner += 1
    os_ = []
    for lo, hi in bounds:
        o = low.fresh("w")
        low.line(f"for {o} in range({lo}, {hi}):", inner)
        os_.append(o)
        inner += 1
    pos = _positions(low, a, os_, ks, inner)
    row = _linear_index([c_] + ks, [cg] + list(kernel))
    col = _linear_index([n_] + os_, [n] + list(out))
    image = [n_, f"({g_} * {cg} + {c_})"] + pos
    if scatter is None:
        low.line(f"{cols}[{g_}, {row}, {col}] = {low.elem(x, image, x.shape)}", inner)
    else:
        low.line(f"{scatter[0]}[{', '.join(image)}] += {cols}[{g_}, {row}, {col}]", inner)


def _cols_key(low, x, a, kernel, dtype):
    """What an im2col matrix depends on: the input view, the geometry, the kernel and the dtype."""
    geometry = (tuple(a["stride"]), tuple(map(tuple, a["padding"])), tuple(a["dilation"]), a["groups"])
    return ("im2col", low.view_src(x.ref), geometry, tuple(kernel), np.dtype(dtype).name)


def _conv_dims(low, s, x_shape, w_shape, out_shape):
    groups = s.attrs["groups"]
    o, cg, *kernel = w_shape
    n = x_shape[0]
    return groups, o, cg, kernel, n, list(out_shape[2:]), o // groups, cg * _prod(kernel)


def _rows_from(low, g, groups, og, rows, ind):
    """rows[group, o, (n, *out)] = g[n, group * og + o, *out]."""
    names, inner = low.nest(g.shape, ind, "r")
    gs = _ints(g.shape)
    col = _linear_index([names[0]] + names[2:], [gs[0]] + gs[2:])
    low.line(f"{rows}[{names[1]} // {og}, {names[1]} % {og}, {col}] = {low.elem(g, names, g.shape)}", inner)


def _lower_conv(low, s, ind):
    x, w = s.inputs
    c = s.outputs[0]
    groups, o, cg, kernel, n, out, og, rk = _conv_dims(low, s, _ints(x.shape), _ints(w.shape), _ints(c.shape))
    w2, gi = low.fresh("w2"), low.fresh("g")
    cols = low.scratch_array("cols", (groups, rk, n * _prod(out)), c.dtype, ind)
    _im2col_loops(low, x, s.attrs, kernel, groups, cols, out, ind)
    if low.nesting == 0 and isinstance(x, Read):
        low.once[_cols_key(low, x, s.attrs, kernel, c.dtype)] = cols
    low.line(f"{w2} = np.ascontiguousarray({native_calls._operand_array(low, w, ind)}).reshape(({groups}, {og}, "
             f"{rk}))", ind)
    y = low.scratch_array("y", (groups, og, n * _prod(out)), c.dtype, ind)
    low.line(f"for {gi} in range({groups}):", ind)
    low.line(f"np.dot({w2}[{gi}], {cols}[{gi}], {y}[{gi}])", ind + 1)
    _alloc(low, c, ind)
    names, inner = low.nest(c.shape, ind, "z")
    col = _linear_index([names[0]] + names[2:], [n] + out)
    low.line(f"{c.name}[{', '.join(names)}] = {y}[{names[1]} // {og}, {names[1]} % {og}, {col}]", inner)


def _lower_conv_grad_weight(low, s, ind):
    g, x = s.inputs
    c = s.outputs[0]
    groups, o, cg, kernel, n, out, og, rk = _conv_dims(low, s, _ints(x.shape), list(s.attrs["wshape"]),
                                                       _ints(g.shape))
    dt = dtype_src(c.dtype)
    gw, gi = low.fresh("gw"), low.fresh("g")
    # The forward convolution built this very im2col matrix if it ran once, at top level: the
    # reverse sweep hands this adjoint the input values that convolution read, and the scratch
    # buffer is its alone until the next call.
    key = _cols_key(low, x, s.attrs, kernel, c.dtype) if low.nesting == 0 and isinstance(x, Read) else None
    cols = low.once.get(key)
    if cols is None:
        cols = low.scratch_array("cols", (groups, rk, n * _prod(out)), c.dtype, ind)
        _im2col_loops(low, x, s.attrs, kernel, groups, cols, out, ind)
    rows = low.scratch_array("rows", (groups, og, n * _prod(out)), c.dtype, ind)
    _rows_from(low, g, groups, og, rows, ind)
    low.line(f"{gw} = np.empty(({groups}, {og}, {rk}), dtype={dt})", ind)     # fresh: the result views it
    low.line(f"for {gi} in range({groups}):", ind)
    low.line(f"np.dot({rows}[{gi}], {cols}[{gi}].T, {gw}[{gi}])", ind + 1)
    low.line(f"{c.name} = {gw}.reshape({low.shape_tuple(c.shape)})", ind)


def _lower_conv_grad_input(low, s, ind):
    g, w = s.inputs
    c = s.outputs[0]
    xshape = list(s.attrs["xshape"])
    groups, o, cg, kernel, n, out, og, rk = _conv_dims(low, s, xshape, _ints(w.shape), _ints(g.shape))
    w2, gi = low.fresh("w2"), low.fresh("g")
    rows = low.scratch_array("rows", (groups, og, n * _prod(out)), c.dtype, ind)
    _rows_from(low, g, groups, og, rows, ind)
    low.line(f"{w2} = np.ascontiguousarray({native_calls._operand_array(low, w, ind)}).reshape(({groups}, {og}, "
             f"{rk}))", ind)
    gcols = low.scratch_array("gcols", (groups, rk, n * _prod(out)), c.dtype, ind)
    low.line(f"for {gi} in range({groups}):", ind)
    low.line(f"np.dot({w2}[{gi}].T, {rows}[{gi}], {gcols}[{gi}])", ind + 1)
    _alloc(low, c, ind)
    names, inner = low.nest(c.shape, ind, "z")
    low.line(f"{c.name}[{', '.join(names)}] = 0.0", inner)
    _im2col_loops(low, None, s.attrs, kernel, groups, gcols, out, ind, scatter=(c.name, xshape))


def _lower_pool(low, s, ind):
    x, c = s.inputs[0], s.outputs[0]
    a = s.attrs
    size = _ints(x.shape)[2:]
    _alloc(low, c, ind)
    names, inner = low.nest(c.shape, ind, "o")
    acc = low.fresh("acc")
    low.line(f"{acc} = {'-np.inf' if a['mode'] == 'max' else '0.0'}", inner)
    ks, kin = _loops(low, a["kernel"], inner, "k")
    pos = _positions(low, a, names[2:], ks, kin)
    low.line(f"if {_inside(pos, size)}:", kin)
    v = low.elem(x, names[:2] + pos, x.shape)
    low.line(f"{acc} = max({acc}, {v})" if a["mode"] == "max" else f"{acc} += {v}", kin + 1)
    low.line(f"{c.name}[{', '.join(names)}] = {acc}", inner)


def _lower_pool_grad(low, s, ind):
    g, x, _ = s.inputs
    c = s.outputs[0]
    a = s.attrs
    size = _ints(x.shape)[2:]
    _alloc(low, c, ind)
    names, inner = low.nest(c.shape, ind, "z")
    low.line(f"{c.name}[{', '.join(names)}] = 0.0", inner)
    names, inner = low.nest(g.shape, ind, "o")
    gval = low.elem(g, names, g.shape)
    if a["mode"] == "sum":
        ks, kin = _loops(low, a["kernel"], inner, "k")
        pos = _positions(low, a, names[2:], ks, kin)
        low.line(f"if {_inside(pos, size)}:", kin)
        low.line(f"{c.name}[{', '.join(names[:2] + pos)}] += {gval}", kin + 1)
        return
    at = _window_argmax(low, a, x, names, size, inner)
    low.line(f"if {at[0]} >= 0:", inner)
    low.line(f"{c.name}[{', '.join(names[:2] + at)}] += {gval}", inner + 1)


def _window_argmax(low, a, x, names, size, inner):
    """Lines finding the position of the first largest element of ``x`` in the pooling window of
    output element ``names``; returns the names holding it (-1 where the window lies outside)."""
    best, at = low.fresh("best"), [low.fresh("at") for _ in size]
    low.line(f"{best} = -np.inf", inner)
    for p in at:
        low.line(f"{p} = -1", inner)
    ks, kin = _loops(low, a["kernel"], inner, "k")
    pos = _positions(low, a, names[2:], ks, kin)
    low.line(f"if {_inside(pos, size)}:", kin)
    low.line(f"if {low.elem(x, names[:2] + pos, x.shape)} > {best}:", kin + 1)
    low.line(f"{best} = {low.elem(x, names[:2] + pos, x.shape)}", kin + 2)
    for p, q in zip(at, pos):
        low.line(f"{p} = {q}", kin + 2)
    return at


def _lower_pool_jvp(low, s, ind):
    t, x = s.inputs
    c = s.outputs[0]
    a = s.attrs
    size = _ints(x.shape)[2:]
    _alloc(low, c, ind)
    names, inner = low.nest(c.shape, ind, "o")
    at = _window_argmax(low, a, x, names, size, inner)
    low.line(f"{c.name}[{', '.join(names)}] = {low.elem(t, names[:2] + at, t.shape)} if {at[0]} >= 0 else 0.0",
             inner)


def _argmax_loop(low, x, axis, outer, ind):
    """Emit a scan for the first maximum of ``x`` along ``axis`` at the outer position; returns its names."""
    best, arg, k = low.fresh("best"), low.fresh("arg"), low.fresh("k")
    n = int(const_value(x.shape[axis]))

    def at(kk):
        idx = list(outer)
        idx.insert(axis, kk)
        return low.elem(x, idx, x.shape)
    low.line(f"{best} = {at('0')}", ind)
    low.line(f"{arg} = 0", ind)
    low.line(f"for {k} in range(1, {n}):", ind)
    low.line(f"if {at(k)} > {best}:", ind + 1)
    low.line(f"{best} = {at(k)}", ind + 2)
    low.line(f"{arg} = {k}", ind + 2)
    return best, arg


def _lower_max_first(low, s, ind):
    x, c = s.inputs[0], s.outputs[0]
    _alloc(low, c, ind)
    names, inner = low.nest(c.shape, ind, "o")
    best, _ = _argmax_loop(low, x, s.attrs["axis"], names, inner)
    low.line(f"{c.name}[{', '.join(names)}] = {best}" if c.ndim else f"{c.name} = {best}", inner)


def _lower_max_first_grad(low, s, ind):
    g, x = s.inputs
    c = s.outputs[0]
    axis = s.attrs["axis"]
    _alloc(low, c, ind)
    names, inner = low.nest(g.shape, ind, "o")
    _, arg = _argmax_loop(low, x, axis, names, inner)
    k = low.fresh("k")
    low.line(f"for {k} in range({int(const_value(x.shape[axis]))}):", inner)
    idx = list(names)
    idx.insert(axis, k)
    gval = low.elem(g, names, g.shape) if g.shape else low.src(g)
    low.line(f"{c.name}[{', '.join(idx)}] = {gval} if {k} == {arg} else 0.0", inner + 1)


def _lower_linear(low, s, ind):
    x, w = s.inputs
    xs, ws = native_calls._operand_array(low, x, ind), native_calls._operand_array(low, w, ind)
    low.line(f"{s.outputs[0].name} = np.dot({xs}, {ws}.T)", ind)


def _lower_max_const(low, s, ind):
    native_calls.CALL_LOWERING["max"](low, Call("max", s.inputs, s.outputs, s.attrs, s.loc), ind)


def _lower_elementwise(fn):
    def lower(low, s, ind):
        x, c = s.inputs[0], s.outputs[0]
        if c.ndim == 0:
            low.line(f"{c.name} = {fn.format(low.src(x))}", ind)
            return
        _alloc(low, c, ind)
        names, inner = low.nest(c.shape, ind)
        low.line(f"{c.name}[{', '.join(names)}] = {fn.format(low.elem(x, names, c.shape))}", inner)
    return lower


def _lower_activation(low, s, ind):
    c = s.outputs[0]
    expr = _ACTIVATION_EXPR[s.attrs["fn"]](s.inputs[0])
    low.assign(Assign(Ref(c), op(c.dtype.name, expr) if expr.dtype != c.dtype else expr), ind)


def _lower_erf(low, s, ind):
    from .backends import native_runtime
    if not hasattr(native_runtime, "nn_erf"):        # math.erf compiled once, callable from generated code
        import numba
        native_runtime.nn_erf = numba.njit(cache=True, nogil=True)(_scalar_erf)
    _lower_elementwise("_rt.nn_erf({})")(low, s, ind)


def _scalar_erf(v):
    return math.erf(v)


NN_LOWERING = {
    "linear": _lower_linear, "conv": _lower_conv, "conv_grad_input": _lower_conv_grad_input,
    "conv_grad_weight": _lower_conv_grad_weight, "pool": _lower_pool, "pool_grad": _lower_pool_grad,
    "pool_jvp": _lower_pool_jvp,
    "max_first": _lower_max_first, "max_first_grad": _lower_max_first_grad, "max_const": _lower_max_const,
    "activation": _lower_activation, "erf": _lower_erf, "stop_gradient": _lower_elementwise("{}"),
}
