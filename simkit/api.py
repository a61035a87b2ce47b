"""The Python API that notebooks and scripts use, exactly as the CLI does.

``run(scenario, overrides)`` loads (from a YAML path or a dict), overrides, simulates and
returns a :class:`Result`: the summary, the per-request rows as a pandas DataFrame, the raw
records and plot helpers; ``Result.save(dir)`` writes the CLI's files and
:func:`load_result` reads them back (records aside). The Python face: may import every package but the CLI.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, Mapping, Optional, Sequence, Union

from simkit.spec import ConfigError, Scenario, yaml_load
from simkit.output.files import read_request_rows, read_run_json, read_run_text, rows_table, write_run
from simkit.cluster.plugins import policy_factory
from simkit.core.records import RunRecords
from simkit.output.report import render_text, request_rows, summarize
from simkit.core.request import Request
from simkit.sim import build, input_files, load_scenario, override, record_inputs, scenario_from_dict

__all__ = ["Result", "load_result", "run"]


class Result:
    """One run: ``scenario``, ``summary`` (dict, as in summary.json), ``requests`` (a pandas
    DataFrame with one row per request, times in ms) and ``records`` (the raw
    :class:`~simkit.core.records.RunRecords`; None for a result loaded from a folder)."""

    def __init__(self, scenario: Scenario, summary: dict, requests, records: Optional[RunRecords] = None,
                 label: Optional[str] = None) -> None:
        self.scenario = scenario
        self.summary = summary
        self.requests = requests
        self.records = records
        self.label = label or scenario.name

    def __repr__(self) -> str:
        c = self.summary["requests"]
        return f"<Result {self.label!r}: {c['completed']}/{c['total']} completed>"

    def table(self) -> str:
        """The terminal summary table."""
        return render_text(self.summary, title=f"{self.label} ({self.scenario.mode})")

    def plot_cdf(self, *others: "Result", sla: bool = True):
        """A Figure of TTFT and ITL CDFs of this run, with ``others`` overlaid."""
        from simkit.output.plots import latency_cdf

        runs = [(r.label, r.requests) for r in (self, *others)]
        return latency_cdf(runs, self.scenario.sla if sla else None)

    def plot_passes(self, until_s: Optional[float] = None):
        """A Figure: per-worker Gantt chart of forward passes (needs ``record_passes``)."""
        from simkit.output.plots import pass_timeline

        return pass_timeline(self._records(), until_s)

    def plot_series(self):
        """A Figure: KV usage, batch size per worker and queue depth over time (needs
        ``record_passes``)."""
        from simkit.output.plots import worker_series

        return worker_series(self._records())

    def plot_planner(self):
        """A Figure: workers per pool, queues, KV usage, TTFT and ITL over time (needs a
        ``planner``)."""
        from simkit.output.plots import planner_series

        return planner_series(self._records(), self.scenario.sla)

    def _records(self) -> RunRecords:
        if self.records is None:
            raise ValueError("a result loaded from a folder has no records")
        return self.records

    def save(self, out_dir: str, force: bool = False, plots: bool = True) -> str:
        """Write the CLI's files (summary.json, requests.jsonl/.parquet, scenario.resolved.yaml,
        latency_cdf.png, run_info.json) to ``out_dir``; returns it.

        Raises:
            FileExistsError: ``out_dir`` is not empty and ``force`` is False.
            ValueError: a loaded result (no records) cannot be saved again; ``out_dir`` is, or
                holds, the current folder or a file the run read (even with ``force``).
        """
        if self.records is None:
            raise ValueError("a result loaded from a folder has no records to save")
        figures = {"latency_cdf": self.plot_cdf()} if plots else {}
        if plots and self.records.pool_samples is not None:
            figures["planner"] = self.plot_planner()
        keep = [os.getcwd(), *(path for _, path in input_files(self.scenario))]
        write_run(out_dir, self.scenario, self.records, self.summary, {"api": True}, figures, force, keep)
        return out_dir


def _scenario(scenario: Union[str, os.PathLike, Mapping, Scenario],
              overrides: Optional[Mapping[str, Any]]) -> Scenario:
    if isinstance(scenario, Scenario):
        base = scenario
    elif isinstance(scenario, Mapping):
        base = scenario_from_dict(dict(scenario), source="<dict>")
    else:
        try:
            return load_scenario(os.fspath(scenario), list((overrides or {}).items()))
        except ConfigError as exc:  # the loader names a bad override as the CLI's --set; here it is an override
            raise ConfigError([("override " + m[len("--set "):]) if m.startswith("--set ") else m
                               for m in exc.messages]) from None
    return override(base, dict(overrides)) if overrides else base


def run(scenario: Union[str, os.PathLike, Mapping, Scenario], overrides: Optional[Mapping[str, Any]] = None,
        requests: Optional[Sequence[Request]] = None, check: bool = False, label: Optional[str] = None,
        progress: bool = False, record_passes: bool = False, router=None, planner=None) -> Result:
    """Simulate a scenario (a YAML path, a dict or a :class:`Scenario`) with dotted
    ``overrides`` (``{"pools.decode.workers": 4}``) and return its :class:`Result`.
    ``record_passes`` keeps every forward pass (for :meth:`Result.plot_passes`,
    :meth:`Result.plot_series` and the saved ``timeline.json``).

    ``router`` / ``planner`` replace the scenario's routing / planner policy with your own
    (protocols in :mod:`simkit.cluster.router` and :mod:`simkit.cluster.planner`): a class (built with no
    argument, once per decision point) or an instance (shared). A planner policy needs the
    scenario to have a ``planner`` section (its ``interval_s`` and ``gpu_budget`` apply).

    Raises:
        simkit.ConfigError: an invalid scenario or override (one message per problem), or a
            policy without its protocol's method.
        simkit.workload.TraceError: the workload's trace file is missing or malformed.
        ValueError: ``overrides`` that are not a mapping; ``requests`` that are not a non-empty
            sequence of valid requests (each problem named as a trace line's would be).
    """

    if overrides is not None and not isinstance(overrides, Mapping):
        raise ValueError(f"overrides: expected a mapping of dotted field to value "
                         f"({{'pools.decode.workers': 4}}), got {type(overrides).__name__}")
    if requests is not None:
        if isinstance(requests, (str, bytes, Mapping)) or not isinstance(requests, Iterable):
            raise ValueError(f"requests: expected a sequence of simkit.Request, got {type(requests).__name__}")
        requests = list(requests)
        if not requests:
            raise ValueError("requests: empty; expected at least one simkit.Request (an empty trace is refused too)")
    s = record_inputs(_scenario(scenario, overrides))  # saved with the result: a rerun checks them
    if planner is not None and s.planner is None:
        raise ConfigError(["planner: the scenario has no 'planner' section to run this policy in "
                           "(add e.g. planner: {kind: static, interval_s: 10})"])
    sim = build(s, requests, record_token_times=True, record_passes=record_passes,
                router_policy=None if router is None else policy_factory(router, "router"),
                planner_policy=None if planner is None else policy_factory(planner, "planner"))
    if progress:
        from simkit.output.progress import attach_progress

        attach_progress(sim)
    records = sim.run(check=check)
    summary = summarize(records, s.sla)
    # typed like requests.parquet, so a saved and reloaded result has the same dtypes
    return Result(s, summary, rows_table(request_rows(records)).to_pandas(), records, label)


def load_result(out_dir: str, label: Optional[str] = None) -> Result:
    """Read a run folder written by the CLI or :meth:`Result.save` (records are not kept).

    It needs nothing but the folder: the scenario is read as it was resolved, without looking
    for the files it names (a trace moved or deleted since, a Python policy, a pass table).
    Rerunning it is another matter: :func:`simkit.load_scenario` checks its recorded inputs.

    Raises:
        FileNotFoundError: the folder lacks summary.json or the request rows.
        NotADirectoryError: ``out_dir`` is a file, not a folder.
        ValueError: a file that is not UTF-8 or JSON, a corrupt requests.parquet, a malformed
            line of requests.jsonl (each message names the file, and the line where there is one),
            request rows that are not the summary's ``requests.total``.
        simkit.ConfigError: its scenario.resolved.yaml is not a valid scenario.
    """
    from simkit import spec

    if os.path.lexists(out_dir) and not os.path.isdir(out_dir):
        raise NotADirectoryError(f"{out_dir}: not a simkit run folder (expected a folder holding summary.json)")
    summary = read_run_json(os.path.join(out_dir, "summary.json"))
    path = os.path.join(out_dir, "scenario.resolved.yaml")
    scenario = spec.scenario_from_dict(yaml_load(read_run_text(path), path), source=path, resolve=None)
    frame = read_request_rows(out_dir).to_pandas()
    counts = summary.get("requests") if isinstance(summary, dict) else None
    total = counts.get("total") if isinstance(counts, dict) else None
    if isinstance(counts, dict) and (isinstance(total, bool) or not isinstance(total, int) or total != len(frame)):
        raise ValueError(f"{os.path.join(out_dir, 'summary.json')}: requests.total is {total!r} but the folder's "
                         f"request rows hold {len(frame)}: a damaged or edited run folder")
    return Result(scenario, summary, frame, None, label or os.path.basename(os.path.normpath(out_dir)))
