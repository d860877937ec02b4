"""Shadow models: pure-Python specifications of who owns what, one per pool family.

A model never reads a pool's internals to decide what should be true; drivers
update it from what the contract says a call must have done.
"""
