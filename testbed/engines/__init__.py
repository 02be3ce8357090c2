"""Engines: the only code that knows local, ray, deepspeed and mpi.

`config` holds each engine's typed ``engine:`` block and capabilities (the declaration the registry
of engines is derived from), `base` the primitives every engine offers, `registry` the engine class
a run's settings name and the checks made before a run. Runners see only `Engine`.
"""
