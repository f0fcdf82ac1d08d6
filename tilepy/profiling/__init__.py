"""The profiler: `with tilepy.profile() as p:` records every kernel launch (wall time, the
IR's flop and byte counts) and reports achieved GFLOP/s and GB/s against this machine's
measured roofline, as a table, a roofline PNG or a Chrome/Perfetto trace. See docs/profile.md.
"""

from tilepy.profiling.session import Launch, Profile, do_bench, profile

__all__ = ["Launch", "Profile", "do_bench", "profile"]
