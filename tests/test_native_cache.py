"""The native backend's on-disk cache cannot be turned against its user: a file planted under the
name flowgrad would give its generated source is never run, the directory flowgrad creates is
private, and one that other users can write to is refused."""
import os
import stat
import sys

import numpy as np
import pytest

import flowgrad
from flowgrad.backends import native_kernel

pytestmark = [pytest.mark.native,
              pytest.mark.skipif(not native_kernel.available(), reason="needs numba (the native backend)"),
              pytest.mark.skipif(not hasattr(os, "getuid"), reason="POSIX permissions")]

SRC = '''import numpy as np
import numba

@numba.njit(cache=True)
def twice(x, _ws, _out):
    return 2.0 * x, _ws

WORKSPACE_twice = ()
OUTPUTS_twice = ()
'''


def test_a_planted_file_is_not_run(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWGRAD_CACHE_DIR", str(tmp_path / "cache"))
    marker = tmp_path / "planted-code-ran"
    # the name compile_source gives this source: plant a file there first
    native_kernel.compile_source(SRC, "twice")
    path = [p for p in (tmp_path / "cache").iterdir() if p.suffix == ".py"][0]
    modname = path.stem
    sys.modules.pop(modname, None)
    path.write_text(f"open({str(marker)!r}, 'w').write('ran')\n" + SRC.replace("2.0 * x", "666.0 * x"))
    k = native_kernel.compile_source(SRC, "twice")
    assert k(3.0) == 6.0
    assert not marker.exists()
    assert path.read_text() == SRC          # the planted file was replaced by the generated source
    sys.modules.pop(modname, None)


def test_the_cache_directory_is_private_and_others_cannot_write_it(tmp_path, monkeypatch):
    cache = tmp_path / "fresh"
    monkeypatch.setenv("FLOWGRAD_CACHE_DIR", str(cache))
    assert native_kernel.cache_dir() == str(cache)
    assert stat.S_IMODE(os.stat(cache).st_mode) & 0o077 == 0
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    monkeypatch.setenv("FLOWGRAD_CACHE_DIR", str(shared))
    with pytest.raises(flowgrad.FlowgradError, match=r"cache directory .*shared is writable by others .*chmod 700"):
        flowgrad.jit(lambda x: np.sin(x) * 2.0, backend="native")(np.ones(3))
    # Numba's own cache files live in __pycache__: the same holds there
    os.chmod(shared, 0o700)
    (shared / "__pycache__").mkdir(exist_ok=True)
    os.chmod(shared / "__pycache__", 0o777)
    with pytest.raises(flowgrad.FlowgradError, match=r"__pycache__ is writable by others"):
        native_kernel.cache_dir()
