"""The benchmark scripts stay runnable: each one imports and prints its usage (a script that no
longer imports is found here, not by the next person who measures)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from conftest import REPO

SCRIPTS = ["speed.py", "memory.py", "compare_reference.py", "silicon_accuracy.py",
           "aic_bucket_error.py", "calibrate_roofline.py"]


@pytest.mark.parametrize("name", SCRIPTS)
def test_benchmark_script_prints_its_usage(name):
    if name == "calibrate_roofline.py" and importlib.util.find_spec("scipy") is None:
        pytest.skip("calibrate_roofline.py needs scipy (pip install -e '.[bench]')")
    proc = subprocess.run([sys.executable, str(REPO / "benchmarks" / name), "--help"], capture_output=True,
                          text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage" in proc.stdout.lower()
