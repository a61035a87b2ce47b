"""What a run gives its user, from its records: :mod:`~simkit.output.report` (the summary:
TTFT, ITL, E2E percentiles, throughput, goodput under the SLA, worker-seconds; and the terminal
text), :mod:`~simkit.output.files` (the run folder, written atomically: ``requests.parquet``,
``summary.json`` with its ``run_digest``, ``scenario.resolved.yaml``, ``timeline.json``),
:mod:`~simkit.output.spool` (request records spooled to Parquet during a long run),
:mod:`~simkit.output.plots` (latency CDFs, pass timelines, worker and planner series, Pareto
fronts; the only matplotlib importer) and :mod:`~simkit.output.progress` (a tqdm bar). May
import :mod:`simkit.core`, :mod:`simkit.spec`, numpy, pyarrow, matplotlib and tqdm; must not
import the simulation (workload, engine, cluster, the composition root) or the CLI: results
reach it as :class:`~simkit.core.records.RunRecords`.
"""
