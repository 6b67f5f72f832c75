"""One training step (forward + backward) of small PyTorch models: flowgrad vs PyTorch eager, on CPU.

Usage (from the repository root)::

    python -m benchmarks.ml_bench                      # every model, bench size, every flowgrad backend
    python -m benchmarks.ml_bench --models mlp,lenet5 --backends numpy --threads 1

Each model is wrapped with its loss, so one program returns the scalar loss. PyTorch's step is
``zero_grad(); loss = model(x, y); loss.backward()``; flowgrad's is
``out, pullback = flowgrad.vjp(prog, x, y); pullback(1.0)`` on the program from
``flowgrad.from_torch``: the gradients of the loss w.r.t. every parameter and the input ``x``
(PyTorch is asked for ``x.grad`` too, so both do the same work). Both run in this process on
the same thread count, interleaved step by step; each timing is the median of repeated steps
after warm-up steps (which include flowgrad's compile). The ratio is flowgrad time / PyTorch
time: below 1 flowgrad is faster. With ``--threads 1`` (every BLAS pinned to one thread too)
the ratio uses the calling thread's CPU time, which a busy machine disturbs far less than
wall time; otherwise wall time. ``--keep-heap`` stops glibc from returning freed memory to the
OS after every step (for the whole process, both frameworks): NumPy-backend steps allocate and
free tens of MB, and re-faulting that memory in can cost more than the arithmetic.

Measured (2-core AMD EPYC VM shared with other jobs, ``--threads 1``, no ``--keep-heap``; flowgrad
time / PyTorch time): native backend (the default) mlp 0.83x, lenet5 0.55x, resnet_block 1.37x,
transformer 1.28x, cnn1d 0.97x; numpy backend 1.30x, 1.11x, 2.66x, 4.26x, 1.23x. What remains
on resnet_block is mostly GEMM time: OpenBLAS's sgemm runs these shapes at 50-60 GFLOP/s on one
core, the library PyTorch uses at 65-80.

The model zoo (``make_models``) is also what ``tests/test_ml_torch.py`` and
``tests/test_ml_onnx.py`` check against ``torch.autograd``, at ``size="test"``.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, sizes=(784, 256, 256, 10)):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

    def forward(self, x):
        for layer in self.layers[:-1]:
            x = F.relu(layer(x))
        return self.layers[-1](x)


class LeNet5(nn.Module):
    """LeNet-5 (LeCun et al. 1998) for 1x28x28 images: sigmoid conv, average pool, ReLU conv, max pool."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 6, 5, padding=2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, classes)

    def forward(self, x):
        x = F.avg_pool2d(torch.sigmoid(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = torch.flatten(x, 1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


class BasicBlock(nn.Module):
    """The ResNet basic block (He et al. 2016) with a strided 1x1 projection shortcut."""

    def __init__(self, cin=16, cout=32, stride=2):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.shortcut = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class CNN1d(nn.Module):
    """A 1-D CNN for sequences: strided, dilated and grouped convolutions, max pooling, GELU/SiLU."""

    def __init__(self, cin=3, width=16, length=64, classes=5):
        super().__init__()
        self.conv1 = nn.Conv1d(cin, width, 5, stride=2, padding=2)
        self.conv2 = nn.Conv1d(width, width, 3, padding=2, dilation=2, groups=2)
        self.pool = nn.MaxPool1d(2)
        self.fc = nn.Linear(width * (length // 4), classes)

    def forward(self, x):
        x = F.silu(self.conv1(x))
        x = self.pool(F.gelu(self.conv2(x)))
        return self.fc(x.flatten(1))


def transformer_layer(d_model=32, heads=4, ff=64):
    """PyTorch's own ``nn.TransformerEncoderLayer`` (post-norm, ReLU), batch first."""
    return nn.TransformerEncoderLayer(d_model, heads, ff, dropout=0.1, batch_first=True)


class WithLoss(nn.Module):
    """A model and its loss in one module: ``forward(x, target)`` returns the scalar loss."""

    def __init__(self, model, loss):
        super().__init__()
        self.model, self.loss = model, loss

    def forward(self, x, target):
        out = self.model(x)
        if self.loss == "ce":
            return F.cross_entropy(out, target)
        return F.mse_loss(out, target)


SIZES = {
    "test": {"batch": 2, "mlp": (16, 32, 32, 10), "image": 28, "block": (4, 8, 6), "seq": 5, "d_model": 16,
             "length": 32},
    "bench": {"batch": 64, "mlp": (784, 256, 256, 10), "image": 28, "block": (16, 32, 16), "seq": 32,
              "d_model": 64, "length": 256},
}


def make_models(size="test", seed=0):
    """``[(name, module, (x, target))]`` for the five models; modules in eval mode, float32 tensors."""
    s = SIZES[size]
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    n = s["batch"]

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    def labels(k):
        return torch.randint(0, k, (n,), generator=gen)
    cin, cout, hw = s["block"]
    block = BasicBlock(cin, cout)
    with torch.no_grad():      # non-trivial running statistics, so inference-mode batch norm is tested
        for m in block.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.copy_(0.1 * randn(m.num_features))
                m.running_var.copy_(1.0 + 0.2 * randn(m.num_features).abs())
                m.weight.copy_(1.0 + 0.1 * randn(m.num_features))
                m.bias.copy_(0.1 * randn(m.num_features))
    d = s["d_model"]
    models = [
        ("mlp", WithLoss(MLP(s["mlp"]), "ce"), (randn(n, s["mlp"][0]), labels(s["mlp"][-1]))),
        ("lenet5", WithLoss(LeNet5(), "ce"), (randn(n, 1, s["image"], s["image"]), labels(10))),
        ("resnet_block", WithLoss(block, "mse"), (randn(n, cin, hw, hw), randn(n, cout, hw // 2, hw // 2))),
        ("transformer", WithLoss(transformer_layer(d, 4, 2 * d), "mse"), (randn(n, s["seq"], d),
                                                                           randn(n, s["seq"], d))),
        ("cnn1d", WithLoss(CNN1d(3, 16, s["length"]), "ce"), (randn(n, 3, s["length"]), labels(5))),
    ]
    return [(name, m.eval(), xs) for name, m, xs in models]


def bench_model(name, module, inputs, backends, budget):
    """Median step times of PyTorch and each flowgrad backend, measured interleaved (one step of
    each in turn), so that load on the machine affects them alike."""
    import flowgrad
    x, target = inputs
    x = x.detach().clone().requires_grad_(True)    # flowgrad's vjp returns the input's gradient too
    params = list(module.parameters()) + [x]

    def torch_step():
        for p in params:
            p.grad = None
        module(x, target).backward()
    steps = {"torch": torch_step}
    row = {"model": name}
    xn, tn = x.detach().numpy(), target.numpy()
    for backend in backends:
        t0 = time.perf_counter()
        prog = flowgrad.from_torch(module, xn, tn, backend=backend)

        def flowgrad_step(prog=prog):
            _, pullback = flowgrad.vjp(prog, xn, tn)
            pullback(1.0)
        flowgrad_step()
        row[f"{backend}_first"] = time.perf_counter() - t0
        steps[backend] = flowgrad_step
    for step in steps.values():
        for _ in range(3):
            step()
    wall = {k: [] for k in steps}
    cpu = {k: [] for k in steps}
    start = time.perf_counter()
    while len(wall["torch"]) < 7 or time.perf_counter() - start < budget * len(steps):
        for k, step in steps.items():
            t0, c0 = time.perf_counter(), time.thread_time()
            step()
            cpu[k].append(time.thread_time() - c0)
            wall[k].append(time.perf_counter() - t0)
        if len(wall["torch"]) >= 2000:
            break
    row.update({k: statistics.median(v) for k, v in wall.items()})
    row.update({k + "_cpu": statistics.median(v) for k, v in cpu.items()})
    return row


def keep_heap():
    """Ask glibc to keep freed memory instead of returning it to the OS after every step (for the
    whole process, so for both frameworks). A training step allocates and frees tens of MB; with
    the default trimming, every step page-faults the memory back in, which on some machines costs
    more than the arithmetic. Returns False where it is unavailable (not glibc)."""
    import ctypes
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return False
    m_trim_threshold, m_mmap_threshold = -1, -3
    return bool(libc.mallopt(m_trim_threshold, 1 << 30) and libc.mallopt(m_mmap_threshold, 1 << 30))


def main(argv=None):
    import flowgrad.api
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="", help="comma-separated subset of: mlp, lenet5, resnet_block, "
                        "transformer, cnn1d")
    parser.add_argument("--backends", default=",".join(flowgrad.api.BACKENDS))
    parser.add_argument("--size", default="bench", choices=sorted(SIZES))
    parser.add_argument("--budget", type=float, default=2.0, help="seconds of timed steps per measurement")
    parser.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: leave as is)")
    parser.add_argument("--keep-heap", action="store_true", help="keep freed memory in the process (glibc mallopt; "
                        "both frameworks): no page faults from re-growing the heap every step")
    args = parser.parse_args(argv)
    if args.keep_heap and not keep_heap():
        print("--keep-heap: mallopt is not available here; running with the default allocator")
    if args.threads:
        torch.set_num_threads(args.threads)
    backends = [b for b in args.backends.split(",") if b]
    wanted = set(filter(None, args.models.split(",")))
    if args.threads == 1:
        try:                # every BLAS on one thread too: NumPy's, and SciPy's that Numba calls
            import scipy.linalg.cython_blas  # noqa: F401  (load it before limiting)
            from threadpoolctl import threadpool_limits
            threadpool_limits(1)
        except ImportError:
            print("threadpoolctl is missing: set OPENBLAS_NUM_THREADS=1 for single-thread BLAS")
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; numpy {np.__version__}; "
          f"size={args.size}; medians of one training step (forward + backward), "
          f"{'thread CPU time' if args.threads == 1 else 'wall time'}{'; heap kept' if args.keep_heap else ''}")
    head = f"{'model':14s} {'torch eager':>12s}" + "".join(f" {b:>12s} {'ratio':>7s} {'1st call':>9s}"
                                                             for b in backends)
    print(head)
    rows = []
    clock = "_cpu" if args.threads == 1 else ""
    for name, module, inputs in make_models(args.size):
        if wanted and name not in wanted:
            continue
        row = bench_model(name, module, inputs, backends, args.budget)
        rows.append(row)
        line = f"{name:14s} {row['torch' + clock] * 1e3:10.3f}ms"
        for b in backends:
            line += (f" {row[b + clock] * 1e3:10.3f}ms {row[b + clock] / row['torch' + clock]:6.2f}x "
                     f"{row[b + '_first']:8.1f}s")
        print(line, flush=True)
    return rows


if __name__ == "__main__":
    main()
