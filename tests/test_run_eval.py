"""``make eval`` (benchmarks/run_eval.sh) writes only to its output directory, never over tracked files."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKE_RDMEM = """#!/usr/bin/env bash
# rdmem eval ... --out DIR: writes the four small files the script copies
while [ "$#" -gt 0 ]; do [ "$1" = "--out" ] && out=$2; shift; done
mkdir -p "$out"
for f in results.md results.csv results.json rd_curve.png; do echo fresh > "$out/$f"; done
"""


def _checkout(tmp_path: Path) -> Path:
    """The script in a copy of the repository's layout, with an `rdmem` that only writes its outputs."""
    root = tmp_path / "repo"
    (root / "benchmarks" / "results" / "locomo_dev").mkdir(parents=True)
    shutil.copy(REPO / "benchmarks" / "run_eval.sh", root / "benchmarks" / "run_eval.sh")
    (root / "benchmarks" / "results" / "locomo_dev" / "results.md").write_text("recorded\n")
    bin_dir = root / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "rdmem").write_text(FAKE_RDMEM)
    (bin_dir / "rdmem").chmod(stat.S_IRWXU)
    return root


def _run(root: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "benchmarks/run_eval.sh", "data.json"], cwd=root, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **env})


def test_make_eval_leaves_the_recorded_results_alone(tmp_path):
    root = _checkout(tmp_path)
    done = _run(root)
    assert done.returncode == 0, done.stderr
    assert (root / "eval-out" / "locomo_dev" / "results.md").read_text() == "fresh\n"
    assert (root / "benchmarks" / "results" / "locomo_dev" / "results.md").read_text() == "recorded\n"
    assert sorted(p.name for p in (root / "benchmarks" / "results" / "locomo_dev").iterdir()) == ["results.md"]


def test_record_copies_them_when_asked(tmp_path):
    root = _checkout(tmp_path)
    assert _run(root, RECORD="1").returncode == 0
    assert (root / "benchmarks" / "results" / "locomo_dev" / "results.md").read_text() == "fresh\n"
