"""ONNX frontend: an ONNX model (opset 13 or newer) into the IR.

Every float initializer is a parameter (an argument of the program, read from
``prog.initializers`` on every call, with a gradient); integer initializers and ``Constant``
nodes are constants. Shapes are fixed per call signature, so shape arithmetic (``Shape``,
``Concat`` of constants, ``Range``, ...) is evaluated at capture time by ONNX's own reference
implementation; every other node becomes IR through ``NNBuilder``, the same layer builder the
PyTorch frontend uses.
"""
from __future__ import annotations

import numpy as np

from ..errors import FlowgradError, UnsupportedError
from ..ir.core import Expr, Read, op
from ..nn_builder import ModelProgram, NNBuilder


class _NodeLoc:
    """Where an ONNX error happened: the node's name and type."""

    def __init__(self, node):
        self.name, self.op_type = node.name or "<unnamed>", node.op_type

    def __str__(self):
        return f"ONNX node '{self.name}' ({self.op_type})"


def _attrs(node):
    from onnx import helper
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


def _const(v, what, loc):
    if not isinstance(v, np.ndarray):
        raise UnsupportedError(f"{loc}: unsupported computed {what}: it must be a constant (an initializer, a "
                               "Constant node or shape arithmetic)")
    return v


def _ints(v):
    return [int(x) for x in np.asarray(v).reshape(-1)]


# ---------------------------------------------------------------- op handlers
# handler(b, loc, inputs, attrs) -> one value or a list (one per output); inputs are IR
# expressions, NumPy constants, or None for an omitted optional input.


def _binary(name):
    return lambda b, loc, ins, at: op(name, b.to_expr(ins[0]), b.to_expr(ins[1]))


def _unary(name):
    return lambda b, loc, ins, at: op(name, b.to_expr(ins[0]))


def _variadic(name):
    def handler(b, loc, ins, at):
        out = b.to_expr(ins[0])
        for v in ins[1:]:
            out = op(name, out, b.to_expr(v))
        return out
    return handler


def _gemm(b, loc, ins, at):
    a, w = ins[0], ins[1]
    alpha, beta = at.get("alpha", 1.0), at.get("beta", 1.0)
    if at.get("transA", 0):
        a = b.permute(a, (1, 0))
    y = b.linear(a, w) if at.get("transB", 0) else b.matmul(a, w)
    if alpha != 1.0:
        y = y * alpha
    if len(ins) > 2 and ins[2] is not None:
        y = y + (b.to_expr(ins[2]) * beta if beta != 1.0 else b.to_expr(ins[2]))
    return y


def _trilu(b, loc, ins, at):
    x = b.read(ins[0])
    k = _ints(_const(ins[1], "Trilu diagonal", loc))[0] if len(ins) > 1 and ins[1] is not None else 0
    return b.call("triu" if at.get("upper", 1) else "tril", [x], b.shape(x), x.dtype, {"k": k})


def _cumsum(b, loc, ins, at):
    if at.get("exclusive", 0) or at.get("reverse", 0):
        raise UnsupportedError(f"{loc}: unsupported CumSum with exclusive or reverse set")
    x = b.read(ins[0])
    axis = _ints(_const(ins[1], "CumSum axis", loc))[0] % len(x.shape)
    return b.call("cumsum", [x], b.shape(x), x.dtype, {"axis": axis})


def _mod(b, loc, ins, at):
    if at.get("fmod", 0):
        raise UnsupportedError(f"{loc}: unsupported Mod with fmod=1 (C's remainder): use fmod=0 (Python's)")
    return op("mod", b.to_expr(ins[0]), b.to_expr(ins[1]))


def _scatter_nd(b, loc, ins, at, elements=None):
    """``data`` with ``updates`` written (``reduction="add"``: added) at the index tuples of the
    last axis of ``indices``, a constant (as exporters write slice assignments); ``elements``:
    ScatterElements along that axis instead (``np.put_along_axis``)."""
    from . import indexing
    from .numpy_api import _add_at
    reduction = at.get("reduction", "none")
    if isinstance(reduction, bytes):
        reduction = reduction.decode()
    if reduction not in ("none", "add"):
        raise UnsupportedError(f"{loc}: unsupported ScatterND reduction {reduction!r}")
    ind = np.asarray(_const(ins[1], f"{'ScatterND' if elements is None else 'ScatterElements'} indices", loc),
                     dtype=np.int64)
    if elements is None:
        positions = [ind[..., j] for j in range(ind.shape[-1])]
    else:                           # np.put_along_axis: the other axes index themselves
        positions = list(np.indices(ind.shape))
        positions[elements % ind.ndim] = ind
    idx = tuple(b.const_array(np.ascontiguousarray(p)) for p in positions)
    y = b.materialize(b.to_expr(ins[0]), "scattered")
    if reduction == "add":
        _add_at(b, loc, y, idx, ins[2])
    else:
        indexing.setitem(b, y, idx, b.to_expr(ins[2]), loc)
    return y


def _pads(at, nd, size=None, kernel=None, stride=None, dilation=None):
    auto = at.get("auto_pad", "NOTSET")
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for s, k, st, d in zip(size, kernel, stride, dilation):
            out = -(-s // st)
            total = max((out - 1) * st + d * (k - 1) + 1 - s, 0)
            lo = total // 2 if auto == "SAME_UPPER" else total - total // 2
            pads.append((lo, total - lo))
        return pads
    p = at.get("pads", [0] * (2 * nd))
    return [(p[j], p[j + nd]) for j in range(nd)]


def _conv(b, loc, ins, at):
    x, w = b.read(ins[0]), b.read(ins[1])
    kernel = list(at.get("kernel_shape") or b.shape(w)[2:])
    nd = len(kernel)
    stride, dil = at.get("strides", [1] * nd), at.get("dilations", [1] * nd)
    pads = _pads(at, nd, b.shape(x)[2:], kernel, stride, dil)
    return b.conv(x, w, ins[2] if len(ins) > 2 else None, stride, pads, dil, at.get("group", 1))


def _conv_transpose(b, loc, ins, at):
    x, w = b.read(ins[0]), b.read(ins[1])
    kernel = list(at.get("kernel_shape") or b.shape(w)[2:])
    nd = len(kernel)
    if "output_shape" in at or at.get("auto_pad", "NOTSET") not in ("NOTSET", "VALID"):
        raise UnsupportedError(f"{loc}: unsupported ConvTranspose with output_shape or auto_pad; give pads")
    pads = list(at.get("pads", [0] * 2 * nd))
    return b.conv_transpose(x, w, ins[2] if len(ins) > 2 else None, at.get("strides", [1] * nd),
                            list(zip(pads[:nd], pads[nd:])), at.get("output_padding", [0] * nd),
                            at.get("dilations", [1] * nd), at.get("group", 1))


def _pool(kind):
    def handler(b, loc, ins, at):
        x = b.read(ins[0])
        kernel = list(at["kernel_shape"])
        nd = len(kernel)
        stride, dil = at.get("strides", [1] * nd), at.get("dilations", [1] * nd)
        pads = _pads(at, nd, b.shape(x)[2:], kernel, stride, dil)
        ceil = bool(at.get("ceil_mode", 0))
        if kind == "max":
            return [b.max_pool(x, kernel, stride, pads, dil, ceil), None]
        if any(d != 1 for d in dil):
            raise UnsupportedError(f"{loc}: unsupported dilated average pooling")
        return b.avg_pool(x, kernel, stride, pads, ceil, bool(at.get("count_include_pad", 0)))
    return handler


def _global_pool(kind):
    def handler(b, loc, ins, at):
        x = b.to_expr(ins[0])
        axes = tuple(range(2, len(x.shape)))
        return b.reduce("mean" if kind == "avg" else "max", x, axes, True)
    return handler


def _batch_norm(b, loc, ins, at):
    if at.get("training_mode", 0):
        raise UnsupportedError(f"{loc}: unsupported BatchNormalization in training mode: export the model in "
                               "inference mode (model.eval())")
    return [b.batch_norm(ins[0], ins[1], ins[2], ins[3], ins[4], at.get("epsilon", 1e-5)), None, None]


def _layer_norm(b, loc, ins, at):
    x = b.to_expr(ins[0])
    axis = at.get("axis", -1) % len(x.shape)
    return [b.layer_norm(x, len(x.shape) - axis, ins[1], ins[2] if len(ins) > 2 else None,
                         at.get("epsilon", 1e-5)), None, None]


def _instance_norm(b, loc, ins, at):
    x = b.to_expr(ins[0])
    nd = len(x.shape)
    y = b.layer_norm(x, nd - 2, None, None, at.get("epsilon", 1e-5))
    per_channel = (slice(None),) + (None,) * (nd - 2)
    return y * b.view(ins[1], per_channel) + b.view(ins[2], per_channel)


def _softmax(log):
    def handler(b, loc, ins, at):
        axis = at.get("axis", -1)
        return b.log_softmax(ins[0], axis) if log else b.softmax(ins[0], axis)
    return handler


def _reshape(b, loc, ins, at):
    x = b.to_expr(ins[0])
    shape = _ints(_const(ins[1], "shape", loc))
    cur = b.shape(x)
    if not at.get("allowzero", 0):
        shape = [cur[k] if d == 0 else d for k, d in enumerate(shape)]
    return b.reshape(x, shape)


def _flatten(b, loc, ins, at):
    x = b.to_expr(ins[0])
    shape = b.shape(x)
    axis = at.get("axis", 1) % (len(shape) + 1) if shape else 0
    return b.reshape(x, (int(np.prod(shape[:axis])), int(np.prod(shape[axis:]))))


def _axes(ins, at, k=1):
    if len(ins) > k and ins[k] is not None:
        return _ints(ins[k])
    return at.get("axes")


def _squeeze(b, loc, ins, at):
    return b.squeeze(ins[0], _axes(ins, at) or None)      # no axes (or an empty list): every length-1 one


def _unsqueeze(b, loc, ins, at):
    x = b.to_expr(ins[0])
    axes = sorted(a % (len(x.shape) + len(_axes(ins, at))) for a in _axes(ins, at))
    for a in axes:
        x = b.unsqueeze(x, a)
    return x


def _slice(b, loc, ins, at):
    x = b.to_expr(ins[0])
    n = len(x.shape)
    starts, ends = _ints(_const(ins[1], "slice start", loc)), _ints(_const(ins[2], "slice end", loc))
    axes = _ints(ins[3]) if len(ins) > 3 and ins[3] is not None else list(range(len(starts)))
    steps = _ints(ins[4]) if len(ins) > 4 and ins[4] is not None else [1] * len(starts)
    index = [slice(None)] * n
    for s, e, a, st in zip(starts, ends, axes, steps):
        size = b.shape(x)[a % n]
        s, e = max(min(s, size), -size - 1), max(min(e, size), -size - 1)
        index[a % n] = slice(s, None if (st < 0 and e < -size) else e, st)
    return b.view(x, tuple(index))


def _gather(b, loc, ins, at):
    x, idx = b.to_expr(ins[0]), ins[1]
    axis = at.get("axis", 0) % len(x.shape)
    if isinstance(idx, np.ndarray) and idx.ndim == 0:
        return b.view(x, (slice(None),) * axis + (int(idx),))
    from . import indexing
    return indexing.getitem(b, b.whole(x), (slice(None),) * axis + (b.whole(b.to_expr(idx), "idx"),), loc)


def _gather_nd(b, loc, ins, at):
    if at.get("batch_dims", 0):
        raise UnsupportedError(f"{loc}: unsupported GatherND with batch_dims")
    x, idx = b.to_expr(ins[0]), ins[1]
    depth = np.shape(idx)[-1] if isinstance(idx, np.ndarray) else b.shape(b.to_expr(idx))[-1]
    parts = tuple(np.ascontiguousarray(idx[..., j]) if isinstance(idx, np.ndarray) else
                  b.whole(b.view(idx, (Ellipsis, j)), "idx") for j in range(depth))
    from . import indexing
    return indexing.getitem(b, b.whole(x), parts, loc)


def _split(b, loc, ins, at, nout):
    x = b.to_expr(ins[0])
    axis = at.get("axis", 0) % len(x.shape)
    total = b.shape(x)[axis]
    if len(ins) > 1 and ins[1] is not None:
        sizes = _ints(ins[1])
    elif "split" in at:
        sizes = list(at["split"])
    else:
        chunk = -(-total // nout)
        sizes = [min(chunk, total - k * chunk) for k in range(nout)]
    out, off = [], 0
    for s in sizes:
        out.append(b.view(x, (slice(None),) * axis + (slice(off, off + s),)))
        off += s
    return out


def _pad(b, loc, ins, at):
    """Pad: the NumPy frontend's np.pad (constant, edge, reflect, wrap), widths given per axis."""
    from .numpy_composites import _pad as pad
    x = b.to_expr(ins[0])
    n = len(x.shape)
    pads = _ints(_const(ins[1], "Pad pads", loc)) if len(ins) > 1 else _ints(at.get("pads", []))
    axes = list(range(n)) if len(ins) < 4 or ins[3] is None else \
        [a % n for a in _ints(_const(ins[3], "Pad axes", loc))]
    widths = [(0, 0)] * n
    for k, a in enumerate(axes):
        widths[a] = (pads[k], pads[k + len(axes)])
    if any(w < 0 for pair in widths for w in pair):
        raise UnsupportedError(f"{loc}: unsupported Pad with negative pads (a crop); slice the input instead")
    value = ins[2] if len(ins) > 2 and ins[2] is not None else at.get("value", 0.0)
    if isinstance(value, np.ndarray):
        value = value.reshape(()).item() if value.size == 1 else value
    return pad(b, loc, x, widths, mode=at.get("mode", "constant"), constant_values=value)


def _gather_elements(b, loc, ins, at):
    from .numpy_composites import gather_along
    x, idx = b.to_expr(ins[0]), b.to_expr(ins[1])
    return gather_along(b, loc, b.whole(x), idx, at.get("axis", 0), b.shape(idx))


def _reduce_with(name, before=None, after=None):
    """ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum: ``after(sum(before(x)))``."""
    def handler(b, loc, ins, at):
        x = b.to_expr(ins[0])
        out = _reduce(name)(b, loc, [before(x) if before else x] + list(ins[1:]), at)
        return after(out) if after else out
    return handler


def _reduce_log_sum_exp(b, loc, ins, at):
    axes = _axes(ins, at)
    if not axes and at.get("noop_with_empty_axes", 0):
        return b.to_expr(ins[0])
    return b.logsumexp(ins[0], axes or None, bool(at.get("keepdims", 1)))


def _is_inf(b, loc, ins, at):
    x = b.to_expr(ins[0])
    pos = op("equal", x, np.inf) if at.get("detect_positive", 1) else None
    neg = op("equal", x, -np.inf) if at.get("detect_negative", 1) else None
    if pos is None or neg is None:
        return pos if neg is None else neg
    return op("logical_or", pos, neg)


def _expand(b, loc, ins, at):
    x = b.to_expr(ins[0])
    shape = _ints(_const(ins[1], "shape", loc))
    cur = (1,) * (len(shape) - len(x.shape)) + b.shape(x)
    target = [max(c, s) for c, s in zip(cur, (1,) * (len(cur) - len(shape)) + tuple(shape))]
    return b.expand(x, target)


def _reduce(name):
    def handler(b, loc, ins, at):
        x = b.to_expr(ins[0])
        axes = _axes(ins, at)
        if not axes:
            if at.get("noop_with_empty_axes", 0):
                return x
            axes = None
        return b.reduce(name, x, axes, bool(at.get("keepdims", 1)))
    return handler


def _clip(b, loc, ins, at):
    x = b.to_expr(ins[0])
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else at.get("min")
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else at.get("max")
    if lo is not None:
        x = op("maximum", x, b.to_expr(lo))
    if hi is not None:
        x = op("minimum", x, b.to_expr(hi))
    return x


def _cast(b, loc, ins, at):
    from onnx import helper
    return b.cast(ins[0], helper.tensor_dtype_to_np_dtype(at["to"]))


def _leaky_relu(b, loc, ins, at):
    x = b.read(ins[0])
    return op("where", op("greater", x, 0), x, x * at.get("alpha", 0.01))


def _elu(b, loc, ins, at):
    x = b.read(ins[0])
    return op("where", op("greater", x, 0), x, at.get("alpha", 1.0) * op("expm1", x))


def _hard_sigmoid(b, loc, ins, at):
    x = b.to_expr(ins[0])
    return op("minimum", op("maximum", x * at.get("alpha", 0.2) + at.get("beta", 0.5), 0.0), 1.0)


def _gelu(b, loc, ins, at):
    return b.gelu(ins[0], at.get("approximate", "none"))


def _einsum(b, loc, ins, at):
    from .numpy_api import _einsum as einsum
    return einsum(b, loc, at["equation"], *[b.read(v) for v in ins])


def _ce_loss(b, loc, ins, at):
    red = at.get("reduction", "mean")
    return [b.cross_entropy(ins[0], ins[1], ins[2] if len(ins) > 2 else None, red, at.get("ignore_index", -100)),
            None]


def _nll_loss(b, loc, ins, at):
    return b.nll(ins[0], ins[1], ins[2] if len(ins) > 2 else None, at.get("reduction", "mean"),
                 at.get("ignore_index", -100))


def _dropout(b, loc, ins, at):
    if len(ins) > 2 and isinstance(ins[2], np.ndarray) and bool(ins[2]):
        raise UnsupportedError(f"{loc}: unsupported Dropout in training mode (it is random)")
    return [b.to_expr(ins[0]), None]


HANDLERS = {
    "Add": _binary("add"), "Sub": _binary("subtract"), "Mul": _binary("multiply"), "Div": _binary("divide"),
    "Pow": _binary("power"), "Neg": _unary("negative"), "Exp": _unary("exp"), "Log": _unary("log"),
    "Sqrt": _unary("sqrt"), "Reciprocal": lambda b, loc, ins, at: 1.0 / b.to_expr(ins[0]), "Abs": _unary("abs"),
    "Sin": _unary("sin"), "Cos": _unary("cos"), "Tanh": lambda b, loc, ins, at: b.activation("tanh", ins[0]),
    "Sigmoid": lambda b, loc, ins, at: b.sigmoid(ins[0]), "Relu": lambda b, loc, ins, at: b.relu(ins[0]),
    "LeakyRelu": _leaky_relu, "Elu": _elu, "Softplus": lambda b, loc, ins, at: b.softplus(ins[0]),
    "Erf": lambda b, loc, ins, at: b.erf(ins[0]), "Gelu": _gelu, "HardSigmoid": _hard_sigmoid,
    "HardSwish": lambda b, loc, ins, at: b.read(ins[0]) * _hard_sigmoid(b, loc, [b.read(ins[0])],
                                                                        {"alpha": 1 / 6, "beta": 0.5}),
    "Mish": lambda b, loc, ins, at: b.read(ins[0]) * op("tanh", b.softplus(b.read(ins[0]))),
    "Clip": _clip, "Max": _variadic("maximum"), "Min": _variadic("minimum"), "Sum": _variadic("add"),
    "Where": lambda b, loc, ins, at: op("where", b.to_expr(ins[0]), b.to_expr(ins[1]), b.to_expr(ins[2])),
    "Equal": _binary("equal"), "Less": _binary("less"), "Greater": _binary("greater"),
    "LessOrEqual": _binary("less_equal"), "GreaterOrEqual": _binary("greater_equal"), "Not": _unary("logical_not"),
    "And": _binary("logical_and"), "Or": _binary("logical_or"), "Floor": _unary("floor"), "Ceil": _unary("ceil"),
    "Round": _unary("round"), "Sign": _unary("sign"), "Cast": _cast,
    "CastLike": lambda b, loc, ins, at: b.cast(ins[0], b.to_expr(ins[1]).dtype),
    "Identity": lambda b, loc, ins, at: ins[0], "Dropout": _dropout,
    "MatMul": lambda b, loc, ins, at: b.matmul(ins[0], ins[1]), "Gemm": _gemm, "Conv": _conv,
    "ConvTranspose": _conv_transpose,
    "MaxPool": _pool("max"), "AveragePool": _pool("avg"), "GlobalAveragePool": _global_pool("avg"),
    "GlobalMaxPool": _global_pool("max"), "BatchNormalization": _batch_norm, "LayerNormalization": _layer_norm,
    "InstanceNormalization": _instance_norm,
    "Softmax": _softmax(False), "LogSoftmax": _softmax(True), "Reshape": _reshape, "Flatten": _flatten,
    "Transpose": lambda b, loc, ins, at: b.permute(ins[0], at.get("perm") or
                                                   list(reversed(range(len(b.to_expr(ins[0]).shape))))),
    "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Concat": lambda b, loc, ins, at: b.concat(ins, at["axis"]),
    "Slice": _slice, "Gather": _gather, "GatherND": _gather_nd, "Expand": _expand, "ReduceSum": _reduce("sum"),
    "ReduceMean": _reduce("mean"), "ReduceMax": _reduce("max"), "ReduceMin": _reduce("min"),
    "ReduceProd": _reduce("prod"), "Einsum": _einsum, "SoftmaxCrossEntropyLoss": _ce_loss,
    "NegativeLogLikelihoodLoss": _nll_loss, "Trilu": _trilu, "CumSum": _cumsum, "Mod": _mod,
    "Atan": _unary("arctan"), "Asin": _unary("arcsin"), "Acos": _unary("arccos"), "Tan": _unary("tan"),
    "Sinh": _unary("sinh"), "Cosh": _unary("cosh"), "Asinh": _unary("arcsinh"), "Acosh": _unary("arccosh"),
    "Atanh": _unary("arctanh"), "IsNaN": _unary("isnan"), "IsInf": _is_inf, "Xor": _binary("not_equal"),
    "Softsign": lambda b, loc, ins, at: b.to_expr(ins[0]) / (1.0 + op("abs", b.to_expr(ins[0]))),
    "Pad": _pad, "GatherElements": _gather_elements, "ReduceLogSumExp": _reduce_log_sum_exp,
    "ReduceL1": _reduce_with("sum", lambda x: op("abs", x)),
    "ReduceL2": _reduce_with("sum", lambda x: x * x, lambda s: op("sqrt", s)),
    "ReduceSumSquare": _reduce_with("sum", lambda x: x * x),
    "ReduceLogSum": _reduce_with("sum", after=lambda s: op("log", s)), "ScatterND": _scatter_nd,
    "ScatterElements": lambda b, loc, ins, at: _scatter_nd(b, loc, ins, at, elements=at.get("axis", 0)),
}
_MULTI = {"Split"}      # handlers that need the number of outputs
# Shape arithmetic: evaluated at capture time (shapes are fixed per call signature).
_SHAPE_OPS = {"Constant", "Shape", "Size", "ConstantOfShape", "Range", "Tile", "NonZero"}


def _shape_of(b, loc, node, ins, at):
    x = b.to_expr(ins[0])
    shape = np.asarray(b.shape(x), dtype=np.int64)
    if node.op_type == "Size":
        return np.asarray(shape.prod(), dtype=np.int64)
    return shape[at.get("start", 0):at.get("end", None)]


def supported_ops():
    """The ONNX operators the frontend lowers (shape arithmetic on constants is evaluated as well)."""
    return sorted(set(HANDLERS) | _MULTI | _SHAPE_OPS)


# ---------------------------------------------------------------- graph -> IR


def _load(model):
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_model_from_string(bytes(model))
    return onnx.load(str(model))


def _identifier(name, used):
    base = "".join(ch if ch.isalnum() or ch == "_" else "_" for ch in name) or "input"
    if base[0].isdigit():
        base = "input_" + base
    out, k = base, 1
    while out in used:
        out, k = f"{base}_{k}", k + 1
    used.add(out)
    return out


class OnnxProgram(ModelProgram):
    """An ONNX model as a flowgrad program; see ``flowgrad.from_onnx``."""

    kind = "ONNX"

    def __init__(self, model, backend=None):
        from onnx import numpy_helper
        self.model = _load(model)
        graph = self.model.graph
        opset = {o.domain or "": o.version for o in self.model.opset_import}
        if opset.get("", 13) < 13:
            raise UnsupportedError(f"unsupported ONNX opset {opset['']}: flowgrad reads opset 13 or newer "
                                   "(convert with onnx.version_converter)")
        self.initializers = {}
        self.constants = {}
        for t in graph.initializer:
            value = numpy_helper.to_array(t)
            (self.initializers if value.dtype.kind == "f" else self.constants)[t.name] = value
        self.param_names = list(self.initializers)
        bad = sorted({f"{n.op_type} (node '{n.name}')" for n in graph.node
                      if n.op_type not in supported_ops() or n.domain not in ("", "ai.onnx")})
        if bad:
            raise UnsupportedError(f"unsupported ONNX operators: {', '.join(bad)}; flowgrad supports: "
                                   f"{', '.join(supported_ops())}")
        if len(graph.output) != 1:
            raise UnsupportedError(f"unsupported ONNX model with {len(graph.output)} outputs: export one output "
                                   "(e.g. the loss)")
        known = set(self.initializers) | set(self.constants)
        self.graph_inputs = [i.name for i in graph.input if i.name not in known]
        used = set()
        super().__init__(_identifier(graph.name or "onnx_model", set()),
                         [_identifier(n, used) for n in self.graph_inputs], backend)

    def __reduce__(self):
        # pickled (to another process, a Dask worker): the model's bytes and the initializers as
        # they are now (a caller may have updated them); captured and compiled again there
        return _restore_onnx_program, (self.model.SerializeToString(), self.initializers, self.backend)

    def _param_value(self, name):
        return self.initializers[name]

    def _build(self, arrays):
        graph = self.model.graph
        uses = {}
        for node in graph.node:
            for n in node.input:
                uses[n] = uses.get(n, 0) + 1
        b = NNBuilder(self.__name__)
        env = {"": None}
        for k, (name, a) in enumerate(zip(self.graph_inputs, arrays)):
            env[name] = b.arg(self.input_names[k], a.dtype, a.shape, ("input", k), key=self.input_names[k])
        for name, v in self.initializers.items():
            env[name] = b.arg(name, v.dtype, v.shape, ("param", name), key="param:" + name)
        env.update(self.constants)
        for node in graph.node:
            loc = _NodeLoc(node)
            b.loc = loc
            ins = [env[n] for n in node.input]
            at = _attrs(node)
            if node.op_type == "Constant":
                outs = [_constant(at, loc)]
            elif all(v is None or isinstance(v, np.ndarray) for v in ins):
                outs = _fold(node, ins, self.model)
            elif node.op_type == "Split":
                outs = _split(b, loc, ins, at, len(node.output))
            elif node.op_type in ("Shape", "Size"):
                outs = [_shape_of(b, loc, node, ins, at)]
            elif node.op_type not in HANDLERS:
                raise UnsupportedError(f"{loc}: unsupported {node.op_type} of a computed tensor: flowgrad evaluates "
                                       f"{node.op_type} only on constants; it supports: {', '.join(supported_ops())}")
            else:
                try:
                    outs = HANDLERS[node.op_type](b, loc, ins, at)
                except FlowgradError:
                    raise
                except (TypeError, KeyError, IndexError, ValueError) as exc:
                    raise UnsupportedError(f"{loc}: unsupported inputs or attributes: {exc}") from None
            if not isinstance(outs, list):
                outs = [outs]
            for name, v in zip(node.output, outs):
                if isinstance(v, Expr) and not isinstance(v, Read) and uses.get(name, 0) > 1:
                    v = b.read(v, _safe(name))      # an expression used twice is computed once
                env[name] = v
        out = env[graph.output[0].name]
        if isinstance(out, np.ndarray):
            out = b.materialize(b.to_expr(out), "result")
        return b, out


def _restore_onnx_program(model_bytes, initializers, backend):
    """An ``OnnxProgram`` unpickled, with the initializers it had when pickled."""
    prog = OnnxProgram(model_bytes, backend)
    prog.initializers.update(initializers)
    return prog


def _safe(name):
    return "".join(ch if ch.isalnum() else "_" for ch in name).strip("_") or "t"


def _constant(at, loc):
    from onnx import numpy_helper
    if "value" in at:
        return numpy_helper.to_array(at["value"])
    for key, dt in (("value_float", np.float32), ("value_int", np.int64)):
        if key in at:
            return np.asarray(at[key], dtype=dt)
    for key, dt in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in at:
            return np.asarray(list(at[key]), dtype=dt)
    raise UnsupportedError(f"{loc}: unsupported Constant attribute {sorted(at)}")


def _fold(node, ins, model):
    """A node whose inputs are all constants, evaluated by ONNX's reference implementation."""
    from onnx.reference import ReferenceEvaluator
    feeds = {n: v for n, v in zip(node.input, ins) if n}
    try:
        out = ReferenceEvaluator(node, opsets={o.domain or "": o.version for o in model.opset_import}) \
            .run(None, feeds)
    except Exception as exc:  # noqa: BLE001 - report any evaluator failure as the model's error
        raise UnsupportedError(f"{_NodeLoc(node)}: could not evaluate constant node: {exc}") from None
    return [np.asarray(v) for v in out]


def from_onnx(model, backend=None):
    """Load an ONNX model (a path, bytes or ``onnx.ModelProto``, opset 13+) as a flowgrad program.

    Args:
      model: the model; every float initializer is a trainable parameter.
      backend: ``"numpy"`` (default) or ``"native"``.

    Returns:
      A program with the calling convention of ``flowgrad.from_torch``: ``prog(*inputs)`` runs
      the model with the current ``prog.initializers``; ``flowgrad.vjp(prog, *inputs)`` returns
      ``(output, pullback)``, and ``pullback(cotangent)`` returns ``(input_grads, param_grads)``
      with ``param_grads`` keyed by initializer name.

    Example:
      >>> prog = flowgrad.from_onnx("model.onnx")                              # doctest: +SKIP
      >>> out, pullback = flowgrad.vjp(prog, x)                                # doctest: +SKIP
      >>> (gx,), gparams = pullback(np.ones_like(out))                         # doctest: +SKIP
    """
    return OnnxProgram(model, backend)


__all__ = ["from_onnx", "OnnxProgram", "supported_ops"]
