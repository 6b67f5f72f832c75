"""The kernel corpus (benchmarks/kernels): user-style programs, end to end.

For every kernel: the corpus entry is well formed (checked with plain NumPy only), the
forward program of ``flowgrad.jit`` equals plain NumPy, and the gradient with respect to
the kernel's ``WRT`` arguments matches finite differences at two seeds (the second call
reuses whatever flowgrad cached for the first shapes).
"""

import inspect

import numpy as np
import pytest

from oracle import check_forward, check_grad, is_float_arg

kernels = pytest.importorskip(
    "benchmarks.kernels", reason="benchmarks.kernels is not importable yet (the corpus is not written)"
)
if not hasattr(kernels, "NAMES") or not hasattr(kernels, "load"):
    pytest.skip("benchmarks.kernels does not define NAMES and load() yet", allow_module_level=True)

NAMES = list(kernels.NAMES)


def test_corpus_is_not_empty():
    assert NAMES, "benchmarks.kernels.NAMES is empty"
    assert len(set(NAMES)) == len(NAMES), "benchmarks.kernels.NAMES has duplicates"


@pytest.mark.parametrize("name", NAMES)
def test_kernel_is_well_formed(name):
    mod = kernels.load(name)
    params = list(inspect.signature(mod.kernel).parameters)
    assert isinstance(mod.WRT, tuple) and mod.WRT, f"{name}: WRT must be a non-empty tuple of names"
    for w in mod.WRT:
        assert w in params, f"{name}: WRT entry {w!r} is not a parameter of kernel{tuple(params)}"
    args = mod.args("test")
    assert isinstance(args, tuple) and len(args) == len(params), f"{name}: args() must match kernel's parameters"
    for w in mod.WRT:
        assert is_float_arg(args[params.index(w)]), f"{name}: WRT argument {w!r} is not float"
    value = mod.kernel(*mod.args("test"))
    assert np.ndim(value) == 0 and np.isfinite(float(value)), f"{name}: kernel must return a finite float scalar"
    again, other = mod.args("test", seed=0), mod.args("test", seed=1)
    for a, b in zip(args, again):
        assert np.array_equal(a, b), f"{name}: args('test', seed=0) is not deterministic"
    floats = [(a, b) for a, b in zip(args, other) if is_float_arg(a)]
    assert any(not np.array_equal(a, b) for a, b in floats), f"{name}: seed does not change the inputs"
    if hasattr(mod, "jax_kernel"):
        jparams = list(inspect.signature(mod.jax_kernel).parameters)
        assert jparams == params, f"{name}: jax_kernel{tuple(jparams)} differs from kernel{tuple(params)}"


@pytest.mark.parametrize("name", NAMES)
def test_forward(name, backend):
    mod = kernels.load(name)
    check_forward(mod.kernel, mod.args("test"), backend=backend)


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("name", NAMES)
def test_grad(name, seed, backend):
    mod = kernels.load(name)
    check_grad(mod.kernel, mod.args("test", seed=seed), mod.WRT, backend=backend)
