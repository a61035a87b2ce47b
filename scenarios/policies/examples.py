"""Example user policies for simkit, plugged in by scenarios/custom_policies.yaml.

A router policy is a class built as ``Class(params)`` (``params``: the scenario's free-form
mapping) with ``pick(request, workers)`` returning one of ``workers``. Each worker shows, read
only: ``wid``, ``kv_blocks_in_use``, ``kv_capacity_blocks``, ``queued_prefill_tokens`` and
``cached_prompt_blocks(request) -> (cached, total)``; ``request`` has ``rid``,
``input_length``, ``output_length``, ``session`` (see simkit.request.Request).

A planner policy is built the same way and has ``plan(snapshot)`` returning
``simkit.planner.Decision(targets={pool: workers}, next_tick_s=None)`` or just the
``{pool: workers}`` dict (see simkit.planner.Snapshot for what it is shown).
"""

from __future__ import annotations

import math

from simkit.planner import Decision


class ShortestPromptQueue:
    """Send each request where the least prompt work waits, counting the prompt blocks a worker
    already caches as free: cost = queued prefill tokens + uncached prompt tokens; ties go
    to the lowest index."""

    def __init__(self, params: dict) -> None:
        self.block_tokens = int(params.get("block_tokens", 64))

    def pick(self, request, workers):
        def cost(w):
            cached, total = w.cached_prompt_blocks(request)
            return (w.queued_prefill_tokens + request.input_length - cached * self.block_tokens, w.wid)

        return min(workers, key=cost)


class QueuedTokensPlanner:
    """Size each prompt pool so its queued prompt tokens clear in ``drain_s`` seconds at
    ``tokens_per_s_per_worker``; size the decode pool by KV usage (one more worker above
    ``kv_high``, one fewer below ``kv_low``). Ticks faster (``busy_tick_s``) while prompts queue."""

    def __init__(self, params: dict) -> None:
        self.rate = float(params.get("tokens_per_s_per_worker", 40000))
        self.drain_s = float(params.get("drain_s", 2.0))
        self.kv_high = float(params.get("kv_high", 0.5))
        self.kv_low = float(params.get("kv_low", 0.1))
        self.busy_tick_s = float(params.get("busy_tick_s", 2.0))

    def plan(self, snap):
        targets = {}
        busy = False
        for name, pool in snap.pools.items():
            if name == "decode":
                if pool.kv_usage > self.kv_high:
                    targets[name] = pool.target + 1
                elif pool.kv_usage < self.kv_low:
                    targets[name] = pool.target - 1
                continue
            queued = pool.queued_prefill_tokens
            busy = busy or queued > 0
            targets[name] = max(1, math.ceil(queued / (self.rate * self.drain_s)))
        return Decision(targets, next_tick_s=self.busy_tick_s if busy else None)
