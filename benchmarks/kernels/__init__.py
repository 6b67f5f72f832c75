"""flowgrad benchmark/test corpus: unmodified-NumPy kernels (PolyBench/NPBench-style patterns).

Each module defines ``kernel(*args) -> float``, ``WRT`` (names of float64 arguments to
differentiate), ``SIZES`` ({"test": ..., "bench": ...}), ``args(size="test", seed=0)`` and either
``jax_kernel`` (same signature/result, written with lax.fori_loop / .at[] as a JAX user must;
needs ``jax_enable_x64``; integer arguments must be static under jit) or ``JAX_NOTE``.
"""
import importlib

NAMES = sorted([
    "adi", "arc_distance", "atax", "attention", "bicg", "binomial_option", "burgers_1d",
    "cavity_flow", "cg_solver", "cholesky", "conv2d_bias", "correlation", "covariance",
    "crank_nicolson", "deriche", "doitgen", "durbin", "fdtd_2d", "floyd_warshall_soft", "gemm",
    "gemver", "gesummv", "gnn_scatter", "go_fast", "gramschmidt", "hdiff", "heat_1d_explicit",
    "heat_3d", "implicit_euler", "jacobi_1d", "jacobi_2d", "k2mm", "k3mm", "layernorm", "lenet",
    "lif_neurons", "linalg_cholesky", "logsumexp", "lu", "ludcmp", "masked_histogram", "mlp", "mvt",
    "nbody", "nonlinear_diffusion_2d",
    "piecewise_recurrence",
    "resnet_block", "rk4_ode", "rnn", "seidel_2d", "softmax", "spmv_csr", "subcycled_reaction_diffusion",
    "symm", "syr2k", "syrk",
    "trisolv", "trmm", "vadv", "while_solver",
])


def load(name):
    """Import and return the kernel module ``benchmarks.kernels.<name>``."""
    if name not in NAMES:
        raise KeyError("unknown kernel %r" % (name,))
    return importlib.import_module("." + name, __name__)
