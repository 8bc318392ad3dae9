"""A 5-minute refresh once today's test_run holds the parts a day of one-minute refreshes leaves.

bench_day_end.py ingests a day's last hour slice by slice, which leaves ~1,400 webhook parts but
only ~140 test_run parts (most ~2 s slices complete no job with reports), in ~45 minutes. This one
builds the day as make bench-freshness does (the day up to 23:45 at once), then cuts today's
test_run into N parts by job, as N increments of one-minute refreshes add them (by default as the
ingest leaves them, merged tier by tier, `ingest/compaction.py`; with --unmerged, N parts as a
version that did not merge left them: the next increment merges them all at once), runs one
refresh that catches the followers up (test_results writes files per part), and measures the next
two 5-minute slices with the full refresh job, ROUNDS times from the same state. N = 1 is the day
built at once.

    .venv/bin/python bench/bench_day_parts.py 1400 [--unmerged] [--rounds 2]    # ~6 min on 2 cores
"""
import argparse, json, os, shutil, subprocess, sys, uuid
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench")); sys.path.insert(0, ROOT)
import bench_freshness as bf
from pathlib import Path
import pyarrow.parquet as pq
from torchci_assets.ingest.compaction import plan_merges
from torchci_assets.ingest.reports import OUTPUT_BATCH_ROWS

SNAP = bf.WORK / "day-parts"


def tiered(count: int) -> tuple[list[str], dict[str, list[str]], dict[str, list[str]]]:
    """The parts `count` increments leave with the ingest's merging: their stems in order, every
    merge (stem -> the stems it replaced), and the increments each part holds."""
    stems, merged = [], {}
    for seq in range(1, count + 1):
        merges, stems = plan_merges([*stems, f"inc-{seq}"], seq, committed=set(stems))
        merged.update({m.name: list(m.sources) for m in merges})

    def leaves(stem: str) -> list[str]:
        return [x for s in merged[stem] for x in leaves(s)] if stem in merged else [stem]
    return stems, merged, {s: leaves(s) for s in stems}


def cut_test_run(today: str, n: int, merge: bool) -> int:
    """Today's test_run (one rebuilt part) as n increments' parts, its manifest saying so."""
    folder = bf.RUN / "lake" / "test_run" / f"day={today}"
    table = pq.read_table(folder / "data.parquet")
    job = table.column("job_id").to_numpy()
    cuts = [0]
    for k in range(1, n):
        at = k * len(job) // n
        while 0 < at < len(job) and job[at] == job[at - 1]:  # a job's rows stay in one part
            at += 1
        if cuts[-1] < at < len(job):
            cuts.append(at)
    cuts.append(len(job))
    slices = {f"inc-{i + 1}": table.slice(cuts[i], cuts[i + 1] - cuts[i]) for i in range(len(cuts) - 1)}
    stems, merged, leaves = tiered(len(slices)) if merge else (list(slices), {}, {s: [s] for s in slices})
    manifest = json.loads((folder / "_manifest.json").read_text())
    (folder / "data.parquet").unlink()
    del manifest["files"]["test_run/data.parquet"]
    for stem in stems:
        with pq.ParquetWriter(folder / f"{stem}.parquet", table.schema, compression="zstd") as w:
            for leaf in leaves[stem]:  # row groups as the ingest writes them
                w.write_table(slices[leaf], row_group_size=OUTPUT_BATCH_ROWS)
        manifest["files"][f"test_run/{stem}.parquet"] = (folder / f"{stem}.parquet").stat().st_size
    names = [f"{s}.parquet" for s in stems]
    manifest["seq"] = len(slices)
    manifest["tables"]["test_run"] = {
        "parts": names, "generation": uuid.uuid4().hex, "last_change": "append", "appended": names[-1:],
        "merged": {f"{k}.parquet": [f"{x}.parquet" for x in v] for k, v in merged.items()}}
    tmp = folder / "_manifest.json.tmp"
    tmp.write_text(json.dumps(manifest))
    os.replace(tmp, folder / "_manifest.json")
    return len(stems)


def copy_state(src: Path, dst: Path) -> None:
    """The run's lake, outputs and instance (the lake and outputs as hard links: writers replace
    files, never edit them). The archive stays where it is: its folders' times and inodes are what
    the ingest's listing cache compares, and a copy would make every folder new."""
    for d in ("lake", "outputs", "dagster"):
        shutil.rmtree(dst / d, ignore_errors=True)
    dst.mkdir(parents=True, exist_ok=True)
    for d in ("lake", "outputs"):
        subprocess.run(["cp", "-al", str(src / d), str(dst / d)], check=True)
    subprocess.run(["cp", "-a", str(src / "dagster"), str(dst / "dagster")], check=True)


def unland(files: list[tuple[Path, Path]]) -> None:
    """Take a landed slice out of the archive again, and the folders its landing made."""
    for _, dst in files:
        shutil.rmtree(dst) if dst.is_dir() else dst.unlink()
        folder = dst.parent
        while folder != bf.RUN / "archive" and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("parts", type=int, nargs="?", default=1400)
    ap.add_argument("--unmerged", action="store_true")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    bf.ensure_cache()
    yesterday, today = bf.utc_days()
    slices = bf.prepare_run(yesterday, today)
    env = bf.env_for(yesterday)
    bf.seed_yesterday(env, yesterday)
    first, cursor = bf.refresh_once(env, today, "")
    bf.print_run("first refresh, day up to 23:45", first)
    parts = cut_test_run(today, args.parts, not args.unmerged)
    bf.land_slice(slices[0])
    catch_up, cursor = bf.refresh_once(env, today, cursor)
    bf.print_run(f"catch-up, test_run in {parts} parts", catch_up)
    copy_state(bf.RUN, SNAP)
    runs = []
    for i in range(args.rounds):
        copy_state(SNAP, bf.RUN)
        state = cursor
        for k in (1, 2):
            bf.land_slice(slices[k])
            r, state = bf.refresh_once(env, today, state)
            bf.print_run(f"round {i + 1}, +5 min ({len(slices[k])} files)", r)
            runs.append(r)
        for k in (2, 1):
            unland(slices[k])
    bf.print_steps(runs, top=14)
    each = ", ".join(f"{r['cpu_s']:.1f}" for r in runs)
    print(f"5-minute refresh, test_run in {parts} parts ({args.parts} increments"
          f"{', unmerged' if args.unmerged else ', merged'}): median {bf.median([r['cpu_s'] for r in runs]):.1f} "
          f"CPU-s ({each})")


if __name__ == "__main__":
    main()
