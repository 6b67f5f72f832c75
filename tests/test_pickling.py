"""Transforms pickle (to another process, a Dask worker): the function and its options travel,
nothing compiled; the other process compiles once or finds the native code in the shared cache."""
import pickle
import subprocess
import sys
import textwrap

import numpy as np

import flowgrad

KERNEL = '''
import numpy as np

def heat(u, kappa, steps):
    for t in range(steps):
        u[1:-1] += kappa * (u[2:] - 2.0 * u[1:-1] + u[:-2])
    return np.sum(u * u)
'''


def _module(tmp_path):
    (tmp_path / "picklekernel.py").write_text(KERNEL)
    sys.path.insert(0, str(tmp_path))
    import picklekernel
    return picklekernel


def test_transforms_pickle_into_working_functions_in_another_process(tmp_path, backend):
    mod = _module(tmp_path)
    try:
        transforms = {
            "grad": flowgrad.grad(mod.heat, wrt=("u", "kappa"), backend=backend),
            "value_and_grad": flowgrad.value_and_grad(mod.heat, wrt="kappa", backend=backend,
                                                      memory_budget="1MiB"),
            "jit": flowgrad.jit(mod.heat, backend=backend),
            "jacfwd": flowgrad.jacfwd(mod.heat, wrt="kappa", backend=backend),
            "hessian": flowgrad.hessian(mod.heat, wrt="kappa", backend=backend),
        }
        u = np.linspace(0.0, 1.0, 9) ** 2
        args = (u, 0.2, 5)
        expected = {k: t(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args])
                    for k, t in transforms.items()}
        blob = tmp_path / "transforms.pkl"
        blob.write_bytes(pickle.dumps((transforms, args)))
        # the same objects back in this process work too
        again = pickle.loads(blob.read_bytes())[0]
        assert again["value_and_grad"].memory_budget == 1 << 20
        script = textwrap.dedent(f"""
            import pickle, sys
            import numpy as np
            sys.path.insert(0, {str(tmp_path)!r})
            transforms, args = pickle.loads(open({str(blob)!r}, "rb").read())
            out = {{k: t(*[np.copy(a) if isinstance(a, np.ndarray) else a for a in args]) for k, t in transforms.items()}}
            sys.stdout.buffer.write(pickle.dumps(out))
        """)
        run = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=600)
        assert run.returncode == 0, run.stderr.decode()[-2000:]
        got = pickle.loads(run.stdout)
        for k in expected:
            for a, b in zip(np.atleast_1d(np.asarray(expected[k], dtype=object)).ravel(),
                            np.atleast_1d(np.asarray(got[k], dtype=object)).ravel()):
                np.testing.assert_allclose(np.asarray(b, dtype=float), np.asarray(a, dtype=float), rtol=1e-14,
                                           err_msg=k)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("picklekernel", None)
