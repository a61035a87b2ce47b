"""``python -m simkit recommend SCENARIO.yaml --gpus N [--target goodput_per_gpu | min_gpus]
[--sla-fraction F] [--space KEY=V1,V2,... | KEY=LOW..HIGH ...] [--trials N] [--sampler tpe |
random | grid] [--seed S] [--top K] [--gpu-cost-per-hour C] [--set ...] [--trace FILE] [--out
DIR] [--force] [--jobs N | --scheduler ADDRESS]``: what to deploy for this traffic and SLA
within a GPU budget.

The search space (:func:`default_space`, each ``--space`` replacing or adding one knob):
``mode`` (aggregated, disaggregated); per pool the tensor-parallel size (``tp`` aggregated,
``prefill_tp`` and ``decode_tp``; with a roofline or aic latency model only, the sizes the model's
heads divide and the GPU's memory holds) and the workers (``workers``, ``prefill_workers``,
``decode_workers``, cut to the budget: a configuration always fits it); ``max_num_seqs``,
``max_num_batched_tokens`` (every pool) and ``router`` (the router kind). A ``--space`` key
with a dot is any scenario field (``pools.decode.backend=vllm,sglang``); a plain PoolSpec field
name applies to every pool. Values are YAML scalars; ``LOW..HIGH`` is an integer range.

Each trial runs the scenario (its seed: rerunning a ranked YAML reproduces its row) on local
processes or a Dask cluster. Trials are asked of the sampler four at a time and told in order,
so a seed gives the same trials on any machine and for any ``--jobs``: Optuna's TPE sampler
(default) or its random sampler, or a grid (every combination in order, ``--trials`` at
most); without Optuna installed, a seeded random search. The score (``--target``):
``goodput_per_gpu`` = output tokens/s of the requests within the SLA per GPU, for a
configuration where at least ``--sla-fraction`` of the requests meet it;
``min_gpus`` = the fewest GPUs that meet it (ties: the higher goodput per GPU). Configurations
that miss the SLA rank after every one that meets it, by their SLA fraction.

Writes ``recommend.csv`` (every trial, ranked), ``ranked/NN.yaml`` (the top ``--top``
configurations as resolved scenarios that rerun as they are: ``python -m simkit
OUT/ranked/01.yaml``), ``pareto.png`` (output tokens/s per GPU against tokens/s per user, the
SLA-meeting ones marked) and each trial's run under ``trials/``; prints the top of the table
and the answer, or, when nothing within the budget meets the SLA, the closest configuration
and the bound it misses. Part of :mod:`simkit.cli`.
"""

from __future__ import annotations

import itertools
import math
import os
import random
import shutil
import sys
from typing import Any, Optional, Sequence

from simkit.cli.batch import (OutputFolder, add_batch_arguments, batch_problem, batch_scenario, run_batch,
                              run_points, say)
from simkit.cli.capacity import BOUND_NAMES, binding_bound
from simkit.cli.common import _fail, _Parser
from simkit.cli.common import yaml_text
from simkit.cli.sweep import _split_values
from simkit.sim import load_scenario
from simkit.spec import ConfigError, Scenario, dump_scenario, yaml_load
from simkit.spec import load_scenario as load_unresolved
from simkit.spec import to_dict

#: trials asked of the sampler at once (fixed, so results do not depend on --jobs)
BATCH = 4
#: tensor-parallel sizes offered by default
TP_SIZES = (1, 2, 4, 8)
#: the default space's values of the engine knobs
DEFAULT_MAX_NUM_SEQS = (64, 128, 256, 512)
DEFAULT_MAX_NUM_BATCHED_TOKENS = (2048, 4096, 8192, 16384)
DEFAULT_ROUTERS = ("round_robin", "kv_aware")
#: the knobs that shape the deployment (every other knob is a scenario field)
LAYOUT = ("mode", "tp", "workers", "prefill_tp", "prefill_workers", "decode_tp", "decode_workers")
#: score of a trial that failed to run
FAILED_SCORE = -1e12


class Knob:
    """One dimension of the space: ``values`` (a list) or an integer range ``low..high``."""

    def __init__(self, name: str, values: Optional[list] = None, low: Optional[int] = None,
                 high: Optional[int] = None) -> None:
        self.name, self.values, self.low, self.high = name, values, low, high

    @property
    def choices(self) -> list:
        return list(self.values) if self.values is not None else list(range(self.low, self.high + 1))

    def suggest(self, trial) -> Any:
        if self.values is not None:
            index = trial.suggest_categorical(self.name, list(range(len(self.values))))
            return self.values[index]  # (by index: Optuna's categorical choices must be plain scalars)
        return trial.suggest_int(self.name, self.low, self.high)

    def draw(self, rng: random.Random) -> Any:
        return rng.choice(self.choices)


def parse_space(items: Sequence[str]) -> dict[str, Knob]:
    """``--space`` items: ``KEY=V1,V2,...`` (YAML values, commas in brackets kept) or
    ``KEY=LOW..HIGH`` (integers).

    Raises:
        ConfigError: a malformed item.
    """
    out = {}
    for item in items:
        key, sep, text = item.partition("=")
        key, text = key.strip(), text.strip()
        if not sep or not key or not text:
            raise ConfigError([f"--space {item!r}: expected KEY=V1,V2,... or KEY=LOW..HIGH, e.g. decode_workers=1..8"])
        low, dots, high = text.partition("..")
        if dots:
            try:
                lo, hi = int(low), int(high)
            except ValueError:
                raise ConfigError([f"--space {key}: a range is LOW..HIGH of integers, got {text!r}"]) from None
            if not 0 <= lo <= hi:
                raise ConfigError([f"--space {key}: expected 0 <= LOW <= HIGH, got {text!r}"])
            out[key] = Knob(key, low=lo, high=hi)
        else:
            out[key] = Knob(key, [yaml_load(v.strip(), source=f"--space {key}") for v in _split_values(text)])
    return out


def _tp_capable(scenario: Scenario) -> bool:
    return scenario.latency.kind in ("roofline", "aic")


def default_space(scenario_path: str, common: list, base: Scenario, unresolved: Scenario,
                  gpus: int) -> dict[str, Knob]:
    """The space searched when ``--space`` does not say otherwise (module docstring); tensor-
    parallel sizes only where the latency model prices them, and only those it can build."""
    space = {"mode": Knob("mode", ["aggregated", "disaggregated"])}
    tps = [1]
    if _tp_capable(base):
        tps = []
        latency = to_dict(unresolved)["latency"]  # canonical names (a file's 'tp' alias included)
        for tp in TP_SIZES:
            if tp > gpus:
                continue
            try:
                load_scenario(scenario_path, common + [("latency", dict(latency, tensor_parallel_size=tp))])
            except ConfigError:  # the model's heads do not divide, or its weights do not fit
                continue
            tps.append(tp)
        tps = tps or [base.latency.tensor_parallel_size]
    for name in ("tp", "prefill_tp", "decode_tp"):
        space[name] = Knob(name, tps)
    for name in ("workers", "prefill_workers", "decode_workers"):
        space[name] = Knob(name, low=1, high=max(1, gpus // min(tps)))
    space["max_num_seqs"] = Knob("max_num_seqs", list(DEFAULT_MAX_NUM_SEQS))
    space["max_num_batched_tokens"] = Knob("max_num_batched_tokens", list(DEFAULT_MAX_NUM_BATCHED_TOKENS))
    space["router"] = Knob("router", list(DEFAULT_ROUTERS))
    return space


class Layout:
    """Turns a configuration (knob -> value) into scenario overrides, from the unresolved base
    scenario's pools (an aggregated pool becomes the template of both disaggregated ones, and
    the decode pool that of an aggregated one)."""

    def __init__(self, unresolved: Scenario, pool_fields: set) -> None:
        data = to_dict(unresolved)
        pools = data["pools"]
        self.agg = pools.get("aggregated") or dict(pools["decode"])
        self.prefill = pools.get("prefill") or dict(pools["aggregated"])
        self.decode = pools.get("decode") or dict(pools["aggregated"])
        self.latency = data["latency"]
        self.tp_capable = unresolved.latency.kind in ("roofline", "aic")
        self.mode = unresolved.mode
        self.has_link = data.get("link") is not None
        self.pool_fields = pool_fields

    def overrides(self, config: dict, gpus: int) -> tuple[list, int]:
        """``(overrides, GPUs)`` of ``config``, its workers cut to ``gpus`` (in order: the
        decode workers first, then the prefill workers, down to one each; ``config``'s worker
        knobs are set to the counts run)."""
        mode = config.get("mode", self.mode)
        names = ["aggregated"] if mode == "aggregated" else ["prefill", "decode"]
        tps = {n: config.get("tp" if n == "aggregated" else f"{n}_tp") for n in names}
        workers = {n: config.get("workers" if n == "aggregated" else f"{n}_workers") for n in names}
        pools = {}
        for n in names:
            pool = dict(self.agg if n == "aggregated" else self.prefill if n == "prefill" else self.decode)
            if n != "aggregated":
                pool["speculative"] = pool.get("speculative") if n == "decode" else None
                if isinstance(pool.get("sglang"), dict):
                    pool["sglang"] = dict(pool["sglang"], enable_mixed_chunk=False)
            if tps[n] is not None and self.tp_capable:
                pool["latency"] = dict(pool.get("latency") or self.latency, tensor_parallel_size=tps[n])
                pool["tensor_parallel_size"] = tps[n]
            for key, value in config.items():
                if key in self.pool_fields:
                    pool[key] = value
            if workers[n] is not None:
                pool["workers"] = workers[n]
            pools[n] = pool
        # fit the budget: fewer decode workers first, then prefill ones
        per = {n: (pools[n].get("tensor_parallel_size") or 1) * (pools[n].get("data_parallel_size") or 1)
               for n in names}
        for n in reversed(names):
            while pools[n]["workers"] > 1 and sum(pools[m]["workers"] * per[m] for m in names) > gpus:
                pools[n]["workers"] -= 1
        used = sum(pools[m]["workers"] * per[m] for m in names)
        for n in names:
            knob = "workers" if n == "aggregated" else f"{n}_workers"
            config[knob] = pools[n]["workers"]
        out: list = [("pools", pools)]
        if mode == "aggregated" and self.has_link:  # the handoff link is a disaggregated cluster's only
            out.append(("link", None))
        if "router" in config:
            out.append(("router", {"kind": config["router"]}))
        for key, value in config.items():
            if "." in key:
                out.append((key, value))
        return out, used


def _normalised(config: dict, mode_default: str) -> dict:
    """``config`` without the knobs its mode does not use (an aggregated one has no prefill_tp)."""
    mode = config.get("mode", mode_default)
    unused = ("prefill_tp", "prefill_workers", "decode_tp", "decode_workers") if mode == "aggregated" else (
        "tp", "workers")
    return {k: v for k, v in config.items() if k not in unused}


def score(outcome: dict, gpus: int, target: str, fraction: float, budget: int) -> float:
    """A trial's score for the sampler (higher is better; module docstring)."""
    summary = outcome.get("summary") or {}
    good = summary.get("goodput") or {}
    got = good.get("fraction")
    if outcome["status"] != "ok" or got is None:
        return FAILED_SCORE
    per_gpu = (good.get("output_tokens_per_s") or 0.0) / gpus
    if got < fraction:  # behind every one that meets it, closer the nearer it gets
        return -2.0 * budget - 1.0 - (fraction - got) * budget
    if target == "min_gpus":
        return -float(gpus) + per_gpu / (1.0 + per_gpu) / 2  # the bonus < 0.5 never outweighs a GPU
    return per_gpu


def main(argv: Sequence[str]) -> int:
    p = _Parser(prog="python -m simkit recommend",
                description="Search deployments within a GPU budget for the SLA; rank them.")
    p.add_argument("scenario")
    p.add_argument("--gpus", type=int, required=True, metavar="N", help="GPU budget")
    p.add_argument("--target", choices=["goodput_per_gpu", "min_gpus"], default="goodput_per_gpu")
    p.add_argument("--space", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a knob and its values (or LOW..HIGH); replaces the default space's knob of that name")
    p.add_argument("--trials", type=int, default=40, metavar="N", help="configurations run (default 40)")
    p.add_argument("--sampler", choices=["tpe", "random", "grid"], default="tpe")
    p.add_argument("--seed", type=int, default=0, help="the search's seed (the runs keep the scenario's)")
    p.add_argument("--top", type=int, default=5, metavar="K", help="ranked YAMLs written (default 5)")
    p.add_argument("--gpu-cost-per-hour", type=float, metavar="C", help="price of one GPU-hour: a cost column")
    add_batch_arguments(p, "output folder (default: runs/recommend-NAME-YYYYmmdd-HHMMSS)")
    args = p.parse_args(argv)
    problem = batch_problem(args)
    if problem is None and not 1 <= args.gpus <= 100_000:
        problem = f"--gpus {args.gpus}: expected 1 to 100000"
    if problem is None and not 1 <= args.trials <= 10_000:
        problem = f"--trials {args.trials}: expected 1 to 10000"
    if problem is None and args.top < 0:
        problem = f"--top {args.top}: expected 0 or more"
    if problem is None and args.gpu_cost_per_hour is not None and not (
            math.isfinite(args.gpu_cost_per_hour) and args.gpu_cost_per_hour >= 0):
        problem = f"--gpu-cost-per-hour {args.gpu_cost_per_hour:g}: expected a price >= 0"
    if problem:
        return _fail([problem])
    try:
        common, base = batch_scenario(args, "recommend", "meet")
        if base.planner is not None:
            return _fail([f"{args.scenario}: recommend sizes fixed deployments; remove the planner (--set planner=null)"])
        unresolved = load_unresolved(args.scenario, common, resolve=None)
        space = default_space(args.scenario, common, base, unresolved, args.gpus)
        space.update(parse_space(args.space))
    except ConfigError as exc:
        return _fail(exc.messages)
    pool_fields = set(to_dict(unresolved)["pools"][unresolved.mode if unresolved.mode == "aggregated" else "decode"])
    unknown = [k for k in space if k not in LAYOUT and k != "router" and "." not in k and k not in pool_fields]
    if unknown:
        return _fail([f"--space {unknown[0]}: not a knob (mode, tp, workers, prefill_tp, prefill_workers, decode_tp, "
                      "decode_workers, router), a pool field (max_num_seqs, ...) or a dotted scenario field"])
    problem = _bad_value(args.scenario, common, space, unresolved, pool_fields)
    if problem:
        return _fail([problem])
    layout = Layout(unresolved, pool_fields)
    return run_batch(args, base, "recommend", "trials",
                     lambda folder: _recommend(args, base, layout, space, common, folder))


def _bad_value(scenario_path: str, common: list, space: dict, unresolved: Scenario, pool_fields: set) -> Optional[str]:
    """The first ``--space`` value the scenario refuses on its own, or None: a dotted field it
    does not have or a value that field refuses, a pool field's value on the scenario's pools,
    a router kind. (Each value is tried on the scenario as given; the layout knobs are left to
    the trials, where the budget and the model decide.)"""
    pools = [name for name, _ in unresolved.pools.named()]
    for key, knob in space.items():
        if key in LAYOUT or (key != "router" and "." not in key and key not in pool_fields):
            continue
        if "." in key and key.startswith("pools.") and key.split(".")[1] not in pools:
            continue  # a pool of the other mode: only its trials have it
        values = knob.choices if knob.values is not None else [knob.low, knob.high]
        for value in values:
            if key == "router":
                changes = [("router", {"kind": value})]
            elif "." in key:
                changes = [(key, value)]
            else:
                changes = [(f"pools.{name}.{key}", value) for name in pools]
            try:
                load_scenario(scenario_path, common + changes)
            except ConfigError as exc:
                message = exc.messages[0]
                blamed = [m for m in exc.messages if any(m.startswith(f"--set {k}") for k, _ in changes)]
                if blamed or key == "router":
                    text = (blamed or [message])[0]
                    return f"--space {key}={yaml_text(value)}: {text.split(': ', 1)[1] if text.startswith('--set ') else text}"
    return None


class _Sampler:
    """Configurations four at a time (``BATCH``): Optuna's TPE or random sampler (ask/tell),
    every combination in order (``grid``), or a seeded random search when Optuna is missing."""

    def __init__(self, kind: str, space: dict[str, Knob], seed: int, trials: int) -> None:
        self.space, self.pending, self.study, self.grid = space, [], None, None
        self.rng = random.Random(seed)
        if kind == "grid":  # every combination in order (the last knob fastest)
            self.grid = itertools.product(*(knob.choices for knob in space.values()))
            return
        try:
            import optuna
        except ImportError:
            return
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if kind == "random":
            sampler = optuna.samplers.RandomSampler(seed=seed)
        else:
            sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=max(4, min(12, trials // 3)))
        self.study = optuna.create_study(direction="maximize", sampler=sampler)

    def ask(self, n: int) -> list[dict]:
        """``n`` configurations (knob -> value)."""
        out = []
        for _ in range(n):
            if self.grid is not None:
                values = next(self.grid, None)
                if values is None:
                    self.done = True
                    break
                out.append(dict(zip(self.space, values)))
                continue
            if self.study is None:
                out.append({name: knob.draw(self.rng) for name, knob in self.space.items()})
                continue
            trial = self.study.ask()
            self.pending.append(trial)
            out.append({name: knob.suggest(trial) for name, knob in self.space.items()})
        return out

    done = False  #: the grid gave every combination

    def exhausted(self) -> bool:
        """Whether the grid has given every combination."""
        return self.done

    def tell(self, scores: list[float]) -> None:
        if self.study is not None:
            for trial, value in zip(self.pending, scores):
                self.study.tell(trial, value)
            self.pending = []


def _recommend(args, base: Scenario, layout: Layout, space: dict, common: list, folder: OutputFolder) -> int:
    import pandas as pd

    scenario_path = os.path.abspath(args.scenario)
    sampler = _Sampler(args.sampler, space, args.seed, args.trials)
    rows: list[dict] = []
    seen: dict[str, int] = {}  # a configuration already run (cut to the budget) -> its row
    attempts = 0
    while len(rows) < args.trials and attempts < 20 * args.trials:
        configs = sampler.ask(min(BATCH, args.trials - len(rows)))
        attempts += len(configs)
        todo, scores, plans, repeats = [], [None] * len(configs), [], []
        for i, config in enumerate(configs):
            config = _normalised(config, base.mode)
            overrides, gpus = layout.overrides(config, args.gpus)
            if gpus > args.gpus:  # one worker per pool at these TP sizes is already too many GPUs
                scores[i] = FAILED_SCORE
                continue
            key = repr(sorted(overrides, key=lambda kv: kv[0]))
            if key in seen:  # (duplicates are told their score, never run twice)
                repeats.append((i, seen[key]))
                continue
            seen[key] = len(rows) + len(todo)
            todo.append(i)
            plans.append((config, overrides, gpus))
        if plans:
            names = [f"trials/t{len(rows) + j:03d}" for j in range(len(plans))]
            outcomes = run_points(scenario_path, [common + ov for _, ov, _ in plans], folder.work, names,
                                  args.jobs, args.scheduler)
            for (config, overrides, gpus), name, outcome, i in zip(plans, names, outcomes, todo):
                value = score(outcome, gpus, args.target, args.sla_fraction, args.gpus)
                scores[i] = value
                rows.append(_row(name, config, overrides, gpus, outcome, value, args))
        for i, row in repeats:
            scores[i] = rows[row]["score"]
        sampler.tell(scores)
        if sampler.exhausted():
            break
    failures = [row["error"] for row in rows if row["status"] != "ok"]
    if not rows or len(failures) == len(rows):  # a bad trace or space, say: one error, nothing written
        shutil.rmtree(folder.work, ignore_errors=True)
        return _fail([f"every trial of recommend failed; the first: {failures[0]}" if failures else
                      f"recommend: no configuration of the space fits {args.gpus} GPUs (one worker per pool at its "
                      "TP sizes is already more); raise --gpus or narrow --space"])
    table = pd.DataFrame(rows).sort_values(["meets_sla", "score"], ascending=[False, False], kind="stable")
    table.insert(0, "rank", range(1, len(table) + 1))
    os.makedirs(os.path.join(folder.work, "ranked"), exist_ok=True)
    for rank, (_, row) in enumerate(table.head(args.top).iterrows(), start=1):
        if row["status"] != "ok":
            break
        scenario = load_scenario(args.scenario, common + row["_overrides"])
        with open(os.path.join(folder.work, "ranked", f"{rank:02d}.yaml"), "w", encoding="utf-8") as f:
            f.write(f"# recommend rank {rank} ({row['trial']}): {_describe(row['_config'])}\n")
            f.write(dump_scenario(scenario))
    shown = table.drop(columns=["_overrides", "_config"])
    shown.to_csv(os.path.join(folder.work, "recommend.csv"), index=False)
    from simkit.output.plots import pareto

    knobs = [k for k in space if k in shown and shown[k].nunique(dropna=True) > 1]
    pareto(shown, knobs, args.sla_fraction,
           f"{base.name}: recommend within {args.gpus} GPUs ({args.target})").savefig(
        os.path.join(folder.work, "pareto.png"), dpi=110, metadata={"Software": None})
    try:
        folder.commit()
    except OSError as exc:
        say(f"simkit: cannot write the results: {exc.strerror or exc}", err=True)
        return 1
    _print(shown, knobs, list(space), args, base, folder.out)
    return 0


def _plain(value: Any) -> Any:
    """A table cell as typed: 7.0 (an integer column with gaps) is 7."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _describe(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items())


def _row(name: str, config: dict, overrides: list, gpus: int, outcome: dict, value: float, args) -> dict:
    summary = outcome.get("summary") or {}
    good = summary.get("goodput") or {}
    by_bound = good.get("fraction_by_bound") or {}
    itl = (summary.get("itl_ms") or {}).get("p50")
    tokens = (summary.get("throughput") or {}).get("output_tokens_per_s")
    hours = summary.get("gpu_hours")
    row = {"trial": name, **{k: v for k, v in config.items()}, "gpus": gpus,
           "goodput_fraction": good.get("fraction"),
           **{f"{BOUND_NAMES[k].lower()}_fraction": v for k, v in by_bound.items()},
           "meets_sla": bool(good.get("fraction") is not None and good["fraction"] >= args.sla_fraction),
           "goodput_tokens_per_s_per_gpu": (good.get("output_tokens_per_s") or 0.0) / gpus if good else None,
           "output_tokens_per_s_per_gpu": tokens / gpus if tokens is not None else None,
           "tokens_per_s_per_user": 1000.0 / itl if itl else None,
           "ttft_p90_ms": (summary.get("ttft_ms") or {}).get("p90"), "itl_p50_ms": itl,
           "gpu_hours": sum(hours.values()) if hours else None,
           "binding_bound": binding_bound(outcome),
           "overloaded": (summary.get("saturation") or {}).get("overloaded"),
           "score": value, "status": outcome["status"], "error": outcome["error"],
           "_overrides": overrides, "_config": config}
    if args.gpu_cost_per_hour is not None:
        row["cost_per_hour"] = gpus * args.gpu_cost_per_hour
    return row


def _print(table, knobs: list, every_knob: list, args, base: Scenario, out: str) -> None:
    """The top of the table (the knobs that varied), then the recommendation with every knob."""
    import pandas as pd

    columns = ["rank"] + [k for k in knobs if k in table] + ["gpus", "goodput_fraction", "goodput_tokens_per_s_per_gpu",
                                                          "ttft_p90_ms", "itl_p50_ms"]
    if "cost_per_hour" in table:
        columns.append("cost_per_hour")
    top = table[columns].head(10).rename(columns={"goodput_fraction": "sla_met", "goodput_tokens_per_s_per_gpu":
                                                  "good_tok/s/gpu", "ttft_p90_ms": "ttft_p90", "itl_p50_ms": "itl_p50"})
    with pd.option_context("display.width", 100, "display.max_columns", 30):
        for line in top.to_string(index=False, na_rep="-", float_format=lambda x: f"{x:.3g}").splitlines():
            say(line)
    best = table.iloc[0] if len(table) else None
    if best is not None and best["status"] == "ok":
        what = ", ".join(f"{k}={_plain(best[k])}" for k in every_knob if k in best and best[k] == best[k])
        if best["meets_sla"]:
            say(f"recommended ({args.target}): {what}: {int(best['gpus'])} GPUs, {best['goodput_fraction']:.1%} of "
                f"requests within the SLA, {best['goodput_tokens_per_s_per_gpu']:.4g} good output tokens/s per GPU"
                + (f"; rerun it with python -m simkit {os.path.join(out, 'ranked', '01.yaml')}" if args.top > 0
                   else " (--top 0: no ranked YAMLs written)"))
        else:
            say(f"no configuration within {args.gpus} GPUs meets the SLA for {args.sla_fraction:.0%} of requests "
                f"({len(table)} tried); the closest: {what}: {int(best['gpus'])} GPUs, "
                f"{best['goodput_fraction']:.1%} within it, {best['binding_bound'] or 'the SLA'} binding", err=True)
    else:
        say(f"no trial ran; see the error column of {os.path.join(out, 'recommend.csv')}", err=True)
    say(f"wrote {out} (recommend.csv, pareto.png, ranked/, {len(table)} trials)")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv[1:]))
