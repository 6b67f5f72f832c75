"""flowgrad's benchmarks (``benchmarks/README.md``).

They time native code once it is compiled: its first calls compile it here rather than run by
the NumPy backend while another process compiles (``FLOWGRAD_TIERED``), except where
``first_call`` measures that tiering itself, in processes of its own.
"""
import os

os.environ.setdefault("FLOWGRAD_TIERED", "0")
