"""The ONNX frontend: models exported from PyTorch, loaded with ``flowgrad.from_onnx``, give the
gradients ``torch.autograd`` gives for the original module (every parameter is an initializer
of the same name). Hand-built graphs cover the ONNX-only forms (Gemm flags, asymmetric pads,
shape arithmetic) and the error messages."""
import io
import logging
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the ONNX tests export PyTorch models (pip install torch==2.13.0)")
onnx = pytest.importorskip("onnx", reason="the ONNX frontend needs onnx (pip install onnx)")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import flowgrad  # noqa: E402
from benchmarks.ml_bench import make_models  # noqa: E402
from test_ml_torch import OPS, TOL, _rel  # noqa: E402

pytestmark = pytest.mark.ml
MODELS = {name: (module, inputs) for name, module, inputs in make_models("test")}


def export(module, inputs):
    """ONNX bytes of ``module`` from PyTorch's exporter (names of parameters kept)."""
    pytest.importorskip("onnxscript", reason="torch.onnx.export needs onnxscript (pip install onnxscript)")
    buf = io.BytesIO()
    logging.disable(logging.WARNING)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, tuple(inputs), buf, dynamo=True, optimize=False, verbose=False)
    finally:
        logging.disable(logging.NOTSET)
    return buf.getvalue()


def check_onnx_against_torch(module, inputs, dtype=torch.float64, backend="numpy"):
    tol = TOL[dtype]
    module = module.to(dtype).eval()
    inputs = [x.to(dtype) if x.is_floating_point() else x for x in inputs]
    prog = flowgrad.from_onnx(export(module, inputs), backend=backend)
    arrays = [x.numpy() for x in inputs]
    out, pullback = flowgrad.vjp(prog, *arrays)
    leaves = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    ref = module(*leaves)
    assert np.shape(out) == tuple(ref.shape), f"output shape {np.shape(out)}, PyTorch's {tuple(ref.shape)}"
    assert _rel(out, ref.detach().numpy()) < tol
    ct = np.random.default_rng(3).standard_normal(np.shape(out)).astype(np.asarray(out).dtype)
    module.zero_grad()
    (ref * torch.from_numpy(np.asarray(ct))).sum().backward()
    input_grads, init_grads = pullback(ct)
    for g, leaf in zip(input_grads, leaves):
        if leaf.is_floating_point():
            assert _rel(g, leaf.grad.numpy()) < tol
        else:
            assert g is None
    for name, p in module.named_parameters():
        assert name in init_grads, f"parameter {name} is an initializer of the exported model"
        want = p.grad.numpy() if p.grad is not None else np.zeros(tuple(p.shape))
        assert _rel(init_grads[name], want) < tol, f"gradient of {name} differs"
    return prog


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(MODELS))
def test_exported_model_gradients(name, dtype):
    module, (x, _) = MODELS[name]
    check_onnx_against_torch(module.model, [x], dtype)


@pytest.mark.parametrize("name", ["mlp", "lenet5", "cnn1d"])
def test_exported_loss_gradients(name):
    module, (x, target) = MODELS[name]
    check_onnx_against_torch(module, [x, target])


@pytest.mark.parametrize("name", ["conv2d", "conv_transpose", "pool2d", "norms", "multihead", "activations", "losses", "indexing"])
def test_exported_operations(name):
    module, *inputs = OPS[name]
    check_onnx_against_torch(module, inputs)


class _MeanLoss(torch.nn.Module):
    def forward(self, x, y):         # exported as ReduceMean(keepdims=1) and a Squeeze() of every axis
        return (x * x).mean() + torch.nn.functional.binary_cross_entropy_with_logits(x, torch.sigmoid(y))


def test_exported_mean_losses_are_scalars():
    check_onnx_against_torch(_MeanLoss(), [torch.randn(3, 4), torch.randn(3, 4)])


def test_exported_gemm_output_used_twice():
    # an MLP whose second Linear's output feeds SiLU (x * sigmoid(x)): the Gemm result read twice
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 4), torch.nn.SiLU())
    check_onnx_against_torch(module, [torch.randn(3, 4)])


class _TriangleOps(torch.nn.Module):
    def forward(self, x):            # Trilu, CumSum, Atan and Mod nodes
        return torch.triu(x, 1) * 2 + torch.tril(x, -1) + torch.cumsum(x, 1) + torch.atan(x) + torch.remainder(x, 0.7)


def test_exported_triangles_cumulative_sums_and_remainders():
    check_onnx_against_torch(_TriangleOps(), [torch.randn(4, 4)])


class _SliceAssignments(torch.nn.Module):
    def forward(self, x):            # exported as ScatterND and ScatterElements
        y = x * 2.0
        y[:, 1:3] = x[:, :2] * 3.0
        y[0] += 1.0
        return y * x


def test_exported_slice_assignments():
    check_onnx_against_torch(_SliceAssignments(), [torch.randn(3, 4)])


class _PadsGathersAndReductions(torch.nn.Module):
    def forward(self, x, i):         # Pad (four modes), GatherElements, ReduceLogSumExp, ReduceL1, Asinh, ...
        F = torch.nn.functional
        p = (F.pad(x, (1, 2), value=0.5)[..., 1:-2] * F.pad(x, (2, 1), mode="reflect")[..., :5]
             + F.pad(x, (1, 1), mode="replicate")[..., :-2] * F.pad(x, (2, 2), mode="circular")[..., :-4])
        g = torch.gather(x, 2, i) * 2.0
        r = torch.logsumexp(x, 2, keepdim=True) + x.abs().sum(2, keepdim=True) + torch.linalg.vector_norm(x, 1, 2, True)
        e = torch.asinh(x) + torch.sinh(x) * torch.cosh(x) + torch.atanh(x * 0.3) + torch.tan(x * 0.3)
        return p + g + r + e


def test_exported_pads_gathers_and_reductions():
    x = torch.randn(2, 3, 5)
    i = torch.randint(0, 5, (2, 3, 5), generator=torch.Generator().manual_seed(0))
    check_onnx_against_torch(_PadsGathersAndReductions(), [x, i])


def test_pad_modes_match_numpy():
    x = np.random.default_rng(0).standard_normal((3, 4))
    for mode in ("constant", "edge", "reflect", "wrap"):
        model = _model([helper.make_node("Pad", ["x", "pads", "value"], ["y"], mode=mode)],
                       [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [3, 4])],
                       [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
                       {"pads": np.array([1, 2, 2, 1], np.int64), "value": np.array(0.25)}, opset=18)
        kw = {"constant_values": 0.25} if mode == "constant" else {}
        np.testing.assert_array_equal(flowgrad.from_onnx(model)(x), np.pad(x, ((1, 2), (2, 1)), mode=mode, **kw))


def test_exported_embedding():
    # (ONNX has no padding_idx: an exported nn.Embedding(padding_idx=p) gives row p a gradient)
    module = torch.nn.Sequential(torch.nn.Embedding(7, 3), torch.nn.Tanh())
    check_onnx_against_torch(module, [torch.tensor([[1, 2, 6], [0, 2, 2]])])


@pytest.mark.native
def test_exported_mlp_native_backend():
    module, (x, _) = MODELS["mlp"]
    check_onnx_against_torch(module.model, [x], backend="native")


# ---------------------------------------------------------------------------------------
# hand-built graphs
# ---------------------------------------------------------------------------------------


def _model(nodes, inputs, outputs, initializers, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs, [numpy_helper.from_array(v, n)
                                                             for n, v in initializers.items()])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _finite_difference_check(prog, x, params, eps=1e-6):
    """Directional derivatives of sum(out * ct) against central differences."""
    rng = np.random.default_rng(0)
    out, pullback = flowgrad.vjp(prog, x)
    ct = rng.standard_normal(np.shape(out))
    (gx,), gp = pullback(ct)
    d = rng.standard_normal(x.shape)
    fd = (np.sum(prog(x + eps * d) * ct) - np.sum(prog(x - eps * d) * ct)) / (2 * eps)
    assert abs(fd - np.sum(gx * d)) < 1e-6 * max(1.0, abs(fd))
    for name in params:
        v = prog.initializers[name]
        d = rng.standard_normal(v.shape)
        prog.initializers[name] = v + eps * d
        plus = np.sum(prog(x) * ct)
        prog.initializers[name] = v - eps * d
        minus = np.sum(prog(x) * ct)
        prog.initializers[name] = v
        assert abs((plus - minus) / (2 * eps) - np.sum(gp[name] * d)) < 1e-6 * max(1.0, abs(plus - minus) / eps)


def test_gemm_flags_and_shape_arithmetic():
    rng = np.random.default_rng(1)
    w, bias = rng.standard_normal((4, 3)), rng.standard_normal(4)
    nodes = [
        helper.make_node("Gemm", ["x", "w", "b"], ["h"], transB=1, alpha=0.5, beta=2.0),
        helper.make_node("Shape", ["h"], ["s"]),
        helper.make_node("Constant", [], ["minus1"], value=numpy_helper.from_array(np.array([-1], np.int64))),
        helper.make_node("Slice", ["s", "zero", "one"], ["n"]),
        helper.make_node("Concat", ["n", "minus1"], ["shape"], axis=0),
        helper.make_node("Reshape", ["h", "shape"], ["r"]),
        helper.make_node("Softmax", ["r"], ["p"], axis=-1),
        helper.make_node("Tanh", ["p"], ["y"]),
    ]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [2, 3])],
                   [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)],
                   {"w": w, "b": bias, "zero": np.array([0], np.int64), "one": np.array([1], np.int64)})
    prog = flowgrad.from_onnx(model)
    x = rng.standard_normal((2, 3))
    h = 0.5 * x @ w.T + 2.0 * bias
    p = np.exp(h - h.max(1, keepdims=True))
    np.testing.assert_allclose(prog(x), np.tanh(p / p.sum(1, keepdims=True)), rtol=1e-12)
    assert sorted(prog.param_names) == ["b", "w"]
    _finite_difference_check(prog, x, ["w", "b"])


def test_asymmetric_pads_and_global_pooling():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((3, 2, 3, 2))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 0, 0, 1], strides=[2, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], pads=[0, 1, 1, 0]),
             helper.make_node("GlobalAveragePool", ["m"], ["y"])]
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.DOUBLE, [1, 2, 6, 5])],
                   [helper.make_tensor_value_info("y", TensorProto.DOUBLE, None)], {"w": w})
    prog = flowgrad.from_onnx(model)
    x = rng.standard_normal((1, 2, 6, 5))
    xt = torch.from_numpy(np.pad(x, ((0, 0), (0, 0), (1, 0), (0, 1))))
    c = torch.relu(torch.nn.functional.conv2d(xt, torch.from_numpy(w), stride=(2, 1)))
    m = torch.nn.functional.max_pool2d(torch.nn.functional.pad(c, (1, 0, 0, 1), value=-np.inf), 2, 1)
    np.testing.assert_allclose(prog(x), m.mean((2, 3), keepdim=True).numpy(), rtol=1e-12)
    _finite_difference_check(prog, x, ["w"])


def test_unsupported_operator_is_named_with_its_node():
    model = _model([helper.make_node("TopK", ["x", "k"], ["v", "i"], name="pick")],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                   [helper.make_tensor_value_info("v", TensorProto.FLOAT, None)], {"k": np.array([2], np.int64)})
    with pytest.raises(flowgrad.UnsupportedError) as err:
        flowgrad.from_onnx(model)
    assert "TopK (node 'pick')" in str(err.value) and "flowgrad supports:" in str(err.value)


def test_old_opset_is_reported():
    model = _model([helper.make_node("Relu", ["x"], ["y"])], [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                               [3])],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], {}, opset=11)
    with pytest.raises(flowgrad.UnsupportedError, match="opset 11"):
        flowgrad.from_onnx(model)


def test_model_from_a_file(tmp_path):
    module, (x, _) = MODELS["mlp"]
    path = tmp_path / "mlp.onnx"
    path.write_bytes(export(module.model.float(), [x]))
    prog = flowgrad.from_onnx(str(path))
    np.testing.assert_allclose(prog(x.numpy()), module.model(x).detach().numpy(), rtol=1e-5, atol=1e-6)
