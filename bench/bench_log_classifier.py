"""`make bench` (log classifier): MB/s of job log classified on one core, and peak memory.

Inputs, generated once under var/bench-logs/:
- `pytorch-fixtures.log`, ~200 MB of real PyTorch CI log text: the regression fixtures of
  PyTorch's log classifier (tests/data/log-classifier/fixtures, markers removed) end to end,
  repeated. Dense in failure lines and confusers: a pessimistic case for the per-line work.
- `simulated.log.gz`, ~200 MB (uncompressed) of the simulator's failed-job logs end to end,
  gzipped as PyTorch stores logs: includes the inflate.
Each is classified in a fresh process (`classify_log`: streaming read, normalisation,
prefilter, per-line rules) with this project's default rules and with PyTorch's own ruleset
(~100 rules), several times; the median is reported. Target (issue 12): >= 50 MB/s of log per
core with either ruleset. Peak RSS must not grow with the log (it is read in blocks).
"""

from __future__ import annotations

import gzip
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH = Path(os.environ.get("TORCHCI_BENCH_DIR", ROOT / "var" / "bench-logs"))
FIXTURES = ROOT / "tests" / "data" / "log-classifier" / "fixtures"
PYTORCH_RULES = ROOT / "tests" / "data" / "log-classifier" / "pytorch-ruleset.toml"
SIZE = int(os.environ.get("TORCHCI_BENCH_LOG_MB", "200")) << 20
RUNS = int(os.environ.get("TORCHCI_BENCH_RUNS", "3"))
TARGET_MB_S = 50.0

CLASSIFY = """
import json, resource, sys, time
from resources.storage import Store
from torchci_assets.derived.failures.job_failure import classify_log
from torchci_assets.derived.failures.rules import load_ruleset
rules = load_ruleset(sys.argv[3] or None)
t = time.perf_counter()
r = classify_log(Store(sys.argv[1]), sys.argv[2], rules)
elapsed = time.perf_counter() - t
print(json.dumps({"seconds": elapsed, "bytes": r.bytes_read, "lines": r.lines, "rule": r.rule,
                  "line_number": r.line_number, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _fixture_text() -> bytes:
    parts = []
    for f in sorted(FIXTURES.glob("*.txt")):
        lines = [ln[len("#=MATCH=# "):].replace("‹", "").replace("›", "") if ln.startswith("#=MATCH=# ") else ln
                 for ln in f.read_text(encoding="utf-8").split("\n") if not ln.startswith("#=SOURCE=#")]
        parts.append("\n".join(lines).rstrip("\n") + "\n")
    return "".join(parts).encode()


def _simulated_text() -> bytes:
    import datetime as dt

    from torchci_assets.simulate.generate import generate_archive
    from torchci_assets.simulate.world import Options

    with tempfile.TemporaryDirectory() as tmp:
        generate_archive(Path(tmp), [dt.date(2026, 11, 1)], Options(seed=1), log=lambda _: None)
        parts = []
        for p in sorted(Path(tmp).glob("logs/day=*/*")):
            data = p.read_bytes()
            parts.append(gzip.decompress(data) if p.name.endswith(".gz") else data)
    return b"".join(parts)


def generate() -> dict[str, Path]:
    BENCH.mkdir(parents=True, exist_ok=True)
    inputs = {"pytorch-fixtures.log": _fixture_text, "simulated.log.gz": _simulated_text}
    out = {}
    for name, make in inputs.items():
        path = BENCH / name
        marker = BENCH / f".{name}.{SIZE}"
        if not marker.exists():
            print(f"generating {path} (~{SIZE >> 20} MB of log) ...", flush=True)
            unit = make()
            body = unit * (SIZE // len(unit) + 1)
            tmp = path.with_name(f".{name}.tmp")
            if name.endswith(".gz"):
                with gzip.open(tmp, "wb", compresslevel=6) as f:
                    f.write(body)
            else:
                tmp.write_bytes(body)
            os.replace(tmp, path)
            marker.touch()
        out[name] = path
    return out


def measure(path: Path, rules: str) -> dict:
    runs = []
    for _ in range(RUNS):
        res = subprocess.run([sys.executable, "-c", CLASSIFY, str(path.parent), path.name, rules],
                             capture_output=True, text=True, cwd=ROOT, check=True)
        runs.append(json.loads(res.stdout))
    mbs = [r["bytes"] / 1e6 / r["seconds"] for r in runs]
    return {**runs[0], "mb_s": statistics.median(mbs), "mb_s_all": mbs, "rss_mb": max(r["rss_mb"] for r in runs)}


def main() -> int:
    inputs = generate()
    print(f"log classifier, one process per run, median of {RUNS} (machine: {os.cpu_count()} cores, shared)\n")
    print(f"{'input':<22} {'rules':<16} {'MB':>6} {'lines':>10} {'MB/s':>7} {'runs (MB/s)':<22} {'RSS MB':>7}  verdict")
    ok = True
    for name, path in inputs.items():
        for label, rules in (("default", ""), ("pytorch (102)", str(PYTORCH_RULES))):
            r = measure(path, rules)
            ok &= r["mb_s"] >= TARGET_MB_S
            runs = ", ".join(f"{m:.0f}" for m in r["mb_s_all"])
            print(f"{name:<22} {label:<16} {r['bytes'] / 1e6:>6.0f} {r['lines']:>10,} {r['mb_s']:>7.1f} {runs:<22} "
                  f"{r['rss_mb']:>7.0f}  {r['rule']} @ {r['line_number']:,}")
    print(f"\ntarget >= {TARGET_MB_S:.0f} MB/s per core: {'met' if ok else 'NOT MET'}")
    return 0 if ok else 1


if __name__ == "__main__":
    t = time.perf_counter()
    code = main()
    print(f"({time.perf_counter() - t:.0f} s)")
    sys.exit(code)
