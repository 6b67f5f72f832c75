"""The PyTorch frontend: ``flowgrad.from_torch`` against ``torch.autograd``.

The oracle is PyTorch itself: the forward value and the gradients w.r.t. every float input and
every parameter, for a random cotangent, must match ``torch.autograd`` (float64 to 1e-8,
float32 to 1e-4, relative to the largest entry). The five models are the zoo of
``benchmarks/ml_bench.py`` at test size; the small modules below cover the operation table.
"""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the PyTorch frontend needs torch (pip install torch==2.13.0)")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import flowgrad  # noqa: E402
from benchmarks.ml_bench import make_models  # noqa: E402

pytestmark = pytest.mark.ml
TOL = {torch.float64: 1e-8, torch.float32: 1e-4}


def _rel(got, want):
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    return np.max(np.abs(got - want), initial=0.0) / max(np.max(np.abs(want), initial=0.0), 1e-3)


def check_against_torch(module, inputs, dtype=torch.float64, backend="numpy", tol=None, seed=1):
    """Compare flowgrad's value and vjp of ``from_torch(module)`` with torch.autograd."""
    tol = TOL[dtype] if tol is None else tol
    module = module.to(dtype)
    inputs = [x.to(dtype) if x.is_floating_point() else x for x in inputs]
    prog = flowgrad.from_torch(module, *inputs, backend=backend)
    arrays = [x.numpy() for x in inputs]
    out, pullback = flowgrad.vjp(prog, *arrays)
    leaves = [x.clone().requires_grad_(x.is_floating_point()) for x in inputs]
    ref = module(*leaves)
    assert _rel(out, ref.detach().numpy()) < tol, "forward value differs from PyTorch"
    ct = np.random.default_rng(seed).standard_normal(np.shape(out)).astype(np.asarray(out).dtype)
    module.zero_grad()
    (ref * torch.from_numpy(np.asarray(ct))).sum().backward()
    input_grads, param_grads = pullback(ct)
    assert len(input_grads) == len(inputs)
    for k, (g, leaf) in enumerate(zip(input_grads, leaves)):
        if not leaf.is_floating_point():
            assert g is None, "an integer input gets no gradient"
            continue
        assert g.shape == tuple(leaf.shape) and g.dtype == arrays[k].dtype
        assert _rel(g, leaf.grad.numpy()) < tol, f"gradient of input {k} differs"
    names = [n for n, _ in module.named_parameters()]
    assert list(param_grads) == names, "one gradient per named parameter, in order"
    for name, p in module.named_parameters():
        want = p.grad.numpy() if p.grad is not None else np.zeros(tuple(p.shape))
        assert param_grads[name].shape == tuple(p.shape)
        assert _rel(param_grads[name], want) < tol, f"gradient of parameter {name} differs"
    return prog


MODELS = {name: (module, inputs) for name, module, inputs in make_models("test")}


# ---------------------------------------------------------------------------------------
# the five models: the network output with a random cotangent, and the scalar training loss
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(MODELS))
def test_model_output_gradients(name, dtype):
    module, (x, _) = MODELS[name]
    check_against_torch(module.model, [x], dtype)


@pytest.mark.parametrize("name", list(MODELS))
def test_model_loss_gradients(name):
    module, (x, target) = MODELS[name]
    check_against_torch(module, [x, target], torch.float64)


@pytest.mark.native
@pytest.mark.parametrize("name", ["mlp", "cnn1d"])
def test_model_native_backend(name):
    module, (x, target) = MODELS[name]
    check_against_torch(module, [x, target], torch.float64, backend="native")


# ---------------------------------------------------------------------------------------
# the operation table, one small module per family
# ---------------------------------------------------------------------------------------


class Fn(nn.Module):
    """A module from a function ``f(self, *inputs)`` and submodules ``self.m[k]``."""

    def __init__(self, f, *mods):
        super().__init__()
        self.f, self.m = f, nn.ModuleList(mods)

    def forward(self, *xs):
        return self.f(self, *xs)


def R(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed + sum(shape)))


def _inplace(s, x):
    y = s.m[0](x)
    y.add_(1.0)
    y[:, :2].mul_(3)                 # through a view: writes y
    y[:, 3].clamp_(max=1.0)
    return s.m[1](y) * 2             # nn.ReLU(inplace=True)


def _clone_then_update(s, x):
    y = x * 2
    z = y.clone()                    # a copy: the update below does not reach it
    y.add_(1.0)
    return z * y


def _filled(x):
    y = x * 1.0
    y[0].fill_(2.0)
    y[1].zero_()
    return y


def _index_put(s, x, i):
    y = x * 2.0
    y[x > 0.5] = 0.0                 # index_put_ with a mask
    z = x * 1.0
    z[i] = x[0] * 3.0                # with an index tensor
    w = x * 1.0
    w[i] += 1.5 * x[1]
    return y * z + w


def _tied():
    a, b = nn.Linear(3, 3, bias=False), nn.Linear(3, 3)
    b.weight = a.weight              # one Parameter used twice: its gradient sums both uses
    return a, b


OPS = {
    "elementwise": (Fn(lambda s, x: torch.exp(x) * torch.sin(x) - torch.cos(x) / (2 + x.abs()) + x.pow(3)
                       + torch.sqrt(x * x + 1) + torch.rsqrt(x * x + 1) + torch.log1p(x.abs())
                       + torch.clamp(x, -0.5, 0.5) + torch.where(x > 0, x, -x) + x.square() + 1 / (1 + x * x)),
                    R(3, 4)),
    "activations": (Fn(lambda s, x: F.hardtanh(x) + F.relu6(x * 4) + F.leaky_relu(x) + F.elu(x) + F.softplus(x)
                       + F.hardsigmoid(x) + F.hardswish(x) + F.mish(x) + F.gelu(x, approximate="tanh")
                       + F.gelu(x) + F.silu(x) + torch.sigmoid(x) + torch.tanh(x) + F.relu(x)), R(3, 4)),
    "softmax": (Fn(lambda s, x: F.softmax(x, -1) * F.log_softmax(x, 0)), R(3, 5)),
    "reductions": (Fn(lambda s, x: x.sum(1, keepdim=True) * x.mean(0) + x.amax(1, keepdim=True)
                      + x.max(dim=1).values[:, None] + x.var(1, keepdim=True) + x.std()
                      + torch.logsumexp(x, 1, keepdim=True) + x.norm(dim=1, keepdim=True)), R(3, 5)),
    "views": (Fn(lambda s, x: torch.cat([x.permute(1, 0, 2).reshape(4, -1), x.transpose(0, 1)[:, 1:, ::2]
                                         .flatten(1)], 1).unsqueeze(0).squeeze(0)
                 + x.transpose(0, 1)[:, 0, :1].repeat(1, 21)), R(3, 4, 5)),
    "split_stack": (Fn(lambda s, x: sum(c * (k + 1) for k, c in enumerate(x.chunk(2, 1)))
                       + torch.stack(x.unbind(0), 1).sum(1)[None, :2] + x.split([1, 3], 1)[1][:, :2]
                       * x.narrow(1, 2, 2)), R(3, 4)),
    "matmuls": (Fn(lambda s, a, b: (a @ b).sum(0) + torch.bmm(a, b).mean(0) + torch.einsum("bij,bjk->ik", a, b)
                   + torch.addmm(b[0], a[0], b[1])), R(2, 3, 3), R(2, 3, 3, seed=1)),
    "conv2d": (Fn(lambda s, x: s.m[0](x).sum() + s.m[1](x).pow(2).sum(),
                  nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=2, groups=2),
                  nn.Conv2d(4, 4, (2, 3), padding=(1, 0), groups=4, bias=False)), R(2, 4, 9, 8)),
    "conv1d_same": (nn.Conv1d(3, 5, 4, padding="same"), R(2, 3, 10)),
    "conv_transpose": (Fn(lambda s, x: s.m[0](x).sum((1, 2, 3)) + s.m[1](x).pow(2).sum((1, 2, 3))
                          + s.m[2](x[:, :, 0]).mean((1, 2)),
                          nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1),
                          nn.ConvTranspose2d(4, 4, (2, 3), stride=(1, 2), dilation=(2, 1), groups=2, bias=False),
                          nn.ConvTranspose1d(4, 3, 4, stride=3, padding=2)), R(2, 4, 5, 6)),
    "conv_transpose3d": (nn.ConvTranspose3d(2, 3, 2, stride=(2, 1, 2)), R(1, 2, 3, 4, 2)),
    "conv1x1": (nn.Conv2d(3, 5, 1), R(2, 3, 4, 4)),
    "conv3d": (nn.Conv3d(2, 3, 2, stride=(1, 2, 1)), R(1, 2, 4, 5, 3)),
    "pool2d": (Fn(lambda s, x: torch.cat([
        F.max_pool2d(x, 3, 2, 1).flatten(), F.avg_pool2d(x, 3, 2, 1).flatten(),
        F.avg_pool2d(x, 3, 2, 1, count_include_pad=False).flatten(), F.max_pool2d(x, 2, ceil_mode=True).flatten(),
        F.avg_pool2d(x, 2, ceil_mode=True).flatten(), F.adaptive_avg_pool2d(x, (1, 1)).flatten(),
        F.adaptive_avg_pool2d(x, (3, 2)).flatten(), F.max_pool2d(x, 2, dilation=2).flatten()])), R(2, 3, 7, 6)),
    "pool_ties": (Fn(lambda s, x: F.max_pool2d(torch.round(x), 2, 1) * 1.5), R(1, 2, 5, 5)),
    "pool1d": (Fn(lambda s, x: torch.cat([F.max_pool1d(x, 3, 2, 1).flatten(), F.avg_pool1d(x, 3).flatten(),
                                          F.adaptive_avg_pool1d(x, 1).flatten()])), R(2, 3, 10)),
    "norms": (Fn(lambda s, x: s.m[1](s.m[0](x)) + s.m[2](x).sum(), nn.BatchNorm2d(4), nn.LayerNorm([5, 6]),
                 nn.GroupNorm(2, 4)), R(2, 4, 5, 6)),
    "dropout_eval": (Fn(lambda s, x: s.m[0](x) * 2, nn.Dropout(0.3)), R(3, 4)),
    "sdpa": (Fn(lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v)
                + F.scaled_dot_product_attention(q, k, v, is_causal=True)),
             R(2, 2, 4, 8), R(2, 2, 4, 8, seed=1), R(2, 2, 4, 8, seed=2)),
    "sdpa_gqa": (Fn(lambda s, q, k, v: F.scaled_dot_product_attention(q, k, v, enable_gqa=True)),
                 R(2, 4, 3, 8), R(2, 2, 5, 8, seed=1), R(2, 2, 5, 8, seed=2)),
    "multihead": (Fn(lambda s, q: s.m[0](q, q, q, need_weights=False)[0], nn.MultiheadAttention(8, 2,
                                                                                               batch_first=True)),
                  R(2, 5, 8)),
    "embedding": (Fn(lambda s, i, x: (s.m[0](i) * x).sum() + s.m[1](i).sum(), nn.Embedding(7, 3),
                     nn.Embedding(7, 3, padding_idx=2)), torch.tensor([[1, 2, 6], [0, 2, 2]]), R(2, 3, 3)),
    "cross_entropy": (Fn(lambda s, x, t: F.cross_entropy(x, t) + F.cross_entropy(x, t, reduction="sum") * 0.1
                         + F.cross_entropy(x, t, label_smoothing=0.1)
                         + F.cross_entropy(x, t, weight=torch.arange(1.0, 6.0, dtype=x.dtype), ignore_index=1)),
                      R(4, 5), torch.tensor([0, 1, 4, 2])),
    "cross_entropy_nd": (Fn(lambda s, x, t: F.cross_entropy(x, t)), R(2, 5, 3), torch.tensor([[0, 1, 4], [1, 1, 2]])),
    "more_ops": (Fn(lambda s, x, y: x.min(1).values[:, None] * x + x.min() + F.smooth_l1_loss(x, y)
                    + F.smooth_l1_loss(x, y, beta=0.5, reduction="sum") + F.huber_loss(x, y, delta=0.7)
                    + _filled(x)), R(3, 4), R(3, 4, seed=1)),
    "index_put": (Fn(_index_put), R(4, 3), torch.tensor([2, 0, 1])),
    "cross_entropy_unbatched": (Fn(lambda s, x, t: F.cross_entropy(x, t)), R(5), torch.tensor(2)),
    "losses": (Fn(lambda s, x, t, y: F.nll_loss(F.log_softmax(x, 1), t) + F.mse_loss(x, y) + F.l1_loss(x, y)
                  + F.binary_cross_entropy_with_logits(x, torch.sigmoid(y))),
               R(4, 5), torch.tensor([0, 1, 4, 2]), R(4, 5, seed=3)),
    "inplace": (Fn(_inplace, nn.Linear(4, 4), nn.ReLU(inplace=True)), R(3, 4)),
    "masked_like": (Fn(lambda s, x: x.masked_fill(x > 0.5, 0.0) + torch.zeros_like(x) + torch.ones_like(x) * 2
                       + torch.full_like(x, 3.0)), R(3, 4)),
    "constants": (Fn(lambda s, x: x * torch.arange(4, dtype=x.dtype) + torch.ones(4, dtype=x.dtype) * 2
                     + x.tril() + x.cumsum(1)), R(4, 4)),
    "indexing": (Fn(lambda s, x, i: x[i] + x[:, i].t() + torch.index_select(x, 1, i).t()
                    + torch.index_select(x, -1, i)), R(4, 4), torch.tensor([3, 0, 1, 1])),
    "softplus_threshold": (Fn(lambda s, x: F.softplus(x * 3, threshold=1.0) + F.softplus(x, beta=2.0, threshold=0.5)),
                           R(3, 4)),
    "tied_weights": (Fn(lambda s, x: s.m[1](s.m[0](x)), *_tied()), R(2, 3)),
    "clone_then_update": (Fn(_clone_then_update), R(2, 3)),
    "scalar_output": (Fn(lambda s, x: (x * x).sum()), R(3)),
    "expand": (Fn(lambda s, x: x[:, None, :].expand(3, 2, 4) * x.unsqueeze(1)), R(3, 4)),
    "maximum_ties": (Fn(lambda s, x, y: torch.maximum(x, y) * 2 + torch.minimum(x, y.round()) + torch.maximum(x, x)),
                     torch.tensor([[1.0, 2.0, -1.0], [0.5, 3.0, 3.0]]), torch.tensor([[1.0, 1.0, -1.0], [0.5, 4.0, 3.0]])),
    "expand_as": (Fn(lambda s, x, y: x[:, :1].expand_as(y) * y + y.sum(0).expand_as(y)), R(3, 4), R(3, 4, seed=1)),
    "gather": (Fn(lambda s, x, i: torch.gather(x, 1, i) * 2 + x.gather(0, i[:2, :3].clamp(max=2)).sum()),
               R(3, 4), torch.tensor([[0, 3, 3, 1], [2, 2, 0, 1], [1, 0, 3, 3]])),
    "inverse_hyperbolic": (Fn(lambda s, x, y: torch.asinh(x) + torch.acosh(y.abs() + 1.5) + torch.atanh(x * 0.3)
                              + torch.exp2(x) + torch.logaddexp(x, y) + torch.atan2(x, y) + torch.hypot(x, y)
                              + torch.sinh(x) * torch.cosh(y) + torch.atan(x) + torch.asin(x * 0.3)
                              + torch.acos(y * 0.3)), R(3, 4), R(3, 4, seed=1)),
}


@pytest.mark.parametrize("name", list(OPS))
def test_operation(name):
    module, *inputs = OPS[name]
    check_against_torch(module.eval(), inputs)


@pytest.mark.native
@pytest.mark.parametrize("name", ["conv_transpose", "gather", "inverse_hyperbolic"])
def test_operation_native_backend(name):
    module, *inputs = OPS[name]
    check_against_torch(module.eval(), inputs, backend="native")


def test_operation_float32_through_conv_and_attention():
    for name in ("conv2d", "multihead", "pool2d", "cross_entropy"):
        module, *inputs = OPS[name]
        check_against_torch(module.eval(), inputs, torch.float32)


# ---------------------------------------------------------------------------------------
# the calling convention
# ---------------------------------------------------------------------------------------


def test_forward_uses_current_parameters():
    module = nn.Linear(3, 2).double()
    x = np.random.default_rng(0).standard_normal((4, 3))
    prog = flowgrad.from_torch(module, x)
    np.testing.assert_allclose(prog(x), module(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)
    with torch.no_grad():
        module.weight.mul_(-2.0)        # training in PyTorch changes what the program computes
    np.testing.assert_allclose(prog(x), module(torch.from_numpy(x)).detach().numpy(), rtol=1e-12)
    assert prog.parameters()["weight"].shape == (2, 3)


def test_new_input_shape_is_captured_again():
    module, (x, _) = MODELS["mlp"]
    prog = flowgrad.from_torch(module.model.double(), x.double())
    bigger = np.random.default_rng(1).standard_normal((5, x.shape[1]))
    np.testing.assert_allclose(prog(bigger), module.model(torch.from_numpy(bigger)).detach().numpy(), rtol=1e-10)


def test_pullback_can_be_called_twice():
    module = nn.Sequential(nn.Linear(3, 4), nn.Tanh()).double()
    x = np.random.default_rng(2).standard_normal((2, 3))
    out, pullback = flowgrad.vjp(flowgrad.from_torch(module, x), x)
    (g1,), p1 = pullback(np.ones_like(out))
    (g2,), p2 = pullback(2.0 * np.ones_like(out))
    np.testing.assert_allclose(g2, 2.0 * g1, rtol=1e-12)
    np.testing.assert_allclose(p2["0.weight"], 2.0 * p1["0.weight"], rtol=1e-12)


def test_grad_of_a_scalar_model_wrt_its_input():
    module, (x, target) = MODELS["cnn1d"]
    module = module.double()
    prog = flowgrad.from_torch(module, x.double(), target)
    g = flowgrad.grad(prog, backend="numpy")(x.double().numpy(), target.numpy())
    leaf = x.double().clone().requires_grad_()
    module(leaf, target).backward()
    assert _rel(g, leaf.grad.numpy()) < 1e-8


def test_program_source_and_ir_are_printable():
    prog = flowgrad.from_torch(nn.Conv1d(2, 3, 3).double(), torch.randn(1, 2, 6).double())
    x = np.zeros((1, 2, 6))
    assert "_rt.nn.conv(" in prog.source(x) and "conv_grad_weight" in prog.source(x)
    assert "conv" in prog.ir(x)


def test_vjp_rejects_wrt_and_bad_cotangents():
    prog = flowgrad.from_torch(nn.Linear(3, 2).double(), torch.zeros(1, 3).double())
    with pytest.raises(flowgrad.InputError, match="drop the wrt argument"):
        flowgrad.vjp(prog, np.zeros((1, 3)), wrt="x")
    _, pullback = flowgrad.vjp(prog, np.zeros((1, 3)))
    with pytest.raises(flowgrad.InputError, match="cotangent has shape"):
        pullback(np.ones(3))


# ---------------------------------------------------------------------------------------
# bad input: named, located, never silently wrong
# ---------------------------------------------------------------------------------------


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:                                   # data-dependent control flow
            return x * 2
        return x


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Sequential(nn.Linear(3, 3), Branchy())

    def forward(self, x):
        return self.inner(x)


def test_data_dependent_control_flow_is_reported_with_module_and_line():
    with pytest.raises(flowgrad.UnsupportedError) as err:
        flowgrad.from_torch(Outer(), torch.randn(2, 3))
    text = str(err.value)
    assert "data-dependent Python control flow" in text
    assert "inner.1 (Branchy)" in text and "test_ml_torch.py" in text and "if x.sum() > 0" in text


def test_unsupported_operation_names_op_node_module_and_supported_list():
    model = Fn(lambda s, x: torch.sort(s.m[0](x), dim=1).values, nn.Linear(3, 3))
    with pytest.raises(flowgrad.UnsupportedError) as err:
        flowgrad.from_torch(model, torch.randn(2, 3))
    text = str(err.value)
    assert "aten.sort" in text and "graph node 'sort'" in text and "(Fn)" in text
    assert "test_ml_torch.py" in text and "flowgrad supports:" in text and "conv2d" in text


@pytest.mark.parametrize("layer, what", [(nn.Dropout(0.5), "dropout in training mode"),
                                         (nn.BatchNorm1d(3), "BatchNorm in training mode")])
def test_training_mode_layers_are_reported(layer, what):
    with pytest.raises(flowgrad.UnsupportedError, match=what):
        flowgrad.from_torch(nn.Sequential(nn.Linear(3, 3), layer).train(), torch.randn(4, 3))


def test_random_operations_are_not_frozen():
    model = Fn(lambda s, x: x + torch.randn(3))
    with pytest.raises(flowgrad.UnsupportedError, match="randn"):
        flowgrad.from_torch(model, torch.randn(2, 3))


def test_several_outputs_are_reported():
    with pytest.raises(flowgrad.UnsupportedError, match="returns 2 values"):
        flowgrad.from_torch(Fn(lambda s, x: (x, x * 2)), torch.randn(2))


def test_import_flowgrad_does_not_import_torch():
    import subprocess
    import sys
    code = "import sys, flowgrad; assert 'torch' not in sys.modules and 'jax' not in sys.modules, sys.modules.keys()"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_module_parameters_get_gradients_in_a_torch_training_step():
    import flowgrad.torch
    torch.manual_seed(0)
    x = R(5, 3).double()
    net = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    ref = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    ref.load_state_dict(net.state_dict())
    f = flowgrad.torch.function(flowgrad.from_torch(net, x))
    opts = torch.optim.SGD(net.parameters(), lr=0.1), torch.optim.SGD(ref.parameters(), lr=0.1)
    for _ in range(3):                           # the second and third steps see the updated weights
        for opt, model in zip(opts, (f, ref)):
            opt.zero_grad()
            (model(x) ** 2).sum().backward()
        for p, q in zip(net.parameters(), ref.parameters()):
            assert p.grad is not None and _rel(p.grad, q.grad) < 1e-10
        for opt in opts:
            opt.step()


def _reshape_then_update(s, x):
    y = x * 2
    v = y.reshape(-1)                # PyTorch: a view, which shows the update below
    y.add_(1.0)
    return v


def test_a_reshape_of_a_tensor_updated_afterwards_is_reported():
    with pytest.raises(flowgrad.UnsupportedError, match=r"reshape of a tensor updated in place afterwards"):
        flowgrad.from_torch(Fn(_reshape_then_update).double(), R(2, 2).double())


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1.0)         # state PyTorch keeps between calls
        return x * self.count


def test_a_buffer_written_in_forward_is_reported():
    with pytest.raises(flowgrad.UnsupportedError, match=r"writes count in place"):
        flowgrad.from_torch(_Counter(), R(3))


@pytest.mark.native
def test_a_result_updated_in_place_is_returned_as_computed():
    # the backward sweep restores the result's earlier values; the call still returns the final ones
    check_against_torch(Fn(lambda s, x: (x * 2.0).exp_()), [R(2, 3)], backend="native")
