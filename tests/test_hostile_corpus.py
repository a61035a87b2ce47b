"""A hostile corpus (issue 18): inputs a new user and an attacker would try, over scenarios,
every trace format, the command line, sweeps, ``compare``, ``step`` and the Python API. Every
case states what must happen; the contract is the README's:

- bad input: exit code 2, one line on stderr naming the file and the field or line, no
  traceback, and nothing written (no output folder, no temp folder, inputs untouched);
- a run that goes wrong at run time: exit code 1 (130 for a signal), its diagnostic on stderr
  and its partial results written, marked in summary.json;
- a good run: exit code 0 and its folder.

Run it alone with ``python tests/test_hostile_corpus.py`` (or ``python -m pytest
tests/test_hostile_corpus.py``); CI runs it with the suite. ``test_the_corpus_is_large_enough``
counts the cases.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Callable, Optional

import attrs
import pytest

from conftest import REPO

SCEN = REPO / "scenarios"
TINY = "pools: {aggregated: {}}\nworkload: {kind: synthetic, num_requests: 3}\n"
MOON = '{"timestamp": 0, "input_length": 100, "output_length": 3}\n'


@attrs.frozen
class Case:
    """One hostile input. ``files``: name -> text (or a callable of the case folder) created in
    the case folder ``in/``; ``argv``: the command line, ``{in}`` and ``{tmp}`` replaced by
    the folders; ``code``: the exit code; ``err``: a regular expression the stderr must match
    (searched); ``out``: one for stdout; ``check``: more assertions on the case folder."""

    id: str
    argv: tuple
    code: int
    err: Optional[str] = None
    files: dict = attrs.field(factory=dict)
    out: Optional[str] = None
    check: Optional[Callable] = None


def C(id, argv, code, err=None, files=None, out=None, check=None) -> Case:  # noqa: N802 - a table row
    return Case(id, tuple(argv.split()) if isinstance(argv, str) else tuple(argv), code, err, files or {}, out, check)


def scenario_case(id, yaml_text, code, err=None, extra=(), files=None, check=None) -> Case:
    """A scenario file ``in/s.yaml`` run with ``extra`` arguments."""
    return C(id, ["{in}/s.yaml", "--out", "{tmp}/out", "--no-plots", "--quiet", *extra], code, err,
             dict({"s.yaml": yaml_text}, **(files or {})), check=check)


def trace_case(id, text, code, err=None, fmt=None, extra=(), name="t.jsonl", check=None) -> Case:
    """A trace file ``in/NAME`` replayed on a tiny aggregated scenario."""
    body = "pools: {aggregated: {}}\nworkload: {kind: trace, path: " + name + (
        f", format: {fmt}" if fmt else "") + "}\n"
    return scenario_case(id, body, code, err, extra, {name: text}, check)


def lines(*objs) -> str:
    return "".join((o if isinstance(o, str) else json.dumps(o)) + "\n" for o in objs)


def summary(folder: Path) -> dict:
    return json.loads((folder / "summary.json").read_text())


def arrivals(folder: Path) -> list:
    return [json.loads(x)["arrival_ms"] for x in (folder / "requests.jsonl").read_text().splitlines()]


def mk(**kw) -> dict:
    """A Mooncake line with defaults."""
    return dict({"timestamp": 0, "input_length": 100, "output_length": 3}, **kw)


def ag(rid, **kw) -> dict:
    """An agentic line with defaults."""
    return dict({"request_id": rid, "input_length": 100, "max_output_tokens": 3}, **kw)


def wk(sid, reqs, **kw) -> dict:
    """A weka session line."""
    return dict({"id": sid, "block_size": 64, "requests": reqs}, **kw)


def wr(session, **kw) -> dict:
    """A weka_requests line."""
    return dict({"session": session, "seq": 0, "agent": "main", "t": 0.0, "input_length": 100,
                 "output_length": 3, "think_time": 0.0, "block_size": 64, "prefix_blocks_prev": 0}, **kw)


BAD = 2  # bad input
LINE = r"^{in}/t\.jsonl:{n}: "  # a trace error's start (formatted below)


def at(n: int, name: str = "t.jsonl") -> str:
    return rf"{{in}}/{re.escape(name)}:{n}: "


# ============================================================ scenarios (YAML)

SCENARIOS = [
    scenario_case("yaml-syntax", "pools: {aggregated: {}\n", BAD, r"s\.yaml:2:1: YAML syntax error"),
    scenario_case("yaml-tab", "pools:\n\taggregated: {}\n", BAD, r"s\.yaml:2:1: YAML syntax error"),
    scenario_case("yaml-empty", "", BAD, r"the file is empty; expected a scenario mapping @ \$"),
    scenario_case("yaml-list", "- 1\n- 2\n", BAD, r"expected a mapping at the top level, got list"),
    scenario_case("yaml-scalar", "42\n", BAD, r"expected a mapping at the top level"),
    scenario_case("yaml-duplicate-key", "pools: {aggregated: {}}\npools: {aggregated: {}}\n", BAD, "duplicate key"),
    scenario_case("yaml-int-key", "1: 2\npools: {aggregated: {}}\n", BAD, "mapping key 1 is not a string"),
    scenario_case("yaml-unknown-field", TINY + "bogus: 1\n", BAD, r"unknown field\(s\) bogus @ \$"),
    scenario_case("yaml-no-pools", "name: x\n", BAD, r"@ \$\.pools"),
    scenario_case("yaml-both-pool-kinds", "pools: {aggregated: {}, prefill: {}, decode: {}}\n", BAD,
                  "'aggregated' is given with 'prefill' and 'decode'"),
    scenario_case("yaml-string-number", "pools: {aggregated: {workers: '2'}}\n", BAD,
                  r"expected an integer, got '2' @ \$\.pools\.aggregated\.workers"),
    scenario_case("yaml-bool-number", "pools: {aggregated: {workers: true}}\n", BAD, "expected an integer, got true"),
    scenario_case("yaml-zero-workers", "pools: {aggregated: {workers: 0}}\n", BAD, "'workers' must be > 0"),
    scenario_case("yaml-huge-workers", "pools: {aggregated: {workers: 100000000000}}\n", BAD, "must be <= 10000"),
    scenario_case("yaml-nan", "pools: {aggregated: {}}\nmax_sim_time_s: .nan\n", BAD, "expected a finite number"),
    scenario_case("yaml-inf", "pools: {aggregated: {}}\nmax_sim_time_s: .inf\n", BAD, "expected a finite number"),
    scenario_case("yaml-negative-time", "pools: {aggregated: {}}\nmax_sim_time_s: -1\n", BAD, "must be > 0"),
    scenario_case("yaml-bom", "\ufeff" + TINY, 0),
    scenario_case("yaml-crlf", TINY.replace("\n", "\r\n"), 0),
    scenario_case("yaml-alias-bomb", "\n".join(["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"] + [
        f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 9)]) + "\npools: {aggregated: {}}\n",
        BAD, "expands to more than 1,000,000 values"),
    scenario_case("yaml-deep-nesting", "a: " + "[" * 5000 + "]" * 5000 + "\n", BAD, "nested too deeply"),
    scenario_case("yaml-control-char-key", 'pools: {aggregated: {}}\n"k\\u001b[2J": 1\n', BAD, r"k\\x1b\[2J"),
    scenario_case("yaml-not-utf8", "pools: {aggregated: {}}\n# \udcff\n", BAD,
                  r"s\.yaml:2: not UTF-8 text \(invalid start byte\); expected a YAML scenario"),
    # the clock's limit on every time-like field
    scenario_case("time-max-sim-time", TINY + "max_sim_time_s: 1e10\n", BAD,
                  r"'max_sim_time_s' must be at most 1e9 s .* @ \$\.max_sim_time_s"),
    scenario_case("time-link-latency", "pools: {prefill: {}, decode: {}}\nlink: {latency_ms: 1e13}\n", BAD,
                  r"'latency_ms' must be at most 1e12 ms .* @ \$\.link\.latency_ms"),
    scenario_case("time-think", "pools: {aggregated: {}}\nworkload: {kind: synthetic, sessions: {think_time_s: 2e9}}\n",
                  BAD, r"@ \$\.workload\.sessions\.think_time_s"),
    scenario_case("time-period", "pools: {aggregated: {}}\nworkload: {kind: synthetic, arrival: "
                  "{kind: diurnal, period_s: 1e12}}\n", BAD, r"'period_s' must be at most 1e9 s"),
    scenario_case("time-segment", "pools: {aggregated: {}}\nworkload: {kind: synthetic, arrival: "
                  "{kind: piecewise, segments: [{duration_s: 1e10}]}}\n", BAD,
                  r"@ \$\.workload\.arrival\.segments\[0\]\.duration_s"),
    scenario_case("time-constant-latency", "pools: {aggregated: {}}\nlatency: {kind: constant, prefill_ms: 1e14}\n",
                  BAD, r"'prefill_ms' must be at most 1e12 ms"),
    scenario_case("time-overhead-us", "pools: {aggregated: {}}\nlatency: {kind: roofline, layer_overhead_us: 1e16}\n",
                  BAD, r"'layer_overhead_us' must be at most 1e15 us"),
    scenario_case("time-kv-lag", "pools: {aggregated: {}}\nrouter: {kind: kv_aware, kv_event_lag_ms: 1e13}\n", BAD,
                  r"@ \$\.router\.kv_event_lag_ms"),
    scenario_case("time-sla", "pools: {aggregated: {}}\nsla: {ttft_ms: 1e13}\n", BAD, r"@ \$\.sla\.ttft_ms"),
    scenario_case("time-rate-span", "pools: {aggregated: {}}\nworkload: {kind: synthetic, num_requests: 100, "
                  "arrival: {kind: poisson, rate_per_s: 1e-8}}\n", BAD, r"arrive over about 9\.9e\+09 s"),
    scenario_case("time-rate-tiny", "pools: {aggregated: {}}\nworkload: {kind: synthetic, arrival: "
                  "{kind: poisson, rate_per_s: 1e-300}}\n", BAD, "'rate_per_s' must be at least 1e-09"),
    scenario_case("time-interval", "pools: {aggregated: {}}\nplanner: {kind: static, interval_s: 1e10}\n", BAD,
                  r"@ \$\.planner\.interval_s"),
    scenario_case("time-scale-down", "pools: {aggregated: {}}\nplanner: {kind: static, scale_down_delay_s: 1e10}\n",
                  BAD, r"@ \$\.planner\.scale_down_delay_s"),
    scenario_case("time-startup-ticks", "pools: {aggregated: {startup_time_s: 1e8}}\nplanner: {kind: static, "
                  "interval_s: 1}\n", BAD, r"more than 100,000 for a worker to start"),
    scenario_case("time-startup-max", "pools: {aggregated: {startup_time_s: 1e15}}\nplanner: {kind: static}\n", BAD,
                  r"'startup_time_s' must be at most 1e9 s"),
    scenario_case("time-at-limit-runs", "pools: {aggregated: {}}\nlatency: {kind: constant, prefill_ms: 1e12, "
                  "decode_ms: 1e12}\nworkload: {kind: synthetic, num_requests: 1}\n", 1,
                  r"run stopped \(time_limit\): an event was due at t=2e\+09 s",
                  check=lambda d: summary(d / "out")["stop"]["reason"] == "time_limit"),
    scenario_case("planner-sglang-disagg", "pools: {prefill: {}, decode: {backend: sglang}}\nplanner: {kind: static}\n",
                  BAD, "a planner cannot yet scale a disaggregated sglang cluster"),
    scenario_case("planner-budget-too-small", "pools: {aggregated: {workers: 4}}\nplanner: {kind: static, "
                  "gpu_budget: 2}\n", BAD, "need 4 GPUs, more than planner.gpu_budget"),
    scenario_case("planner-min-above-workers", "pools: {aggregated: {workers: 1, min_workers: 3}}\n"
                  "planner: {kind: static}\n", BAD, r"need min_workers \(3\) <= workers \(1\)"),
    scenario_case("planner-fields-without-planner", "pools: {aggregated: {startup_time_s: 5}}\n", BAD,
                  "apply only with a 'planner'"),
    scenario_case("inputs-malformed", TINY + "inputs: {x: 1}\n", BAD, r"'inputs' maps file paths to SHA-256"),
    scenario_case("inputs-changed", "pools: {aggregated: {}}\nworkload: {kind: trace, path: t.jsonl}\n"
                  "inputs: {{in}/t.jsonl: " + "a" * 64 + "}\n", BAD,
                  r"input .*/t\.jsonl changed since the run that wrote this scenario read it .* @ \$\.inputs",
                  files={"t.jsonl": MOON}),
    scenario_case("inputs-missing", "pools: {aggregated: {}}\nworkload: {kind: trace, path: t.jsonl}\n"
                  "inputs: {{in}/t.jsonl: " + "a" * 64 + "}\n", BAD, r"which the run that wrote this scenario read, "
                  r"is missing", files={}),
    scenario_case("path-relative-table", "pools: {aggregated: {}}\nlatency: {kind: table, path: p.csv}\n"
                  "workload: {kind: synthetic, num_requests: 3}\n", 0,
                  files={"p.csv": (SCEN / "tables" / "llama8b_h100_passes.csv").read_text()},
                  check=lambda d: "{in}" not in (d / "out" / "scenario.resolved.yaml").read_text()
                  and str(d / "in" / "p.csv") in (d / "out" / "scenario.resolved.yaml").read_text()),
    scenario_case("path-missing-table", "pools: {aggregated: {}}\nlatency: {kind: table, path: nope.csv}\n", BAD,
                  r"cannot read pass table .*nope\.csv: No such file or directory @ \$\.latency\.path"),
    scenario_case("path-table-is-dir", "pools: {aggregated: {}}\nlatency: {kind: table, path: .}\n", BAD,
                  r"Is a directory @ \$\.latency\.path"),
    scenario_case("path-model-missing", "pools: {aggregated: {}}\nlatency: {kind: roofline, model: x.json}\n", BAD,
                  r"cannot read model config .*x\.json"),
    scenario_case("path-model-not-json", "pools: {aggregated: {}}\nlatency: {kind: roofline, model: m.json}\n", BAD,
                  r"m\.json: not JSON", files={"m.json": "{"}),
    scenario_case("path-model-nested", "pools: {aggregated: {}}\nlatency: {kind: roofline, model: m.json}\n", BAD,
                  r"nested too deeply", files={"m.json": "[" * 100000 + "]" * 100000}),
    scenario_case("path-model-not-utf8", "pools: {aggregated: {}}\nlatency: {kind: roofline, model: m.json}\n", BAD,
                  r"m\.json:2: not UTF-8 text \(invalid start byte\); expected a model config\.json @ \$\.latency\.model",
                  files={"m.json": "{\n\udcff}"}),
    scenario_case("path-table-not-utf8", "pools: {aggregated: {}}\nlatency: {kind: table, path: p.csv}\n", BAD,
                  r"p\.csv:2: not UTF-8 text \(invalid start byte\); expected a pass table CSV @ \$\.latency\.path",
                  files={"p.csv": "prefill_tokens,decode_requests,decode_context_tokens,pass_ms\n\udcff\n"}),
    scenario_case("path-model-huge", "pools: {aggregated: {}}\nlatency: {kind: roofline, model: m.json}\n", BAD,
                  r"field hidden_size must be an integer from 1 to", files={"m.json": json.dumps(
                      {"hidden_size": 10 ** 30, "num_attention_heads": 32, "num_hidden_layers": 2,
                       "vocab_size": 100})}),
    scenario_case("path-model-max-position-huge", "pools: {aggregated: {}}\nlatency: {kind: roofline, model: m.json}\n",
                  BAD, r"m\.json: config\.json field max_position_embeddings must be an integer from 1 to 2147483648, "
                  r"got 1099511627776 @ \$\.latency\.model", files={"m.json": json.dumps(
                      {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
                       "max_position_embeddings": 2 ** 40})}),
    scenario_case("path-model-moe-no-per-token", "pools: {aggregated: {}}\nlatency: {kind: roofline, model: m.json}\n",
                  BAD, r"m\.json: config\.json gives 8 experts but 0 experts per token", files={"m.json": json.dumps(
                      {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100,
                       "num_local_experts": 8, "num_experts_per_tok": 0})}),
    scenario_case("policy-missing-module", TINY + "router: {kind: python, path: 'nope:R'}\n", BAD,
                  r"cannot import module 'nope'"),
    scenario_case("policy-bad-path", TINY + "router: {kind: python, path: 'not a path'}\n", BAD,
                  "must be package.module:ClassName"),
    scenario_case("policy-raises-on-import", TINY + "router: {kind: python, path: 'p:R'}\n", BAD,
                  r"cannot import module 'p' .*ZeroDivisionError", files={"p.py": "1/0\n"}),
    scenario_case("policy-no-pick", TINY + "router: {kind: python, path: 'p:R'}\n", BAD,
                  r"R is not a router policy: it needs a method pick", files={"p.py": "class R:\n    pass\n"}),
    scenario_case("policy-exits", TINY + "router: {kind: python, path: 'p:R'}\n", BAD,
                  r"cannot import module 'p'", files={"p.py": "raise SystemExit(3)\n"}),
    scenario_case("policy-search-path-relative", TINY + "router: {kind: python, path: 'p:R', search_path: sub}\n", 0,
                  files={"sub/p.py": "class R:\n    def __init__(self, p): pass\n"
                                     "    def pick(self, request, workers): return workers[0]\n"},
                  check=lambda d: str(d / "in" / "sub") in (d / "out" / "scenario.resolved.yaml").read_text()),
    scenario_case("name-control-chars", 'name: "a\\u001b[31mb"\n' + TINY, 0),
    scenario_case("name-like-a-number-reruns", 'name: "1e5"\n' + TINY + "router: {kind: python, path: 'p:R', "
                  "params: {x: '0o17'}}\n", 0, files={"p.py": "class R:\n    def __init__(self, p): assert p == "
                                                              "{'x': '0o17'}\n    def pick(self, r, w): return w[0]\n"},
                  check=lambda d: __import__("simkit.cli", fromlist=["main"]).main(
                      [str(d / "out" / "scenario.resolved.yaml"), "--out", str(d / "again"), "--no-plots",
                       "--quiet"]) == 0 and summary(d / "again")["run_digest"] == summary(d / "out")["run_digest"]),
    scenario_case("closed-loop-stream", "pools: {aggregated: {}}\nworkload: {kind: trace, path: t.jsonl, "
                  "max_in_flight: 2}\n", BAD, "--stream cannot replay a closed loop", extra=["--stream"],
                  files={"t.jsonl": MOON}),
]

# ============================================================ traces, every format

MOONCAKE = [
    trace_case("mc-max-output-tokens", '{"timestamp": 0, "input_length": 100, "output_length": 3}\n'
                                       '{"timestamp": 10, "input_length": 60, "output_length": 4, "max_output_tokens": 400}\n',
               BAD, at(2) + "field 'max_output_tokens' belongs to the agentic format"),
    trace_case("mc-request-id-label", '{"timestamp": 0, "input_length": 100, "output_length": 3, "request_id": "a"}\n',
               0),
    trace_case("mc-ok", lines(mk(), mk(timestamp=10)), 0),
    trace_case("mc-empty", "", BAD, r"the trace has no requests"),
    trace_case("mc-blank-lines", "\n\n  \n", BAD, r"the trace has no requests"),
    trace_case("mc-bad-json", lines(mk(), '{"timestamp": 0,'), BAD, at(2) + "not valid JSON"),
    trace_case("mc-array-line", lines(mk(), "[1, 2]"), BAD, at(2) + "found a JSON array"),
    trace_case("mc-nested-line", lines(mk(), "[" * 100000 + "]" * 100000), BAD, at(2) + "(JSON nested too deeply|"
                                                                                    "found a JSON array)"),
    trace_case("mc-missing-timestamp", lines({"input_length": 1, "output_length": 1}), BAD,
               at(1) + "missing field 'timestamp'"),
    trace_case("mc-nan-timestamp", lines(mk(), '{"timestamp": NaN, "input_length": 1, "output_length": 1}'), BAD,
               at(2) + "field 'timestamp' is NaN; expected milliseconds"),
    trace_case("mc-negative-timestamp", lines(mk(timestamp=-5)), BAD, at(1) + "field 'timestamp' is -5"),
    trace_case("mc-huge-timestamp", lines(mk(), mk(timestamp=1e16)), BAD,
               at(2) + r"field 'timestamp' is 1e\+16; expected milliseconds from 0 to 1e15"),
    trace_case("mc-time-beyond-limit", lines(mk(), mk(timestamp=2e12)), BAD,
               at(2) + r"timestamp puts this request 2e\+09 s after time zero; simulated times must stay within 1e9 s"),
    trace_case("mc-speedup-scaling", lines(mk(), mk(timestamp=1000)), BAD,
               at(2) + r"timestamp puts this request 1e\+300 s after time zero once divided by arrival_speedup_ratio",
               extra=["--set", "workload.arrival_speedup_ratio=1e-300"]),
    trace_case("mc-epoch-ms", lines(mk(timestamp=1.7e12), mk(timestamp=1.7e12 + 250)), 0,
               check=lambda d: arrivals(d / "out") == [0.0, 250.0]),
    trace_case("mc-string-length", lines(mk(input_length="10")), BAD, at(1) + r"field 'input_length' is \"10\""),
    trace_case("mc-zero-length", lines(mk(input_length=0)), BAD, at(1) + "field 'input_length' is 0"),
    trace_case("mc-huge-length", lines(mk(input_length=2 ** 40)), BAD,
               at(1) + "field 'input_length' is 1099511627776; expected an integer from 1 to 2147483648"),
    trace_case("mc-float-length", lines(mk(input_length=10.5)), BAD, at(1) + "field 'input_length' is 10.5"),
    trace_case("mc-bool-length", lines(mk(output_length=True)), BAD, at(1) + "field 'output_length' is true"),
    trace_case("mc-hash-ids-short", lines(mk(input_length=600, hash_ids=[1])), BAD,
               at(1) + "input_length 600 is larger than its hash_ids cover"),
    trace_case("mc-hash-ids-bad", lines(mk(hash_ids=[-1])), BAD, at(1) + "field 'hash_ids' must be a list of integers"),
    trace_case("mc-hash-ids-string", lines(mk(hash_ids="abc")), BAD, at(1) + "field 'hash_ids' must be a list"),
    trace_case("mc-request-id-is-mooncake", lines(mk(request_id=1), mk(timestamp=5000, request_id=2)), 0,
               check=lambda d: arrivals(d / "out") == [0.0, 5000.0]),
    trace_case("mc-foreign-wait-for", lines(mk(), mk(wait_for=[])), BAD, at(2) + "field 'wait_for' belongs to the "
                                                                                "agentic format"),
    trace_case("mc-ambiguous-first", lines(mk(request_id=1, wait_for=[])), BAD,
               at(1) + "the first line has agentic field 'wait_for' and Mooncake field 'timestamp', so its format is "
                                     "ambiguous"),
    trace_case("mc-follow-up-timestamp-ignored", lines(mk(timestamp=5000, session_id="s"),
                                                       mk(timestamp=0, session_id="s", delay=10),
                                                       mk(timestamp=5100)), 0,
               check=lambda d: arrivals(d / "out")[0] == 0.0 and arrivals(d / "out")[2] == 100.0),
    trace_case("mc-delay-beyond", lines(mk(session_id=1), mk(session_id=1, delay=2e12)), BAD,
               at(2) + r"field 'delay' is 2000000000000\.0; expected milliseconds from 0 to 1e12"),
    trace_case("mc-priority-zero", lines(mk(priority=0)), BAD, at(1) + "field 'priority' is 0"),
    trace_case("mc-session-list", lines(mk(session_id=[1])), BAD, at(1) + "field 'session_id' is"),
    trace_case("mc-crlf-bom", "\ufeff" + lines(mk(), mk(timestamp=5)).replace("\n", "\r\n"), 0),
    trace_case("mc-unsorted-stream", lines(mk(timestamp=10), mk(timestamp=5)), BAD,
               at(2) + "timestamp 5 is earlier than the previous line's 10", extra=["--stream"]),
    trace_case("mc-follow-up-stream", lines(mk(session_id=1), mk(session_id=1)), BAD,
               at(2) + "a request that waits for others .* cannot be streamed", extra=["--stream"]),
    trace_case("mc-not-utf8", lines(mk(), "\udcff\udcfe"), BAD, at(2) + r"not UTF-8 text \(invalid start byte\)"),
    trace_case("mc-not-utf8-stream", lines(mk(), mk(), "\udcff"), BAD, at(3) + "not UTF-8 text", extra=["--stream"]),
    trace_case("mc-not-utf8-first", lines("\udcff"), BAD, at(1) + "not UTF-8 text"),
    trace_case("mc-utf8-session-ok", lines(mk(session_id="caf\u00e9")), 0),
    trace_case("mc-duplicate-key", lines(mk(), '{"timestamp": 0, "input_length": 10, "output_length": 5, '
                                             '"hash_ids": [1], "timestamp": 9999}'), BAD,
               at(2) + r'key "timestamp" appears twice in one object; expected each field once'),
    trace_case("mc-duplicate-key-first", lines('{"timestamp": 0, "input_length": 10, "input_length": 20, '
                                               '"output_length": 5}'), BAD, at(1) + r'key "input_length" appears twice'),
    trace_case("mc-duplicate-key-stream", lines(mk(), '{"timestamp": 5, "output_length": 1, "input_length": 1, '
                                                    '"output_length": 2}'), BAD,
               at(2) + r'key "output_length" appears twice', extra=["--stream"]),
]

AGENTIC = [
    trace_case("ag-ok", lines(ag("a", first_ready_timestamp_ms=0), ag("b", wait_for=["a"],
                                                                     delay_after_dependencies_ms=5)), 0),
    trace_case("ag-not-utf8", lines(ag("a"), '{"request_id": "b", "input_length": 1, "max_output_tokens": 1, '
                                             '"session_id": "caf\u00e9\udcff"}'), BAD,
               at(2) + r"not UTF-8 text \(invalid start byte\)"),
    trace_case("ag-missing-ready-is-time-zero", lines(ag("a", first_ready_timestamp_ms=1.7e12), ag("b"),
                                                      ag("c", first_ready_timestamp_ms=1.7e12 + 100)), 0,
               check=lambda d: arrivals(d / "out") == [0.0, 0.0, 100.0]
               and summary(d / "out")["duration_s"] < 10),
    trace_case("ag-wait-for-dict", lines(ag("a"), ag("b", wait_for={})), BAD,
               at(2) + r"field 'wait_for' is \{\}; expected a list of request ids"),
    trace_case("ag-wait-for-false", lines(ag("a"), ag("b", wait_for=False)), BAD, at(2) + "field 'wait_for' is false"),
    trace_case("ag-wait-for-zero", lines(ag("a"), ag("b", wait_for=0)), BAD, at(2) + "field 'wait_for' is 0"),
    trace_case("ag-wait-for-string", lines(ag("a"), ag("b", wait_for="a")), BAD, at(2) + "field 'wait_for' is \"a\""),
    trace_case("ag-wait-for-later", lines(ag("a", wait_for=["b"]), ag("b")), BAD,
               at(1) + "wait_for names 'b', which is not the request_id of an earlier line"),
    trace_case("ag-duplicate-id", lines(ag("a"), ag("a")), BAD, at(2) + "request_id 'a' repeats an earlier line's"),
    trace_case("ag-missing-id", lines(ag("a"), {"input_length": 1, "max_output_tokens": 1, "wait_for": []}), BAD,
               at(2) + "missing field 'request_id'"),
    trace_case("ag-float-id", lines(ag(1.5)), BAD, at(1) + "field 'request_id' is 1.5"),
    trace_case("ag-foreign-timestamp", lines(ag("a"), ag("b", timestamp=3)), BAD,
               at(2) + "field 'timestamp' belongs to the mooncake format"),
    trace_case("ag-duplicate-key", lines(ag("a"), '{"request_id": "b", "input_length": 1, "max_output_tokens": 1, '
                                                 '"wait_for": ["a"], "wait_for": []}'), BAD,
               at(2) + r'key "wait_for" appears twice in one object'),
    trace_case("ag-delay-beyond", lines(ag("a"), ag("b", wait_for=["a"], delay_after_dependencies_ms=1e13)), BAD,
               at(2) + r"field 'delay_after_dependencies_ms' is 10000000000000\.0; expected milliseconds from 0 "
                       r"to 1e12"),
    trace_case("ag-chain-beyond", lines(ag(0), *[ag(i, wait_for=[i - 1], delay_after_dependencies_ms=6e11)
                                                  for i in range(1, 3)]), BAD,
               at(3) + r"the delays along the requests it waits for put this request at least 1\.2e\+09 s"),
    trace_case("ag-ready-beyond", lines(ag("a", first_ready_timestamp_ms=0), ag("b", first_ready_timestamp_ms=2e12)),
               BAD, at(2) + "first_ready_timestamp_ms puts this request 2e"),
    trace_case("ag-closed-loop-deadlock", lines(ag("a1", session_id="A"), ag("b1", session_id="B"),
                                                ag("a2", session_id="A", wait_for=["b1"])), 1,
               r"a dependency across sessions that no slot frees",
               extra=["--set", "workload.max_in_flight=1"]),
]

AZURE = [
    trace_case("az-ok", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.1,100,3\n"
                        "2023-11-16 18:15:47.1,100,3\n", 0, name="t.csv",
               check=lambda d: arrivals(d / "out") == [0.0, 1000.0]),
    trace_case("az-arabic-second", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:4\u0667.1,100,3\n", BAD,
               at(2, "t.csv") + "TIMESTAMP '2023-11-16 18:15:4\u0667.1' is not a date and time", name="t.csv"),
    trace_case("az-bad-date", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-13-45 18:15:46,100,3\n", BAD,
               at(2, "t.csv") + "TIMESTAMP '2023-13-45 18:15:46' is not a date and time", name="t.csv"),
    trace_case("az-superscript", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,\u00b2,3\n", BAD,
               at(2, "t.csv") + "ContextTokens is \"\u00b2\"", name="t.csv"),
    trace_case("az-years-apart", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,100,3\n"
                                 "2090-11-16 18:15:46,100,3\n", BAD, at(3, "t.csv") + "TIMESTAMP puts this request",
               name="t.csv"),
    trace_case("az-columns", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,100\n", BAD,
               at(2, "t.csv") + "2 columns; expected 3", name="t.csv"),
    trace_case("az-negative", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,-1,3\n", BAD,
               at(2, "t.csv") + "ContextTokens is \"-1\"", name="t.csv"),
    trace_case("az-header-only", "TIMESTAMP,ContextTokens,GeneratedTokens\n", BAD, "the trace has no requests",
               name="t.csv"),
    trace_case("az-not-utf8", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,100,3\n\udcff,1,1\n", BAD,
               at(3, "t.csv") + "not UTF-8 text", name="t.csv"),
    trace_case("az-time-25h", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 25:00:99,100,3\n", BAD,
               at(2, "t.csv") + "TIMESTAMP '2023-11-16 25:00:99' is not a date and time", name="t.csv"),
]

CSV = [
    trace_case("csv-ok", "arrival_ms,input_length,output_length\n0,100,3\n5.5,100,3\n", 0, name="t.csv"),
    trace_case("csv-superscript", "arrival_ms,input_length,output_length\n0,\u00b2,3\n", BAD,
               at(2, "t.csv") + "input_length is \"\u00b2\"; expected an integer from 1 to 2147483648", name="t.csv"),
    trace_case("csv-arabic-digit", "arrival_ms,input_length,output_length\n0,\u0663,3\n", BAD,
               at(2, "t.csv") + "input_length is", name="t.csv"),
    trace_case("csv-arabic-arrival", "arrival_ms,input_length,output_length\n0,100,3\n\u0663\u0660\u0660,100,3\n", BAD,
               at(3, "t.csv") + "arrival_ms is", name="t.csv"),
    trace_case("csv-fullwidth-arrival", "arrival_ms,input_length,output_length\n\uff11,100,3\n", BAD,
               at(2, "t.csv") + "arrival_ms is", name="t.csv"),
    trace_case("csv-nan-arrival", "arrival_ms,input_length,output_length\nnan,1,1\n", BAD,
               at(2, "t.csv") + "arrival_ms is \"nan\"", name="t.csv"),
    trace_case("csv-inf-arrival", "arrival_ms,input_length,output_length\ninf,1,1\n", BAD,
               at(2, "t.csv") + "arrival_ms is \"inf\"", name="t.csv"),
    trace_case("csv-arrival-beyond", "arrival_ms,input_length,output_length\n0,1,1\n2e12,1,1\n", BAD,
               at(3, "t.csv") + r"arrival_ms puts this request 2e\+09 s after time zero", name="t.csv"),
    trace_case("csv-arrival-huge", "arrival_ms,input_length,output_length\n1e300,1,1\n", BAD,
               at(2, "t.csv") + "arrival_ms is \"1e300\"; expected milliseconds from 0 to 1e15", name="t.csv"),
    trace_case("csv-header", "arrival,input_length,output_length\n0,1,1\n", BAD,
               at(1, "t.csv") + "cannot tell the trace format from the first line; set workload.format to one of: "
                                "mooncake, agentic, azure, csv, weka, weka_requests", name="t.csv"),
    trace_case("csv-header-explicit", "arrival,input_length,output_length\n0,1,1\n", BAD,
               at(1, "t.csv") + "CSV header is 'arrival,input_length,output_length'", fmt="csv", name="t.csv"),
    trace_case("csv-not-utf8", "arrival_ms,input_length,output_length\n0,1,1\n\udcff\n", BAD,
               at(3, "t.csv") + r"not UTF-8 text \(invalid start byte\)", name="t.csv"),
    trace_case("csv-speedup", "arrival_ms,input_length,output_length\n0,1,1\n1000,1,1\n", 0, name="t.csv",
               extra=["--set", "workload.arrival_speedup_ratio=4"],
               check=lambda d: arrivals(d / "out") == [0.0, 250.0]),
]

WEKA = [
    trace_case("wk-ok", lines(wk("s", [{"in": 100, "out": 3}, {"in": 200, "out": 3, "think_time": 0.5}])), 0,
               fmt="weka"),
    trace_case("wk-detected", lines(wk("s", [{"in": 100, "out": 3}])), 0),
    trace_case("wk-not-utf8", lines(wk("s", [{"in": 100, "out": 3}]), "\udcff"), BAD, at(2) + "not UTF-8 text"),
    trace_case("wk-duplicate-key-nested", lines('{"id": "s", "block_size": 64, "requests": [{"in": 1, "out": 1, '
                                                '"think_time": 0, "think_time": 5}]}'), BAD,
               at(1) + r'key "think_time" appears twice in one object'),
    trace_case("wk-huge-block", lines(wk("s", [{"in": 100, "out": 3}], block_size=10 ** 12)), BAD,
               at(1) + "field 'block_size' is 1000000000000; expected an integer from 1 to 2147483648"),
    trace_case("wk-max-block", lines(wk("s", [{"in": 100, "out": 3, "hash_ids": [1]}], block_size=2 ** 31)), 0),
    trace_case("wk-duplicate-session", lines(wk(1, [{"in": 1, "out": 1}]), wk(1, [{"in": 1, "out": 1}])), BAD,
               at(2) + "session id 1 repeats line 1's"),
    trace_case("wk-int-and-string-ids", lines(wk(1, [{"in": 1, "out": 1}]), wk("1", [{"in": 1, "out": 1}])), 0),
    trace_case("wk-think-beyond", lines(wk("s", [{"in": 1, "out": 1, "think_time": 2e9}])), BAD,
               at(1) + "request 0: field 'think_time' is 2000000000.0; expected seconds from 0 to 1e9"),
    trace_case("wk-request-not-object", lines(wk("s", [5])), BAD, at(1) + "request 0 is a JSON number"),
    trace_case("wk-subagent-bad", lines(wk("s", [{"in": 1, "out": 1}, {"type": "subagent", "requests": 3}])), BAD,
               at(1) + "request 1: a subagent needs a list 'requests'"),
    trace_case("wk-hash-ids-big", lines(wk("s", [{"in": 1, "out": 1, "hash_ids": [2 ** 41]}])), BAD,
               at(1) + "request 0: hash ids must be below 2\\^40"),
    trace_case("wk-no-requests", lines({"id": "s", "block_size": 64}), BAD, at(1) + "expected a session object",
               fmt="weka"),
    trace_case("wk-sessions-per-s", lines(*[wk(i, [{"in": 1, "out": 1}]) for i in range(3)]), BAD,
               at(3) + "sessions_per_s 1e-09 starts this session", fmt="weka",
               extra=["--set", "workload.sessions_per_s=1e-9"]),
]

WEKA_REQUESTS = [
    trace_case("wr-ok", lines(wr("s"), wr("s", seq=1, t=1.0, think_time=0.5, prefix_blocks_prev=1)), 0),
    trace_case("wr-not-utf8", lines(wr("s"), "\udcff"), BAD, at(2) + "not UTF-8 text"),
    trace_case("wr-duplicate-key", lines(wr("s"), json.dumps(wr("s", seq=1))[:-1] + ', "agent": "sub"}'), BAD,
               at(2) + r'key "agent" appears twice in one object'),
    trace_case("wr-t-negative", lines(wr("s", t=-1)), BAD, at(1) + "field 't' is -1; expected seconds from 0 to 1e9"),
    trace_case("wr-t-beyond", lines(wr("s", t=2e9)), BAD, at(1) + "field 't' is 2000000000.0; expected seconds"),
    trace_case("wr-think-beyond", lines(wr("s", think_time=5e9)), BAD, at(1) + "field 'think_time' is 5000000000.0; "
                                                                              "expected seconds from 0 to 1e9"),
    trace_case("wr-huge-block", lines(wr("s", block_size=2 ** 40)), BAD, at(1) + "field 'block_size' is"),
    trace_case("wr-too-many-blocks", lines(wr("s", block_size=1, input_length=2 ** 31)), BAD,
               at(1) + "input_length 2147483648 at block_size 1 is 2147483648 blocks"),
    trace_case("wr-missing-agent", lines({"session": "s", "prefix_blocks_prev": 0, "input_length": 1,
                                          "output_length": 1, "t": 0}), BAD,
               at(1) + "missing field 'session' or 'agent'"),
    trace_case("wr-subagent", lines(wr("s"), wr("s", agent="sub1", t=0.5)), 0),
    trace_case("wr-chain-beyond", lines(wr("s", think_time=0), wr("s", think_time=6e8), wr("s", think_time=6e8)), BAD,
               at(3) + "the delays along the requests it waits for"),
]

GENERIC_TRACE = [
    C("trace-missing", [str(SCEN / "agg.yaml"), "--trace", "{in}/nope.jsonl", "--out", "{tmp}/out"], BAD,
      r"nope\.jsonl: cannot read trace: No such file or directory"),
    C("trace-dir", [str(SCEN / "agg.yaml"), "--trace", "{in}", "--out", "{tmp}/out"], BAD,
      r"is a directory; expected a trace file", files={"x": ""}),
    C("trace-device", [str(SCEN / "agg.yaml"), "--trace", "/dev/null", "--out", "{tmp}/out"], BAD,
      r"/dev/null: is not a regular file"),
    C("trace-binary", [str(SCEN / "agg.yaml"), "--trace", "{in}/b.bin", "--out", "{tmp}/out"], BAD,
      r"not UTF-8 text", files={"b.bin": "\udcff\udcfe"}),
]

# ============================================================ the command line

CLI = [
    C("cli-cap-just-beyond", [str(SCEN / "agg.yaml"), "--set", "max_sim_time_s=1.0000001e9"], BAD,
      r"'max_sim_time_s' must be at most 1e9 s .*: 1000000100\.0"),
    C("cli-startup-just-beyond", [str(SCEN / "planner.yaml"), "--set", "pools.prefill.startup_time_s=1000001"], BAD,
      r"\(1000001\.0 s\) is 100,000\.1 planner ticks"),
    C("cli-no-args", [], BAD, r"^simkit: .*required: scenario"),
    C("cli-missing-scenario", "{in}/nope.yaml", BAD, r"nope\.yaml: cannot read scenario file: No such file"),
    C("cli-scenario-dir", "{in}", BAD, r"cannot read scenario file: Is a directory", files={"x": ""}),
    C("cli-scenario-device", "/dev/zero", BAD, r"/dev/zero: cannot read scenario file: Is not a regular file"),
    C("cli-unknown-flag", [str(SCEN / "agg.yaml"), "--bogus"], BAD, r"unrecognized arguments: --bogus"),
    C("cli-set-no-equals", [str(SCEN / "agg.yaml"), "--set", "pools"], BAD, r"--set 'pools': expected KEY=VALUE"),
    C("cli-set-bad-yaml", [str(SCEN / "agg.yaml"), "--set", "seed=[1"], BAD, r"--set seed:1:3: YAML syntax error"),
    C("cli-set-through-scalar", [str(SCEN / "agg.yaml"), "--set", "seed.x=1"], BAD,
      r"cannot set 'seed\.x': seed is 7, not a mapping"),
    C("cli-set-empty-key", [str(SCEN / "agg.yaml"), "--set", "a..b=1"], BAD, r"bad key 'a\.\.b'"),
    C("cli-set-unknown", [str(SCEN / "agg.yaml"), "--set", "pools.aggregated.wrkers=2"], BAD,
      r"--set pools\.aggregated\.wrkers: unknown field\(s\) wrkers"),
    C("cli-seed-twice", [str(SCEN / "agg.yaml"), "--seed", "1", "--set", "seed=2"], BAD,
      r"--seed and --set seed=\.\.\. both set the seed"),
    C("cli-seed-not-int", [str(SCEN / "agg.yaml"), "--seed", "x"], BAD, r"argument --seed: invalid int value"),
    C("cli-empty-out", [str(SCEN / "agg.yaml"), "--out", " "], BAD, r"--out: expected a folder name"),
    C("cli-out-is-file", [str(SCEN / "agg.yaml"), "--out", "{in}/f"], BAD, r"exists and is not a folder",
      files={"f": "x"}),
    C("cli-out-is-cwd", [str(SCEN / "agg.yaml"), "--out", ".", "--force"], BAD,
      r"refusing to write results over the current folder"),
    C("cli-out-holds-scenario", ["{in}/s.yaml", "--out", "{in}", "--force"], BAD,
      r"refusing to replace a folder that holds the input", files={"s.yaml": TINY}),
    C("cli-out-holds-trace", [str(SCEN / "agg.yaml"), "--trace", "{in}/t.jsonl", "--out", "{in}", "--force"], BAD,
      r"holds the input", files={"t.jsonl": MOON}),
    C("cli-out-not-empty", [str(SCEN / "agg.yaml"), "--out", "{in}"], BAD, r"output folder exists and is not empty",
      files={"x": "keep"}),
    C("cli-out-claimed", [str(SCEN / "agg.yaml"), "--out", "{in}", "--force"], BAD,
      r"another simkit run \(pid \d+ on .*\) is writing into it",
      files={".simkit-claim": lambda d: f"{os.getppid()} {__import__('platform').node()}\n"}),
    C("cli-out-stale-claim", [str(SCEN / "agg.yaml"), "--out", "{in}", "--set", "workload.num_requests=3",
                              "--no-plots", "--quiet"], 0,
      files={".simkit-claim": f"{2 ** 22 + 999} {__import__('platform').node()}\n"},
      check=lambda d: (d / "in" / "summary.json").exists() and not (d / "in" / ".simkit-claim").exists()),
    C("cli-out-under-a-file", [str(SCEN / "agg.yaml"), "--out", "{in}/f/sub"], BAD,
      r"cannot create the output folder: .*f is not a folder", files={"f": "x"}),
    C("cli-force-replaces", [str(SCEN / "agg.yaml"), "--out", "{in}", "--force", "--set", "workload.num_requests=3",
                             "--no-plots", "--quiet"], 0, files={"old.txt": "x"},
      check=lambda d: not (d / "in" / "old.txt").exists() and (d / "in" / "summary.json").exists()),
    C("cli-quiet-path-only", [str(SCEN / "agg.yaml"), "--out", "{tmp}/out", "--set", "workload.num_requests=3",
                              "--no-plots", "--quiet"], 0, out=r"^{tmp}/out\n$"),
    C("cli-version", "--version", 0, out=r"^simkit \d"),
    C("cli-check", [str(SCEN / "disagg.yaml"), "--check", "--out", "{tmp}/out", "--set", "workload.num_requests=5",
                    "--no-plots", "--quiet"], 0),
    C("cli-stream-ok", [str(SCEN / "agg.yaml"), "--stream", "--out", "{tmp}/out", "--set", "workload.num_requests=5",
                        "--no-plots", "--quiet"], 0),
    C("cli-planner-samples-header", [str(SCEN / "planner.yaml"), "--out", "{tmp}/out", "--set",
                                     "workload.num_requests=2", "--set", "planner.interval_s=1000", "--no-plots",
                                     "--quiet"], 0,
      check=lambda d: (d / "out" / "planner_samples.csv").read_text().startswith("pool,at,")),
    C("cli-threshold-counts-starting", [str(SCEN / "planner.yaml"), "--out", "{tmp}/out", "--set",
                                        "planner={kind: threshold, interval_s: 1}", "--set",
                                        "workload.num_requests=200", "--no-plots", "--quiet"], 0,
      check=lambda d: all(int(line.split(",")[2]) <= 1 for line in
                          (d / "out" / "workers.csv").read_text().splitlines()[1:])),
    C("cli-planner-ticks", ["{in}/s.yaml", "--out", "{tmp}/out"], BAD, r"planner ticks of interval_s",
      files={"s.yaml": "pools: {aggregated: {}}\nworkload: {kind: trace, path: t.jsonl}\n"
                       "planner: {kind: static, interval_s: 0.001}\n",
             "t.jsonl": lines(mk(), mk(timestamp=1e7))}),
]

# ============================================================ sweeps

SWEEPS = [
    C("sweep-no-grid", ["sweep", str(SCEN / "agg.yaml")], BAD, r"the following arguments are required: --grid"),
    C("sweep-bad-grid", ["sweep", str(SCEN / "agg.yaml"), "--grid", "seed"], BAD, r"--grid 'seed': expected KEY=V1"),
    C("sweep-grid-empty-value", ["sweep", str(SCEN / "agg.yaml"), "--grid", "pools.aggregated.workers=1,,2"], BAD,
      r"--grid 'pools.aggregated.workers=1,,2': an empty value"),
    C("sweep-grid-trailing-comma", ["sweep", str(SCEN / "agg.yaml"), "--grid", "seed=1,"], BAD,
      r"--grid 'seed=1,': an empty value"),
    C("sweep-grid-twice", ["sweep", str(SCEN / "agg.yaml"), "--grid", "seed=1", "--grid", "seed=2"], BAD,
      r"--grid seed: given twice"),
    C("sweep-huge-grid", ["sweep", str(SCEN / "agg.yaml"), "--grid", "seed=" + ",".join(map(str, range(200))),
                          "--grid", "name=" + ",".join(f"n{i}" for i in range(200))], BAD,
      r"--grid: 40,000 points; a sweep runs at most 10,000"),
    C("sweep-jobs-zero", ["sweep", str(SCEN / "agg.yaml"), "--grid", "seed=1", "--jobs", "0"], BAD,
      r"--jobs 0: expected at least 1"),
    C("sweep-no-valid-point", ["sweep", str(SCEN / "agg.yaml"), "--grid", "pools.aggregated.workrs=1,2",
                               "--out", "{tmp}/out"], BAD, r"no point of the grid is a valid scenario"),
    C("sweep-every-point-fails", ["sweep", "{in}/s.yaml", "--grid", "seed=1,2", "--out", "{tmp}/out", "--jobs", "1"],
      BAD, r"every point of the sweep failed; the first: .*t\.jsonl:1: not valid JSON",
      files={"s.yaml": "pools: {aggregated: {}}\nworkload: {kind: trace, path: t.jsonl}\n", "t.jsonl": "{\n"}),
    C("sweep-some-points-fail", ["sweep", str(SCEN / "agg.yaml"), "--grid", "pools.aggregated.workers=1,0",
                                 "--set", "workload.num_requests=3", "--out", "{tmp}/out", "--jobs", "1"], 1,
      r"1 of 2 points failed .* 'workers' must be > 0",
      check=lambda d: (d / "out" / "sweep.csv").exists()),
    C("sweep-out-holds-trace", ["sweep", "{in}/s.yaml", "--grid", "seed=1,2", "--out", "{in}", "--force"], BAD,
      r"holds the input", files={"s.yaml": "pools: {aggregated: {}}\nworkload: {kind: trace, path: t.jsonl}\n",
                                 "t.jsonl": MOON}),
    C("sweep-out-not-empty", ["sweep", str(SCEN / "agg.yaml"), "--grid", "seed=1", "--out", "{in}"], BAD,
      r"output folder exists and is not empty", files={"x": "1"}),
    C("sweep-out-claimed", ["sweep", str(SCEN / "agg.yaml"), "--grid", "seed=1", "--out", "{in}", "--force"], BAD,
      r"another simkit run",
      files={".simkit-claim": lambda d: f"{os.getppid()} {__import__('platform').node()}\n"}),
    C("sweep-scheduler-scheme", ["sweep", str(SCEN / "agg.yaml"), "--grid", "seed=1", "--scheduler", "nope://x",
                                 "--out", "{tmp}/out", "--set", "workload.num_requests=3"], BAD,
      r"--scheduler nope://x: cannot reach the Dask scheduler \(unknown address scheme"),
    # an empty address is refused, never taken as "no scheduler" (it ran locally)
    C("sweep-scheduler-empty", ["sweep", str(SCEN / "agg.yaml"), "--grid", "pools.aggregated.workers=1,2",
                                "--scheduler", "", "--out", "{tmp}/out"], BAD,
      r"^--scheduler '': expected a Dask scheduler's address \(tcp://host:8786\)$"),
    C("sweep-scheduler-blank", ["sweep", str(SCEN / "agg.yaml"), "--grid", "seed=1", "--scheduler", " ",
                                "--out", "{tmp}/out"], BAD, r"^--scheduler ' ': expected a Dask scheduler's address"),
    C("capacity-scheduler-empty", ["capacity", str(SCEN / "agg.yaml"), "--set", "sla.ttft_ms=500", "--scheduler", "",
                                   "--out", "{tmp}/out"], BAD, r"^--scheduler '': expected a Dask scheduler's address"),
    C("recommend-scheduler-empty", ["recommend", str(SCEN / "agg.yaml"), "--set", "sla.ttft_ms=500", "--gpus", "2",
                                    "--scheduler", "", "--out", "{tmp}/out"], BAD,
      r"^--scheduler '': expected a Dask scheduler's address"),
    # capacity and recommend name an unreachable scheduler as sweep does (they gave a traceback)
    C("capacity-scheduler-scheme", ["capacity", str(SCEN / "agg.yaml"), "--set", "sla.ttft_ms=500",
                                    "--set", "workload.num_requests=3", "--scheduler", "nope://x",
                                    "--out", "{tmp}/out"], BAD,
      r"^--scheduler nope://x: cannot reach the Dask scheduler \(unknown address scheme"),
    C("recommend-scheduler-scheme", ["recommend", str(SCEN / "agg.yaml"), "--set", "sla.ttft_ms=500", "--gpus", "2",
                                     "--set", "workload.num_requests=3", "--scheduler", "nope://x",
                                     "--out", "{tmp}/out"], BAD,
      r"^--scheduler nope://x: cannot reach the Dask scheduler \(unknown address scheme"),
    C("sweep-mixed-kinds", ["sweep", str(SCEN / "agg.yaml"), "--grid", "name=a,2", "--set",
                            "workload.num_requests=3", "--out", "{tmp}/out", "--jobs", "1"], 1,
      r"1 of 2 points failed"),
    C("sweep-control-chars", ["sweep", str(SCEN / "agg.yaml"), "--grid", "name=\"a\\u001bb\",c", "--set",
                              "workload.num_requests=3", "--out", "{tmp}/out", "--jobs", "1"], 0,
      check=lambda d: (d / "out" / "sweep.csv").exists()),
]

# ============================================================ compare


def _run_folder(d: Path, name: str = "r", **summary_changes) -> Path:
    """A finished run's folder (copied from the corpus's one real run), its summary changed."""
    folder = d / "in" / name
    shutil.copytree(_BASE_RUN, folder)
    if summary_changes:
        data = summary(folder)
        data.update(summary_changes)
        (folder / "summary.json").write_text(json.dumps(data))
    return folder


_BASE_RUN: Path = Path()  # set by the fixture below


def _jsonl_only(d: Path, tail: str) -> None:
    """A run folder without requests.parquet whose requests.jsonl ends with ``tail``."""
    folder = _run_folder(d)
    (folder / "requests.parquet").unlink()
    with open(folder / "requests.jsonl", "ab") as f:
        f.write(tail.encode("utf-8", "surrogateescape"))


def compare_case(id, code, err=None, prepare=None, extra=(), out=None, runs=("{in}/r",)) -> Case:
    return C(id, ["compare", *runs, *extra], code, err, files={"_prepare": prepare or (lambda d: _run_folder(d))},
             out=out)


COMPARE = [
    compare_case("cmp-ok", 0, out=r"stopped\s+completed"),
    compare_case("cmp-no-folder", BAD, r"nope: no such folder", runs=("{in}/nope",)),
    compare_case("cmp-not-a-run", BAD, r"not a simkit run folder \(no summary\.json\)", runs=("{in}",)),
    compare_case("cmp-summary-not-json", BAD, r"cannot read the run: .*summary\.json: not JSON \(Expecting",
                 prepare=lambda d: (_run_folder(d) / "summary.json").write_text("{")),
    compare_case("cmp-summary-list", BAD, r"summary\.json is not a simkit summary",
                 prepare=lambda d: (_run_folder(d) / "summary.json").write_text("[1]")),
    compare_case("cmp-summary-nested", BAD, r"nested too deeply",
                 prepare=lambda d: (_run_folder(d) / "summary.json").write_text("[" * 100000 + "]" * 100000)),
    compare_case("cmp-summary-missing-keys", BAD, r"summary\.json is not a simkit summary",
                 prepare=lambda d: (_run_folder(d) / "summary.json").write_text("{}")),
    compare_case("cmp-partial", 0, out=r"stopped\s+completed\s+interrupted \(partial\)",
                 prepare=lambda d: (_run_folder(d), _run_folder(d, "p", stop={"reason": "interrupted",
                                                                             "incomplete": True})),
                 runs=("{in}/r", "{in}/p")),
    compare_case("cmp-label-control-chars", 0, out=r"a\\x1bb",
                 prepare=lambda d: _run_folder(d, "a\x1bb"), runs=("{in}/a\x1bb",)),
    compare_case("cmp-input-gone", 0, prepare=lambda d: _run_folder(d)),  # its trace was never copied along
    compare_case("cmp-yaml-broken", BAD, r"cannot read the run: .*scenario\.resolved\.yaml",
                 prepare=lambda d: (_run_folder(d) / "scenario.resolved.yaml").write_text("pools: [")),
    compare_case("cmp-rows-missing", BAD, r"cannot read the run: .*requests\.jsonl",
                 prepare=lambda d: (lambda f: [(f / n).unlink() for n in ("requests.parquet", "requests.jsonl")])(
                     _run_folder(d))),
    compare_case("cmp-jsonl-only", 0, out=r"completed / total\s+4/4",
                 prepare=lambda d: (_run_folder(d) / "requests.parquet").unlink()),
    compare_case("cmp-jsonl-garbage-line", BAD, r"cannot read the run: {in}/r/requests\.jsonl:5: not a JSON object "
                 r"\(Expecting value, column 1\)", prepare=lambda d: _jsonl_only(d, "garbage\n")),
    compare_case("cmp-jsonl-array-line", BAD, r"{in}/r/requests\.jsonl:5: found a JSON array",
                 prepare=lambda d: _jsonl_only(d, "[1]\n")),
    compare_case("cmp-jsonl-other-fields", BAD, r"{in}/r/requests\.jsonl:5: lacks field 'arrival_ms', unlike line 1",
                 prepare=lambda d: _jsonl_only(d, '{"id": 4}\n')),
    compare_case("cmp-jsonl-not-utf8", BAD, r"{in}/r/requests\.jsonl:5: not UTF-8 text \(invalid start byte\)",
                 prepare=lambda d: _jsonl_only(d, "\udcff\n")),
    compare_case("cmp-summary-not-utf8", BAD, r"{in}/r/summary\.json:1: not UTF-8 text",
                 prepare=lambda d: (_run_folder(d) / "summary.json").write_bytes(b"\xff{}")),
    compare_case("cmp-yaml-not-utf8", BAD, r"{in}/r/scenario\.resolved\.yaml:2: not UTF-8 text",
                 prepare=lambda d: (_run_folder(d) / "scenario.resolved.yaml").write_bytes(b"name: x\n\xfe\n")),
    compare_case("cmp-parquet-corrupt", BAD, r"cannot read the run: {in}/r/requests\.parquet: not a Parquet table",
                 prepare=lambda d: (_run_folder(d) / "requests.parquet").write_text("not parquet")),
    compare_case("cmp-plot-extension", BAD, r"--plot writes \.png, \.pdf or \.svg", extra=["--plot", "{tmp}/x.txt"]),
    compare_case("cmp-plot-exists", BAD, r"exists; choose another --plot or add --force",
                 prepare=lambda d: (_run_folder(d), (d / "in" / "p.png").write_text("x")),
                 extra=["--plot", "{in}/p.png"]),
    compare_case("cmp-plot-fifo", BAD, r"exists and is not a regular file",
                 prepare=lambda d: (_run_folder(d), os.mkfifo(d / "in" / "p.png")),
                 extra=["--plot", "{in}/p.png", "--force"]),
    compare_case("cmp-plot-dir", BAD, r"exists and is not a regular file",
                 prepare=lambda d: (_run_folder(d), (d / "in" / "p.png").mkdir()), extra=["--plot", "{in}/p.png"]),
    compare_case("cmp-plot-ok", 0, extra=["--plot", "{tmp}/p.png"], out=r"wrote .*p\.png"),
    compare_case("cmp-summary-fifo", BAD, r"not a simkit run folder",
                 prepare=lambda d: (d / "in" / "f").mkdir() or os.mkfifo(d / "in" / "f" / "summary.json"),
                 runs=("{in}/f",)),
]

# ============================================================ step

STEP_M = ["step", "--model", "{in}/m.json", "--gpu", "H100", "--prefill-tokens", "10"]
#: a tiny valid config.json, for the step cases to break one field of
TOY_CONFIG = {"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2, "vocab_size": 100}
STEP = [
    C("step-ok", "step --model Llama-3.1-8B --gpu H100 --prefill-tokens 100", 0, out=r"pass"),
    C("step-unknown-model", "step --model Nope --gpu H100 --prefill-tokens 10", BAD, r"unknown model 'Nope'"),
    C("step-unknown-gpu", "step --model Llama-3.1-8B --gpu Z9 --prefill-tokens 10", BAD, r"unknown GPU|Z9"),
    C("step-tp-heads", "step --model Llama-3.1-8B --gpu H100 --tp 3 --prefill-tokens 10", BAD,
      r"tensor_parallel_size 3 does not divide"),
    C("step-negative-tokens", "step --model Llama-3.1-8B --gpu H100 --prefill-tokens -5", BAD, r"prefill"),
    C("step-bad-contexts", "step --model Llama-3.1-8B --gpu H100 --decode-contexts 1,x", BAD, r"decode-contexts"),
    C("step-model-fifo", STEP_M, BAD, r"FIFO",
      files={"_prepare": lambda d: os.mkfifo(d / "in" / "m.json")}),
    C("step-moe-experts", STEP_M, BAD,
      r"gives 9 experts per token \(num_experts_per_tok\) but only 8 experts",
      files={"m.json": json.dumps({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                                   "vocab_size": 100, "num_local_experts": 8, "num_experts_per_tok": 9})}),
    C("step-config-nested", STEP_M, BAD, r"nested too deeply",
      files={"m.json": "[" * 100000 + "]" * 100000}),
    C("step-config-list", STEP_M, BAD, r"expected a JSON object",
      files={"m.json": "[]"}),
    C("step-layer-types", STEP_M, BAD, r"layer_types must be a list",
      files={"m.json": json.dumps({"hidden_size": 64, "num_attention_heads": 4, "num_hidden_layers": 2,
                                   "vocab_size": 100, "layer_types": 5})}),
    # a config.json field that would silently price a wrong pass (each names the file and the field)
    *[C(f"step-config-{id}", STEP_M, BAD, r"^simkit step: {in}/m\.json: config\.json .*" + err,
        files={"m.json": json.dumps(dict(TOY_CONFIG, **change))}) for id, change, err in [
        ("moe-zero-per-token", {"num_local_experts": 8, "num_experts_per_tok": 0},
         r"gives 8 experts but 0 experts per token \(num_experts_per_tok\)"),
        ("moe-no-per-token", {"num_local_experts": 8}, r"gives 8 experts but 0 experts per token"),
        ("moe-zero-width", {"num_local_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 0},
         r"moe_intermediate_size 0; expected each expert's MLP width"),
        ("kv-heads-above-heads", {"num_key_value_heads": 8},
         r"field num_key_value_heads is 8, which does not divide the 4 attention heads"),
        ("kv-heads-not-dividing", {"num_key_value_heads": 3}, r"field num_key_value_heads is 3, which does not divide"),
        ("mlp-only-outside", {"mlp_only_layers": [1000, -1]},
         r"field mlp_only_layers names layer 1000; expected layer indices from 0 to 1"),
        ("mlp-only-repeated", {"mlp_only_layers": [0] * 500}, r"field mlp_only_layers names layer 0 more than once"),
        ("mlp-only-bool", {"mlp_only_layers": [True]}, r"field mlp_only_layers must be a list of layer indices"),
        ("sparse-step-zero", {"decoder_sparse_step": 0}, r"field decoder_sparse_step must be an integer from 1"),
        ("sparse-step-float", {"decoder_sparse_step": 1.5}, r"field decoder_sparse_step must be an integer"),
        ("moe-freq-negative", {"moe_layer_freq": -1}, r"field moe_layer_freq must be an integer from 1"),
        ("max-position-zero", {"max_position_embeddings": 0},
         r"field max_position_embeddings must be an integer from 1 to 2147483648, got 0"),
        ("moe-no-width", {"num_local_experts": 8, "num_experts_per_tok": 2},
         r"gives 8 experts but no moe_intermediate_size \(nor intermediate_size\)"),
        ("first-dense-beyond", {"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 128,
                                "first_k_dense_replace": 3},
         r"field first_k_dense_replace is 3, more than the 2 layers"),
        ("layer-types-count", {"layer_types": ["full_attention"]}, r"field layer_types names 1 layers; expected"),
        ("sliding-no-window", {"layer_types": ["sliding_attention"] * 2, "sliding_window": 0},
         r"2 sliding_attention layers \(layer_types\) but sliding_window is 0"),
        ("tie-not-bool", {"tie_word_embeddings": "yes"}, r"field tie_word_embeddings must be true or false"),
        ("heads-not-dividing-hidden", {"num_attention_heads": 3},
         r"no head_dim and its 3 attention heads \(num_attention_heads\) do not divide hidden_size 64"),
        ("mla-no-v-head-dim", {"kv_lora_rank": 16, "qk_rope_head_dim": 8, "qk_nope_head_dim": 8},
         r"kv_lora_rank 16 \(MLA attention\) but field v_head_dim is None"),
    ]],
]

# ============================================================ the third hostile walk (draft models, router aliases,
# recommend's space, bounds)

_DRAFT = ("latency: {kind: roofline, model: Llama-3.1-8B, gpu: H100}\nworkload: {kind: synthetic, num_requests: 3}\n"
          "pools: {aggregated: {speculative: {method: draft_model, draft_model: %s, num_speculative_tokens: 2, "
          "acceptance_rates: 0.5}}}\n")
_MODEL = (REPO / "simkit" / "engine" / "data" / "models" / "Llama-3.1-8B.json").read_text()
_KV = "pools: {aggregated: {workers: 2}}\nworkload: {kind: synthetic, num_requests: 3}\nrouter: {kind: kv_aware, %s}\n"
_SLA = TINY + "sla: {ttft_ms: 500}\n"
ROUND3 = [
    C("draft-model-in-out-force", ["{in}/s.yaml", "--out", "{in}/o", "--force", "--no-plots", "--quiet"], BAD,
      r"refusing to replace a folder that holds the input .*o/d\.json",
      files={"s.yaml": _DRAFT % "o/d.json",
             "_prepare": lambda d: ((d / "in" / "o").mkdir(), (d / "in" / "o" / "d.json").write_text(_MODEL))}),
    scenario_case("draft-model-missing", _DRAFT % "nope.json", BAD, r"draft_model"),
    scenario_case("kv-alias-and-field", _KV % "overlap_weight: 1, prefill_load_scale: 5", BAD,
                  "give one of 'overlap_weight' and 'prefill_load_scale'"),
    scenario_case("kv-two-aliases", _KV % "overlap_weight: 1, overlap_score_weight: 2", BAD,
                  "give one of 'overlap_weight' and 'overlap_score_weight'"),
    scenario_case("kv-zero-weight-and-credit", _KV % "overlap_score_weight: 0, overlap_score_credit: 2", BAD,
                  "'overlap_score_weight: 0' also sets overlap_score_credit to 0"),
    scenario_case("planner-target-fraction-huge", "pools: {aggregated: {max_workers: 4}}\n"
                  "workload: {kind: synthetic, num_requests: 3}\nsla: {ttft_ms: 100}\n"
                  "planner: {kind: sla, interval_s: 1, target_fraction: 1.0e+300}\n", BAD,
                  r"'target_fraction' must be <= 1: 1e\+300"),
    C("recommend-unknown-dotted-knob", ["recommend", "{in}/s.yaml", "--gpus", "4", "--space", "nope.knob=1,2",
                                        "--out", "{tmp}/out"], BAD, r"--space nope\.knob=1: unknown field\(s\) nope",
      files={"s.yaml": _SLA}),
    C("recommend-bad-pool-value", ["recommend", "{in}/s.yaml", "--gpus", "4", "--space", "max_num_seqs=2,0",
                                   "--out", "{tmp}/out"], BAD, r"--space max_num_seqs=0: 'max_num_seqs' must be > 0",
      files={"s.yaml": _SLA}),
    C("recommend-bad-router-kind", ["recommend", "{in}/s.yaml", "--gpus", "4", "--space", "router=bogus",
                                    "--out", "{tmp}/out"], BAD, r"--space router=bogus: unknown kind 'bogus'",
      files={"s.yaml": _SLA}),
]

CLI_CASES = SCENARIOS + MOONCAKE + AGENTIC + AZURE + CSV + WEKA + WEKA_REQUESTS + GENERIC_TRACE + CLI + SWEEPS \
    + COMPARE + STEP + ROUND3


# ============================================================ the Python API

def _api(id, call, error=None, match=None):
    return pytest.param(call, error, match, id=id)


def _req(rid=0, **kw):
    from simkit.core.request import Request

    return attrs.evolve(Request(rid, 0.0, 10, 2), **kw)


def _run(*args, **kwargs):
    import simkit

    return simkit.run(*args, **kwargs)


AGG = {"pools": {"aggregated": {}}, "workload": {"kind": "synthetic", "num_requests": 3}}
API = [
    _api("api-ok", lambda d: _run(AGG)),
    _api("api-bad-dict", lambda d: _run({"pools": 3}), "ConfigError", r"<dict>: .* @ \$\.pools"),
    _api("api-not-mapping-path", lambda d: _run(str(d / "nope.yaml")), "ConfigError", "cannot read scenario file"),
    _api("api-override-bad", lambda d: _run(AGG, {"pools.aggregated.workers": -1}), "ConfigError", "must be > 0"),
    _api("api-negative-length", lambda d: _run(AGG, requests=[_req(input_length=-3)]), "ValueError",
         r"requests\[0\] \(rid 0\): input_length is -3"),
    _api("api-zero-length", lambda d: _run(AGG, requests=[_req(input_length=0)]), "ValueError", "input_length is 0"),
    _api("api-nan-arrival", lambda d: _run(AGG, requests=[_req(arrived_at=float("nan"))]), "ValueError",
         "arrived_at is nan"),
    _api("api-inf-arrival", lambda d: _run(AGG, requests=[_req(arrived_at=float("inf"))]), "ValueError",
         "arrived_at is inf"),
    _api("api-negative-arrival", lambda d: _run(AGG, requests=[_req(arrived_at=-1.0)]), "ValueError",
         "arrived_at is -1.0"),
    _api("api-arrival-beyond-limit", lambda d: _run(AGG, requests=[_req(arrived_at=1e10)]), "ValueError",
         "expected seconds from 0 to 1e9 s"),
    _api("api-missing-dep", lambda d: _run(AGG, requests=[_req(deps=(5,))]), "ValueError", "deps is \\(5,\\)"),
    _api("api-self-dep", lambda d: _run(AGG, requests=[_req(deps=(0,))]), "ValueError", "deps is \\(0,\\)"),
    _api("api-dep-cycle", lambda d: _run(AGG, requests=[_req(0, deps=(1,)), _req(1, deps=(0,))]), "ValueError",
         "its deps form a cycle"),
    _api("api-duplicate-ids", lambda d: _run(AGG, requests=[_req(0), _req(0)]), "ValueError",
         "ids must be 0..1, each once"),
    _api("api-not-a-request", lambda d: _run(AGG, requests=[("x", 1)]), "ValueError",
         "expected a simkit.request.Request"),
    _api("api-priority-nan", lambda d: _run(AGG, requests=[_req(priority=float("nan"))]), "ValueError",
         "priority is nan"),
    _api("api-bool-length", lambda d: _run(AGG, requests=[_req(output_length=True)]), "ValueError",
         "output_length is True"),
    _api("api-planner-without-section", lambda d: _run(AGG, planner=object()), "ConfigError",
         "no 'planner' section"),
    _api("api-router-without-pick", lambda d: _run(AGG, router=object()), "ConfigError",
         "is not a router policy"),
    _api("api-load-result-missing", lambda d: __import__("simkit").load_result(str(d / "nope")),
         "FileNotFoundError", "summary.json"),
    _api("api-load-result-nested", lambda d: (_run_folder(d, "n"), (d / "in" / "n" / "summary.json").write_text(
        "[" * 100000 + "]" * 100000), __import__("simkit").load_result(str(d / "in" / "n"))), "ValueError",
         "nested too deeply"),
    _api("api-save-over-results", lambda d: _run(AGG).save(str(_run_folder(d, "s"))), "FileExistsError", "s"),
    _api("api-save-over-its-trace", lambda d: ((d / "in" / "t.jsonl").write_text(MOON), _run(
        {"pools": {"aggregated": {}}, "workload": {"kind": "trace", "path": str(d / "in" / "t.jsonl")}}).save(
        str(d / "in"), force=True)), "ValueError", r"refusing to replace a folder that holds .*t\.jsonl"),
    _api("api-save-over-cwd", lambda d: _run(AGG).save(str(d), force=True), "ValueError",
         "refusing to replace a folder that holds"),
    _api("api-delay-chain-beyond-limit", lambda d: _run(AGG, requests=[
        _req(i, deps=(i - 1,) if i else (), delay_s=4e8) for i in range(4)]), "ValueError",
        r"requests\[3\] \(rid 3\): the delays along the requests it waits for put it at least 1\.2e\+09 s"),
    _api("api-override-named-as-override", lambda d: _run(str(SCEN / "agg.yaml"), {"pools.aggregated.wrkers": 2}),
         "ConfigError", r"^override pools\.aggregated\.wrkers: unknown field\(s\) wrkers"),
    _api("api-relative-trace-in-dict", lambda d: (os.chdir(d / "in"), (d / "in" / "t.jsonl").write_text(MOON),
                                                  _run({"pools": {"aggregated": {}},
                                                        "workload": {"kind": "trace", "path": "t.jsonl"}}))),
]


# ============================================================ the runner


@pytest.fixture(scope="module", autouse=True)
def base_run(tmp_path_factory):
    """One finished run folder that the compare cases copy."""
    global _BASE_RUN
    from simkit.cli import main

    folder = tmp_path_factory.mktemp("base") / "run"
    assert main([str(SCEN / "reference_agg.yaml"), "--set", "workload.num_requests=4", "--out", str(folder),
                 "--no-plots", "--quiet"]) == 0
    _BASE_RUN = folder
    yield folder


def _prepare(case: Case, d: Path) -> None:
    (d / "in").mkdir()
    for name, text in case.files.items():
        if name == "_prepare":
            text(d)
            continue
        path = d / "in" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        body = text(d) if callable(text) else text.replace("{in}", str(d / "in"))
        path.write_bytes(body.encode("utf-8", "surrogateescape")) if "\udcff" in body else path.write_text(body)


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): (p.stat().st_mtime_ns if p.is_file() else None)
            for p in d.rglob("*") if not p.is_fifo()}


@pytest.mark.parametrize("case", CLI_CASES, ids=[c.id for c in CLI_CASES])
def test_cli_case(case: Case, tmp_path, monkeypatch, capsys):
    from simkit.cli import main

    monkeypatch.chdir(tmp_path)
    _prepare(case, tmp_path)
    before = _snapshot(tmp_path)
    argv = [a.replace("{in}", str(tmp_path / "in")).replace("{tmp}", str(tmp_path)) for a in case.argv]
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    out, err = capsys.readouterr()
    fill = {"{in}": re.escape(str(tmp_path / "in")), "{tmp}": re.escape(str(tmp_path))}

    def pattern(p):
        for key, value in fill.items():
            p = p.replace(key, value)
        return p

    assert "Traceback" not in err and "Traceback" not in out
    assert code == case.code, (code, err)
    if case.err is not None:
        assert re.search(pattern(case.err), err), err
    if case.out is not None:
        assert re.search(pattern(case.out), out), out
    leftovers = [p.name for p in tmp_path.rglob(".simkit-*") if p.name != ".simkit-claim"]
    assert not leftovers, leftovers  # no temp folder (a claim a case made itself is checked below)
    if code == BAD:
        assert err.count("\n") == 1, err  # one line
        assert _snapshot(tmp_path) == before  # nothing written, no input touched
    elif code in (1, 130) and not argv[0] in ("compare", "step", "sweep"):
        assert summary(tmp_path / "out")["stop"]["incomplete"] is True
    if case.check is not None:
        assert case.check(tmp_path)


@pytest.mark.parametrize("call, error, match", API)
def test_api_case(call, error, match, tmp_path, monkeypatch):
    from simkit.spec import ConfigError  # noqa: F401 - named by the table

    monkeypatch.chdir(tmp_path)
    (tmp_path / "in").mkdir()
    if error is None:
        call(tmp_path)
        return
    with pytest.raises(Exception) as info:
        call(tmp_path)
    assert type(info.value).__name__ == error, repr(info.value)
    assert re.search(match, str(info.value)), str(info.value)
    assert "\n" not in str(info.value)


def test_the_corpus_is_large_enough():
    ids = [c.id for c in CLI_CASES] + [p.id for p in API]
    assert len(ids) == len(set(ids)), "case ids repeat"
    assert len(ids) >= 150, len(ids)


if __name__ == "__main__":  # python tests/test_hostile_corpus.py: pytest in a fresh interpreter
    import subprocess

    sys.exit(subprocess.call([sys.executable, "-m", "pytest", "-q", os.path.abspath(__file__)],
                             cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _rows_dropped(d):
    """A run folder whose requests.jsonl lost a row (the summary still counts it)."""
    folder = _run_folder(d, "short")
    (folder / "requests.parquet").unlink()
    rows = (folder / "requests.jsonl").read_text().splitlines()
    (folder / "requests.jsonl").write_text("\n".join(rows[:-1]) + "\n")
    return folder


def _nan_summary(d):
    folder = _run_folder(d, "nan")
    text = (folder / "summary.json").read_text()
    (folder / "summary.json").write_text(text.replace('"completed": ', '"completed": NaN, "x": ', 1))
    return folder


ROUND4 = [
    _api("api-empty-requests", lambda d: _run(AGG, requests=[]), "ValueError", "requests: empty"),
    _api("api-requests-not-a-sequence", lambda d: _run(AGG, requests=5), "ValueError",
         "requests: expected a sequence of simkit.Request, got int"),
    _api("api-overrides-a-list", lambda d: _run(AGG, ["a=1"]), "ValueError", "overrides: expected a mapping"),
    _api("api-load-result-a-file", lambda d: ((d / "in" / "f.txt").write_text("x"),
                                              __import__("simkit").load_result(str(d / "in" / "f.txt"))),
         "NotADirectoryError", "not a simkit run folder"),
    _api("api-load-result-rows-lost", lambda d: __import__("simkit").load_result(str(_rows_dropped(d))),
         "ValueError", "request rows hold"),
    _api("api-load-result-nan", lambda d: __import__("simkit").load_result(str(_nan_summary(d))),
         "ValueError", "NaN is not a JSON value"),
]


@pytest.mark.parametrize("call, error, match", ROUND4)
def test_round4_api_case(call, error, match, tmp_path, monkeypatch):
    """The fourth hostile walk's API cases (the Python API's arguments, damaged run folders)."""
    test_api_case(call, error, match, tmp_path, monkeypatch)
