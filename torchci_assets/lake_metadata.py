"""Dagster's own metadata on every lake table's materialization: row count, columns, location.

The asset catalog reads `dagster/row_count` (plotted over time), `dagster/column_schema` (the
Columns view) and `dagster/uri` from these keys only. They are read back from the Parquet footers
of the partition just written (no data scan), so they say what the lake holds, not what the writer
meant to write; each column's meaning comes from the table's lake_columns YAML file, the one
source docs/tables.md is written from too. `@lake_metadata` adds them to each `MaterializeResult`
an asset function returns or yields, so the asset functions keep their own metadata and stay
unaware of the convention.
"""

from __future__ import annotations

import functools
import inspect

import dagster as dg
import pyarrow as pa

from resources.lake import Lake
from torchci_assets.lake_columns import column_description
from torchci_assets.lake_columns.doc import newest_schema

ROW_COUNT = "dagster/row_count"
# The rejects assets are the parts of the shared `rejects` table their ingest writes.
REJECT_PARTS = {"webhook_rejects": ("webhooks",), "test_run_rejects": ("test-reports", "test-runs"),
                "ci_result_rejects": ("ci-results",), "log_rejects": ("logs",)}


def table_metadata(lake: Lake, key: str, day: str) -> dict:
    """The catalog's metadata of asset `key`'s lake partition `day`; empty when it is no lake table."""
    table, parts = ("rejects", REJECT_PARTS[key]) if key in REJECT_PARTS else (key, None)
    files = [f for f in lake.files(table, [day]) if parts is None or _reject_part(f, parts)]
    if not files:
        return {}
    footers = [lake.footer(f) for f in files]
    return {ROW_COUNT: sum(m.num_rows for m in footers),
            "dagster/column_schema": _column_schema(table, footers[0].schema.to_arrow_schema()),
            "dagster/uri": lake.store.display(f"{table}/day={day}")}


def ledger_metadata(lake: Lake, table: str) -> dict:
    """The Columns view of a ledger (an unpartitioned asset its jobs and sensors append to), from a
    file of its newest day: written with one fixed schema, any of its files says its columns."""
    schema = newest_schema(lake, table)
    if schema is None:
        return {}
    return {"dagster/column_schema": _column_schema(table, schema), "dagster/uri": lake.store.display(table)}


def _column_schema(table: str, schema: pa.Schema) -> dg.TableSchema:
    return dg.TableSchema(columns=[
        dg.TableColumn(field.name, str(field.type), description=column_description(table, field.name))
        for field in schema])


def _reject_part(path: str, sources: tuple[str, ...]) -> bool:
    """Whether a `rejects` file is one of the sources' parts: `<source>.parquet`, or an
    increment's `<source>-inc-<n>.parquet`."""
    name = path.rsplit("/", 1)[-1].removesuffix(".parquet")
    return any(name == s or name.startswith(f"{s}-inc-") for s in sources)


def _with_table_metadata(result, context: dg.AssetExecutionContext, lake_resource):
    """`result` with its table's metadata, unless it has them: an asset whose lake keeps its
    listings (`Lake(keep_listings=True)`, the ingest) reads them with it, not with another lake
    that would list its folders again."""
    if not isinstance(result, dg.MaterializeResult) or lake_resource is None:
        return result
    if ROW_COUNT in (result.metadata or {}):
        return result
    key = (dg.AssetKey.from_coercible(result.asset_key) if result.asset_key else context.asset_key).to_user_string()
    extra = table_metadata(lake_resource.lake(), key, context.partition_key)
    if not extra:
        return result
    return dg.MaterializeResult(asset_key=result.asset_key, metadata={**(result.metadata or {}), **extra},
                                check_results=result.check_results, data_version=result.data_version,
                                tags=result.tags)


def lake_metadata(fn):
    """Decorate an asset function (under `@asset`/`@multi_asset`) taking `context` and `lake`."""
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def generating(context, *args, **kwargs):
            for item in fn(context, *args, **kwargs):
                yield _with_table_metadata(item, context, kwargs.get("lake"))
        return generating

    @functools.wraps(fn)
    def returning(context, *args, **kwargs):
        return _with_table_metadata(fn(context, *args, **kwargs), context, kwargs.get("lake"))
    return returning
