"""simkit: a SimPy simulator of LLM inference serving (aggregated and disaggregated).

Public API::

    import simkit
    result = simkit.run("scenarios/disagg.yaml", {"pools.decode.workers": 4})
    result.summary["ttft_ms"]        # the same numbers as summary.json
    result.requests                  # pandas DataFrame, one row per request
    result.plot_cdf(other_result)    # matplotlib Figure
    result.save("runs/mine")         # the CLI's files; simkit.load_result(...) reads them back

Lower level: ``load_scenario``, ``override``, ``simulate`` (returns RunRecords), ``summarize``.
"""

__version__ = "0.1.0"

from simkit.spec import ConfigError, Scenario  # noqa: E402
from simkit.output.report import summarize  # noqa: E402
from simkit.sim import build, load_scenario, override, scenario_from_dict, simulate  # noqa: E402
from simkit.api import Result, load_result, run  # noqa: E402

__all__ = ["ConfigError", "Result", "Scenario", "build", "load_result", "load_scenario", "override",
           "run", "scenario_from_dict", "simulate", "summarize", "__version__"]
