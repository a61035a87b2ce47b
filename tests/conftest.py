"""Shared helpers: tiny scenarios built in Python, requests, and the ../shared locator."""

from __future__ import annotations

from pathlib import Path

import os

import pytest
from hypothesis import settings

from simkit import scenario_from_dict
from simkit.core.request import Request
from simkit.sim import simulate

# CI replays a fixed set of generated examples (reproducible, never flaky); local runs draw new
# ones every time and so keep exploring
settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")

REPO = Path(__file__).resolve().parent.parent
SHARED = REPO.parent / "shared"


def shared_path(*parts: str) -> Path:
    """A file under ../shared, or skip the test with a visible reason when it is absent."""
    path = SHARED.joinpath(*parts)
    if not path.exists():
        pytest.skip(f"{path} not found: this test needs the project's ../shared folder (CI has it)")
    return path


def one_line(capsys) -> str:
    """The one line a command wrote to stderr (no traceback), stripped."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, its folders made; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def interrupt_at_pass(monkeypatch, n: int) -> None:
    """Make the polynomial latency model raise KeyboardInterrupt when it prices its ``n``-th pass
    (a Ctrl-C in the middle of a run priced by it)."""
    from simkit.engine.latency import PolynomialModel

    calls = {"n": 0}
    original = PolynomialModel.pass_time_s

    def interrupting(self, *args):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return original(self, *args)

    monkeypatch.setattr(PolynomialModel, "pass_time_s", interrupting)


def signal_at_pass(monkeypatch, n: int, signum=None) -> None:
    """Make the polynomial latency model send this process ``signum`` (SIGINT by default) when it
    prices its ``n``-th pass: a real Ctrl-C (or SIGTERM) in the middle of a run priced by it,
    handled by whatever handler is installed."""
    import signal

    from simkit.engine.latency import PolynomialModel

    calls = {"n": 0}
    original = PolynomialModel.pass_time_s

    def signalling(self, *args):
        calls["n"] += 1
        if calls["n"] == n:
            signal.raise_signal(signal.SIGINT if signum is None else signum)
        return original(self, *args)

    monkeypatch.setattr(PolynomialModel, "pass_time_s", signalling)


def req(rid: int, at_ms: float, isl: int, osl: int, ids=None, tbs: int = 512) -> Request:
    """A request arriving at ``at_ms`` with prompt ``isl`` and output ``osl`` tokens."""
    if ids is None:
        ids = range(1000 * (rid + 1), 1000 * (rid + 1) + -(-isl // tbs))
    return Request(rid, at_ms / 1000.0, isl, osl, tuple(ids), tbs)


def scenario(mode: str = "aggregated", workers: int = 1, decode_workers: int = 1,
             latency=None, link=None, **pool):
    """A validated scenario: one pool (or prefill + decode) with engine overrides ``pool``."""
    if mode == "aggregated":
        pools = {"aggregated": dict(workers=workers, **pool)}
    else:
        pools = {"prefill": dict(workers=workers, **pool), "decode": dict(workers=decode_workers, **pool)}
    data = {"pools": pools}
    if latency is not None:
        data["latency"] = latency
    if link is not None:
        data["link"] = link
    return scenario_from_dict(data)


def run(requests, **kwargs):
    """Simulate ``requests`` on ``scenario(**kwargs)``; returns the records by rid."""
    return simulate(scenario(**kwargs), requests).requests


# The reference polynomial (REFERENCE.md section 4), in ms, for hand derivations.
def P(n: int) -> float:
    return 4.209989e-07 * n * n + 1.518344e-02 * n + 16.50142


def D(a: int, C: int = 16384 * 64) -> float:
    u = min(a / C, 1.0)
    return max(1.0, -25.74 * u * u + 54.01 * u + 5.74)


def draw_speculative(draw, backend: str):
    """A hypothesis draw of a pool's ``speculative`` settings (None about two times in three)."""
    from hypothesis import strategies as st

    if draw(st.integers(0, 2)):
        return None
    k = draw(st.integers(1, 3))
    spec = {"num_speculative_tokens": k,
            "acceptance_rates": [draw(st.sampled_from([0.0, 0.5, 0.9, 1.0])) for _ in range(k)],
            "sampling": draw(st.sampled_from(["sampled", "expected"])),
            "budget_counts_drafts": draw(st.booleans())}
    if backend != "sglang":
        spec["verify_in_prefill"] = draw(st.booleans())
    return spec
