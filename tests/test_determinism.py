"""The same program and signature give the same generated source in every process (DESIGN.md,
"Determinism and caching"): otherwise the on-disk compile cache misses and every new process
recompiles. Python's set order changes with the hash seed, so the source is generated under two
seeds and compared."""
import subprocess
import sys

from conftest import REPO_ROOT

# kernels with branches, while loops and tapes inside loops: where iteration order could leak
KERNELS = ("vadv", "cavity_flow", "while_solver", "piecewise_recurrence", "implicit_euler", "lenet")

SCRIPT = """
import hashlib, flowgrad
from benchmarks import kernels
for name in {kernels!r}:
    m = kernels.load(name)
    a = m.args("test")
    src = flowgrad.grad(m.kernel, wrt=m.WRT, backend={backend!r}).source(*a)
    print(name, hashlib.sha256(src.encode()).hexdigest())
"""


def _sources(backend, seed):
    env = {"PYTHONHASHSEED": str(seed), "PATH": "", "PYTHONPATH": str(REPO_ROOT)}
    out = subprocess.run([sys.executable, "-c", SCRIPT.format(kernels=KERNELS, backend=backend)],
                         env=env, cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    return out.stdout


def test_generated_source_does_not_depend_on_the_hash_seed(backend):
    assert _sources(backend, 1) == _sources(backend, 2)
