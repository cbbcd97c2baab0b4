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


def _wait(catalog, table, n, timeout, read, count):
    """`read(t)` of the table `default.<table>` once `count` of it is at least `n`; None after
    `timeout` s, with the last count (or error) seen."""
    deadline = time.time() + timeout
    seen = None
    while time.time() < deadline:
        try:
            got = read(catalog.load_table(f"default.{table}"))
            seen = count(got)
            if seen >= n:
                return got, seen
        except Exception as e:  # the table appears with its first commit
            seen = e
        time.sleep(0.25)
    return None, seen


def wait_for_rows(catalog, table, n, timeout=120):
    """The rows of `default.<table>` once it holds at least `n`; raises after `timeout` s."""
    rows, seen = _wait(catalog, table, n, timeout, lambda t: t.scan().to_arrow(), len)
    if rows is None:
        raise AssertionError(f"{table}: {n} rows did not appear in {timeout}s: {seen}")
    return rows


def wait_for_progress(catalog, table, n, timeout=120):
    """`default.<table>` once Inlet's progress in its history covers `n` records; raises
    after `timeout` s."""
    t, seen = _wait(catalog, table, n, timeout, lambda t: t, inlet_progress)
    if t is None:
        raise AssertionError(f"Inlet's progress did not reach {n} records in {timeout}s: {seen}")
    return t
