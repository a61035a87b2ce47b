"""simkit: a SimPy simulator of LLM inference serving (aggregated and disaggregated).

Public API::

    import simkit
    scenario = simkit.load_scenario("scenarios/disagg.yaml")
    records = simkit.simulate(scenario)
    summary = simkit.summarize(records, scenario.sla)
"""

__version__ = "0.1.0"

from simkit.config import ConfigError, Scenario, load_scenario, override, scenario_from_dict  # noqa: E402
from simkit.report import summarize  # noqa: E402
from simkit.sim import build, simulate  # noqa: E402

__all__ = ["ConfigError", "Scenario", "build", "load_scenario", "override", "scenario_from_dict",
           "simulate", "summarize", "__version__"]
