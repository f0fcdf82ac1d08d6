"""tilepy.parallel: communicators, collective algorithms with a specified order, topology,
cost model, compression and overlap. Works on numpy arrays; does not depend on the IR.
"""
