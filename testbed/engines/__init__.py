"""Engines place a run's work on workers; runners only see the small `Engine` interface."""

from testbed.engines.base import Engine, InProcessEngine, make_engine, preflight_engine

__all__ = ["Engine", "InProcessEngine", "make_engine", "preflight_engine"]
