"""The archive's source folders as external assets, so lineage starts where the data does.

The receiver and CI's uploaders write them, not Dagster: the UI draws them upstream of the ingest
assets that read them, with where they are, and `torchci run` and the jobs never materialize them.
"""

import dagster as dg

from resources.storage import Store
from resources.uris import resolved_uri

# source folder -> (asset key, kind, what lands there)
ARCHIVE_FOLDERS = {
    "webhooks": ("webhook_archive", "jsonl", "GitHub webhook deliveries as the receiver spooled them: JSONL "
                                             "envelopes (event, delivery id, received_at, payload), gzipped."),
    "test-reports": ("test_report_archive", "xml", "JUnit XML test reports uploaded by CI jobs, per workflow run "
                                                   "and attempt."),
    "test-runs": ("test_run_archive", "jsonl", "PyTorch's per-test JSONL rows uploaded by CI jobs."),
    "ci-results": ("ci_result_archive", "jsonl", "Downstream backends' result callbacks, as the relay received them."),
    "logs": ("log_archive", "text", "Raw logs of failed CI jobs."),
}


def archive_key(source: str) -> dg.AssetKey:
    """The external asset of an archive source folder (`webhooks`, `test-reports`, ...)."""
    return dg.AssetKey(ARCHIVE_FOLDERS[source][0])


def archive_specs() -> list[dg.AssetSpec]:
    store = Store(resolved_uri("TORCHCI_ARCHIVE_URI"))
    return [dg.AssetSpec(key, group_name="ingest", kinds={kind}, description=f"Archive `{source}/day=YYYY-MM-DD/`: "
                         + text + " Written outside Dagster; the ingest assets read one day folder per partition.",
                         metadata={"dagster/uri": store.display(source)})
            for source, (key, kind, text) in ARCHIVE_FOLDERS.items()]
