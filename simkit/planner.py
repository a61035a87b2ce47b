"""Public home of the planner-policy protocol (``simkit.planner.Decision`` and what a policy's
``plan(snapshot)`` is shown); the planner process and the built-in policies live in
:mod:`simkit.cluster.planner`."""

from simkit.cluster.planner import (Decision, PoolView, SlaPolicy, Snapshot, StaticPolicy, ThresholdPolicy,
                                    Traffic, WorkerView)

__all__ = ["Decision", "PoolView", "SlaPolicy", "Snapshot", "StaticPolicy", "ThresholdPolicy", "Traffic",
           "WorkerView"]
