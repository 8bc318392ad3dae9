"""A large day is scanned by one process per bronze part; the result must not depend on it."""

import pyarrow.parquet as pq

from conftest import envelope, write_lines
from resources.lake import Lake
from resources.storage import Store
from torchci_assets.ingest.webhooks import PARTS, _part_of, ingest_webhook_day

DAY = "2026-11-01"


def _tables(lake_dir):
    out = {}
    for path in sorted(lake_dir.rglob("*.parquet")):
        table = pq.read_table(path)
        out[str(path.relative_to(lake_dir))] = table.sort_by([(table.schema.names[0], "ascending")]).to_pylist()
    return out


def test_processes_and_in_process_scans_write_the_same_files(tmp_path, octokit):
    examples = [(e, p) for events in octokit.values() for e, ps in events.items() for p in ps]
    day = tmp_path / "archive" / "webhooks" / f"day={DAY}"
    for f in range(4):
        lines = [envelope(e, f"d-{(f * 31 + i) % 90}", p) for i, (e, p) in enumerate(examples)]  # duplicates across files
        write_lines(day / f"f{f}.jsonl.gz", lines + [b"{broken"])
    archive = Store(str(tmp_path / "archive"))
    one = ingest_webhook_day(archive, Lake.at(str(tmp_path / "one")), DAY, workers=1)
    two = ingest_webhook_day(archive, Lake.at(str(tmp_path / "two")), DAY, workers=PARTS)
    assert (one.deliveries, one.duplicates, one.lines, one.rows) == (two.deliveries, two.duplicates, two.lines, two.rows)
    assert one.deliveries == 90 and len(one.rejects) == 4
    assert one.rejects == two.rejects
    assert _tables(tmp_path / "one") == _tables(tmp_path / "two")


def test_part_of_keeps_a_delivery_in_one_part_whatever_the_rest_of_the_line():
    a = b'{"event": "push", "delivery_id": "abc-123", "received_at": "x", "payload": {"a": 1}}'
    b = b'{"delivery_id":"abc-123","payload":{"delivery_id":"other"},"event":"push"}'
    assert _part_of(a) == _part_of(b)
    # a quoted "delivery_id" inside a string value is escaped and is not taken for the key
    c = b'{"event": "x \\"delivery_id\\": \\"zzz\\"", "delivery_id": "abc-123"}'
    assert _part_of(c) == _part_of(a)
    assert _part_of(b"not json at all") == 0
    assert {_part_of(b'{"delivery_id": "%d"}' % i) for i in range(50)} == set(range(PARTS))
