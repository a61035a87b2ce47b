"""The SimPy processes of a simulated cluster and the messages between them:
:mod:`~simkit.cluster.source` (arrivals, session turns, the closed loop),
:mod:`~simkit.cluster.router` (routing policies and the router queue),
:mod:`~simkit.cluster.pool` and :mod:`~simkit.cluster.worker` (a pool of engines, each driven
pass by pass through :mod:`simkit.engine`, runs of identical decode passes fast-forwarded),
:mod:`~simkit.cluster.link` (the KV handoff between prefill and decode),
:mod:`~simkit.cluster.planner` (autoscaling and the planner-policy protocol),
:mod:`~simkit.cluster.collector` (the records: TTFT, ITL, worker-seconds) with
:mod:`~simkit.cluster.probe` (what model code reports to it), :mod:`~simkit.cluster.messages`
(what travels through the Stores) and :mod:`~simkit.cluster.plugins` (loading users' router and
planner policies). They talk only through SimPy Stores and Resources and are wired by the
composition root, :mod:`simkit.sim`. May import simpy, :mod:`simkit.core`, :mod:`simkit.spec`
and :mod:`simkit.engine`; must not import the workload readers (the composition root hands the
source its requests), the composition root, output or the CLI.
"""
