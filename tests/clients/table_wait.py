"""What the table topic client scripts share: waiting for a table's rows, and reading how
far Inlet's progress in a table's history goes."""

import json
import time


def inlet_progress(table):
    """Records covered by the newest snapshot of main's history that has Inlet's keys."""
    meta = table.metadata
    snapshot = meta.current_snapshot()
    while snapshot is not None:
        offsets = snapshot.summary.additional_properties.get("inlet.offsets")
        if offsets is not None:
            return sum(json.loads(offsets).values())
        snapshot = meta.snapshot_by_id(snapshot.parent_snapshot_id) if snapshot.parent_snapshot_id else None
    return 0


def wait_for_rows(catalog, table, n, timeout=120):
    """The rows of `default.<table>` once it holds at least `n`; raises after `timeout` s."""
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        try:
            rows = catalog.load_table(f"default.{table}").scan().to_arrow()
            seen = len(rows)
            if seen >= n:
                return rows
        except Exception as e:  # the table appears with its first commit
            seen = e
        time.sleep(0.25)
    raise AssertionError(f"{table}: {n} rows did not appear in {timeout}s: {seen}")


def wait_for_progress(catalog, table, n, timeout=120):
    """`default.<table>` once Inlet's progress in its history covers `n` records; raises
    after `timeout` s."""
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        try:
            t = catalog.load_table(f"default.{table}")
            seen = inlet_progress(t)
            if seen >= n:
                return t
        except Exception as e:  # the table appears with its first commit
            seen = e
        time.sleep(0.25)
    raise AssertionError(f"Inlet's progress did not reach {n} records in {timeout}s: {seen}")
