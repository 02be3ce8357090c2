"""Engines: the only code that knows local, ray, deepspeed and mpi.

`config` holds each engine's typed ``engine:`` block and capabilities, `base` the primitives every
engine offers, `registry` the table of engines and the checks made before a run. Runners see only
`Engine`.
"""
