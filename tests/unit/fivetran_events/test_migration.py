"""The migration's pure parts: which keys it knows, and v1 rows back into events."""

from __future__ import annotations

import json
import pickle

import pytest

from fivetran_events.migration import KeyKind, Scan, UnreadableV1, V1Rows, classify, v1_events
from fivetran_events.model import EventKind
from testkit.history_v1 import event


class TestClassify:
    @pytest.mark.parametrize(
        ("key", "kind", "connector"),
        [
            ("fte:c:assimilate_seem:ok", KeyKind.V1, "assimilate_seem"),
            ("fte:c:a.b-c_d:seen", KeyKind.V1, "a.b-c_d"),
            ("fte:c:x:guard", KeyKind.V1, "x"),
            ("fte:h:x:anything:else", KeyKind.CURRENT, None),
            ("fte:connectors", KeyKind.SHARED, None),
            ("fte:last_test_event", KeyKind.SHARED, None),
            ("fte:readyz", KeyKind.SHARED, None),
            ("fte:layout", KeyKind.SHARED, None),
            ("fte:fwd:d:x:s:abc", KeyKind.SHARED, None),
            ("fte:migrate:done", KeyKind.SHARED, None),
            ("fte:reconcile", KeyKind.SHARED, None),
            ("fte:reconcile:p:1955123", KeyKind.SHARED, None),
            ("other:c:x:ok", KeyKind.FOREIGN, None),
            ("rq:queue:fivetran-events", KeyKind.FOREIGN, None),
            ("fte:c:x:mystery", KeyKind.UNKNOWN, None),
            ("fte:c:bad/id:ok", KeyKind.UNKNOWN, None),
            ("fte:c:ok", KeyKind.UNKNOWN, None),
            ("fte:connectors2", KeyKind.UNKNOWN, None),
            ("fte:fte:c:x:ok", KeyKind.UNKNOWN, None),
        ],
    )
    def test_kinds(self, key: str, kind: KeyKind, connector: str | None) -> None:
        assert classify("fte:", key) == (kind, connector)

    def test_an_empty_prefix_leaves_rqs_keys_alone(self) -> None:
        """Under an empty prefix every key is ours to judge, except RQ's namespace."""
        assert classify("", "rq:job:123") == (KeyKind.FOREIGN, None)
        assert classify("", "c:x:ok") == (KeyKind.V1, "x")
        assert classify("", "session:42") == (KeyKind.UNKNOWN, None)
        assert classify("r", "rq:job:123") == (KeyKind.FOREIGN, None)

    def test_scan_counts_and_names_ten_unknown(self) -> None:
        scan = Scan()
        for key in ["p:c:a:ok", "p:c:a:fail", "p:c:b:ends", "p:h:a:x", "p:readyz", "q:z"]:
            scan.add("p:", key)
        for i in range(12):
            scan.add("p:", f"p:stray{i}")
        assert scan.v1 == {"a": {"p:c:a:ok", "p:c:a:fail"}, "b": {"p:c:b:ends"}}
        assert (scan.current, scan.shared, scan.unknown_count) == (1, 1, 12)
        assert scan.unknown == [f"p:stray{i}" for i in range(10)]


class TestEventsFromV1Rows:
    def test_rows_become_the_original_events_newest_first_starts_before_ends(self) -> None:
        """Same content, so the same dedup ids as the deliveries 0.1 recorded."""
        start = event("sync_start", "c1", 1_000, "s1")
        end = event("sync_end", "c1", 5_000, "s1", status="FAILURE", reason="r", task_type="tt")
        retry = event("sync_start", "c1", 6_000, "s1")
        ok = event("sync_end", "c1", 9_000, "s1", status="SUCCESSFUL")
        running = event("sync_start", "c1", 10_000, "s2")
        resync = event("resync_table", "c1", 7_000, tables=("public.t",))
        failed = '{"b":1000,"r":"r","s":"s1","st":"FAILURE","t":5000,"tt":"tt"}'
        succeeded = '{"b":6000,"s":"s1","st":"SUCCESSFUL","t":9000}'
        rows = V1Rows(
            ends=[(failed.encode(), 5000.0), (succeeded.encode(), 9000.0)],
            ok=[(succeeded.encode(), 9000.0)],
            fail=[(failed.encode(), 5000.0)],
            starts=[(b"s1", 1000.0), (b"s2", 10_000.0)],
            running=[(b"s2", 10_000.0)],
            resyncs=[(json.dumps({"e": "resync_table", "t": 7000, "tables": ["public.t"]}), 7000)],
        )
        got = v1_events("c1", rows)
        want = [running, retry, ok, resync, start, end]
        assert [e.dedup_id for e in got] == [e.dedup_id for e in want]
        assert [(e.kind, e.created_ms, e.status, e.reason, e.task_type) for e in got] == [
            (e.kind, e.created_ms, e.status, e.reason, e.task_type) for e in want
        ]
        assert got[3].kind is EventKind.RESYNC and got[3].tables == ("public.t",)
        assert rows.completions == 2

    def test_an_end_without_a_start_has_no_start(self) -> None:
        rows = V1Rows(ends=[(b'{"s":"s9","st":"RESCHEDULED","t":42}', 42.0)])
        (only,) = v1_events("c1", rows)
        assert (only.event, only.status, only.created_ms) == ("sync_end", "RESCHEDULED", 42)

    @pytest.mark.parametrize(
        "rows",
        [
            V1Rows(ends=[(b"not json", 1.0)]),
            V1Rows(ok=[(b'{"st":"SUCCESSFUL","t":5}', 5.0)]),
            V1Rows(fail=[(b'{"s":"x","st":"FAILED","t":"later"}', 5.0)]),
            V1Rows(resyncs=[(b'["resync_table"]', 5.0)]),
        ],
    )
    def test_an_unreadable_member_is_refused_by_name(self, rows: V1Rows) -> None:
        """A member that is not 0.1's JSON stops the connector before anything is written."""
        with pytest.raises(UnreadableV1) as caught:
            v1_events("c1", rows)
        member = next(m for m, _ in (*rows.ends, *rows.ok, *rows.fail, *rows.resyncs))
        assert "'c1'" in str(caught.value) and member.decode() in str(caught.value)
        # raised in a --jobs worker, it reaches the parent by pickle, message intact
        assert str(pickle.loads(pickle.dumps(caught.value))) == str(caught.value)
