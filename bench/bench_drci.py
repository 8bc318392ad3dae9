"""Dr. CI's cost in GitHub requests and its freshness on a PyTorch-sized day of pull requests.

Data: a simulated day with every configuration and --prs-per-day pull requests (default 150: the
order of pull requests PyTorch opens a day; each gets 0-3 synchronize pushes and ~100-200 jobs
per head), generated once under var/bench-drci (webhooks only: no test reports are needed).

Requests. A comment's body changes when its head's jobs change in a way it shows: a job appears
(the pending count grows), or completes (it shrinks, or a failure is listed); in_progress does
not. Refreshes run every --interval minutes (the intra-day refresh's cadence, default 15); at each,
every open pull request whose head saw such a delivery since the last refresh (or whose head is
new) gets a new body: one list of its comments and one write (the first: a create and a second
list, to catch a racing twin), plus one compare request per new head for its merge base. Bodies
that did not change cost nothing (the ledger) but the looks for a deletion whose webhook was lost:
each refresh takes the comments Dr. CI's own `publish.due_looks` picks (unseen, neither posted nor
looked at, for VERIFY_AFTER), asked as `publish.look` asks them (`looks` counts the comments looked
at, `look req` the requests). The simulated pull requests close within hours, so --settled
(default 500) more stay open all day with a comment that no longer changes, last seen at random in
the VERIFY_AFTER before the day: PyTorch's open pull requests, which only the looks cost. Counted
from the archive's own deliveries.

Freshness. A `completed` delivery reaches the archive within the receiver's roll (60 s), waits for
the next refresh (ticks every 60 s, at most one per interval), and is in the comment when the
refresh's `drci_comments` step ends: latency = roll + wait + (step end within the run). The run
times are `make bench-freshness`'s (the refresh of a PyTorch-sized day publishes the HUD 54 s into
the run, in process; drci_comments runs just before hud_site) plus this step's own time, measured
here on the simulated lake if --lake is given. Printed for several intervals: the 5-minute p95
target needs the intra-day refresh to run every few minutes.

Run as `make bench-drci` (python bench/bench_drci.py [--prs-per-day 150] [--interval 15]).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "var" / "bench-drci"
BIN = Path(sys.executable).parent
DAY = "2026-10-02"
ROLL_S = 60.0
TICK_S = 60.0
RUN_TO_DRCI_S = 54.0  # bench-freshness: a refresh of a PyTorch-sized day publishes the HUD 54 s in


def simulate(prs: int) -> Path:
    out = WORK / f"prs{prs}"
    if not (out / "ground-truth.json").exists():
        print(f"simulating two days with {prs} pull requests a day under {out} (once) ...", flush=True)
        subprocess.run([str(BIN / "torchci"), "simulate", "--out", str(out), "--days", "2", "--start", "2026-10-01",
                        "--configs", "all", "--prs-per-day", str(prs), "--no-test-reports", "--seed", "5"],
                       check=True, stdout=subprocess.DEVNULL)
    return out


def seconds(iso: str) -> float:
    import datetime as dt
    return dt.datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp()


def deliveries(archive: Path) -> tuple[dict, dict]:
    """(head sha -> [(received_s, action)] of its job deliveries, pr -> [(received_s, action, head, state)])."""
    jobs, prs = defaultdict(list), defaultdict(list)
    for path in sorted((archive / "webhooks").glob("day=*/*.jsonl.gz")):
        with gzip.open(path, "rt") as f:
            for line in f:
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a torn line (the simulator plants them)
                p = e["payload"]
                if e["event"] == "workflow_job":
                    jobs[p["workflow_job"]["head_sha"]].append((seconds(e["received_at"]), p["action"]))
                elif e["event"] == "pull_request":
                    pr = p["pull_request"]
                    prs[pr["number"]].append((seconds(e["received_at"]), p["action"], pr["head"]["sha"], pr["state"]))
    return jobs, prs


def look_requests(due: dict) -> int:
    """The requests `publish.look` sends for the looks `due`: one GraphQL query per post.LOOK_BATCH
    comments with a node id (a GET each before the looks were batched)."""
    from torchci_assets.derived.drci import post

    batch = getattr(post, "LOOK_BATCH", None)
    return len(due) if batch is None else -(-len(due) // batch)


def looks_at(seen_at: dict[int, float], t: float) -> dict:
    """The looks a refresh at `t` takes: Dr. CI's own choice (`publish.due_looks`), each comment seen
    last at `seen_at` and recorded with a node id, as every post now records one."""
    import datetime as dt

    from torchci_assets.derived.drci.publish import LastPost, due_looks

    def at(x: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(x, dt.timezone.utc)

    node = "node_id" in LastPost.__dataclass_fields__  # a ledger before node ids: a GET each look
    return due_looks({n: LastPost("b", n, at(x), *([f"IC_{n}"] if node else [])) for n, x in seen_at.items()}, at(t))


def settled_seen(count: int, start: float, seed: int = 7) -> dict[int, float]:
    """The `settled` pull requests (numbers above the simulated ones), each last seen at random in the
    VERIFY_AFTER before `start`."""
    from torchci_assets.derived.drci.publish import VERIFY_AFTER

    rng = random.Random(seed)
    return {10_000_000 + i: start - rng.uniform(0, VERIFY_AFTER.total_seconds()) for i in range(count)}


def requests_for(jobs: dict, prs: dict, start: float, interval_s: float, settled: int = 0) -> dict:
    """Requests of a day's refreshes every `interval_s` from `start` (see the module docstring)."""
    out = {"refreshes": 0, "bodies": 0, "creates": 0, "compares": 0, "lists": 0, "writes": 0, "looks": 0,
           "look_requests": 0}
    heads_seen, commented, per_hour, seen_at = set(), set(), defaultdict(int), settled_seen(settled, start)
    for k in range(int(86400 // interval_s)):
        lo, hi = start + k * interval_s - ROLL_S, start + (k + 1) * interval_s - ROLL_S
        out["refreshes"] += 1
        for number, events in prs.items():
            past = [e for e in events if e[0] <= hi]
            if not past or past[-1][3] != "open":
                seen_at.pop(number, None)  # closed: no longer written, nor looked at
                continue
            head = past[-1][2]
            new_head = head not in heads_seen
            changed = new_head or any(lo < t <= hi and a in ("queued", "completed") for t, a in jobs.get(head, ()))
            if not changed:
                continue
            heads_seen.add(head)
            seen_at[number] = hi
            out["compares"] += new_head
            out["bodies"] += 1
            out["lists"] += 1
            out["writes"] += 1
            per_hour[int(k * interval_s // 3600)] += 1
            if number not in commented:
                commented.add(number)
                out["creates"] += 1
                out["lists"] += 1
        due = looks_at({n: t for n, t in seen_at.items() if t < hi}, hi)
        seen_at.update((n, hi) for n in due)
        out["looks"] += len(due)
        out["look_requests"] += look_requests(due)
    out["total"] = out["compares"] + out["lists"] + out["writes"] + out["look_requests"]
    out["peak_writes_per_hour"] = max(per_hour.values(), default=0)
    return out


def freshness(jobs: dict, interval_s: float, step_s: float, seed: int = 3) -> list[float]:
    """Latency of each `completed` delivery of the day to the comment (see the module docstring)."""
    rng = random.Random(seed)
    period = max(TICK_S, interval_s)
    phase = rng.uniform(0, period)
    out = []
    for events in jobs.values():
        for t, action in events:
            if action != "completed":
                continue
            landed = t + rng.uniform(0, ROLL_S)
            k = -(-(landed - phase) // period)
            out.append(phase + k * period - t + RUN_TO_DRCI_S + step_s)
    return out


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--prs-per-day", type=int, default=150)
    p.add_argument("--intervals", type=float, nargs="+", default=[15, 5, 3, 1], help="refresh intervals, minutes")
    p.add_argument("--step-s", type=float, default=10.0, help="drci_comments step time, seconds (measured apart)")
    p.add_argument("--settled", type=int, default=500, help="pull requests open all day whose comment does not change")
    args = p.parse_args(argv)
    archive = simulate(args.prs_per_day)
    jobs, prs = deliveries(archive)
    start = seconds(f"{DAY}T00:00:00Z")
    day_jobs = {h: [e for e in ev if start <= e[0] < start + 86400] for h, ev in jobs.items()}
    completed = sum(1 for ev in day_jobs.values() for _, a in ev if a == "completed")
    print(f"simulated day {DAY}: {len(prs)} pull requests seen, {sum(1 for ev in day_jobs.values() if ev)} heads with "
          f"jobs, {completed} job completions; {args.settled} settled pull requests open all day")
    print(f"{'interval':>9} {'refreshes':>9} {'bodies':>7} {'creates':>7} {'compare':>7} {'lists':>7} {'writes':>7} "
          f"{'looks':>6} {'look req':>8} {'requests':>8} {'writes/h peak':>13}   receipt -> comment p50 / p95")
    for minutes in args.intervals:
        r = requests_for(jobs, prs, start, minutes * 60, args.settled)
        lat = freshness(day_jobs, minutes * 60, args.step_s)
        print(f"{minutes:>7g} m {r['refreshes']:>9} {r['bodies']:>7} {r['creates']:>7} {r['compares']:>7} {r['lists']:>7} "
              f"{r['writes']:>7} {r['looks']:>6} {r['look_requests']:>8} {r['total']:>8} {r['peak_writes_per_hour']:>13}   {pct(lat, 0.5) / 60:5.1f} / {pct(lat, 0.95) / 60:5.1f} min")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
