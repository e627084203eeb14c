"""The compact completion member of layout v2 (history/codec.py)."""

from __future__ import annotations

import base64
import random
import uuid

import pytest

from fivetran_events.history.codec import (
    b36,
    completion_parts,
    decode_completion,
    encode_completion,
    sync_id_of,
    sync_token,
)
from fivetran_events.timeutil import to_ms
from testkit.support import at, ev


class TestSyncToken:
    @pytest.mark.parametrize(
        "sync_id",
        [
            "b4703f73-6315-4e22-8d7a-3bfb18b2fed2",
            "s1",
            "B4703F73-6315-4E22-8D7A-3BFB18B2FED2",  # not canonical: kept as it came
            "b4703f7363154e228d7a3bfb18b2fed2",
            "a.b-c_d",
        ],
    )
    def test_round_trips(self, sync_id: str) -> None:
        """Every valid sync id comes back exactly as Fivetran sent it."""
        assert sync_id_of(sync_token(sync_id)) == sync_id

    def test_uuid_takes_22_characters(self) -> None:
        """A canonical UUID is stored as its 16 bytes in base64url, not 36 characters."""
        assert len(sync_token(str(uuid.uuid4()))) == 22

    def test_tokens_are_those_of_layout_v2(self) -> None:
        """The same token as layout v2 defined it (through ``uuid.UUID``), for random ids
        and near-misses of the canonical form: a stored member must find its sync."""

        def by_uuid(sync_id: str) -> str:
            try:
                parsed = uuid.UUID(sync_id)
            except ValueError:
                return "." + sync_id
            if str(parsed) != sync_id:
                return "." + sync_id
            return base64.urlsafe_b64encode(parsed.bytes).rstrip(b"=").decode()

        rng = random.Random(7)
        ids = [str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(500)]
        near = [
            "{" + ids[0] + "}",
            "urn:uuid:" + ids[1],
            ids[2].upper(),
            ids[3].replace("-", ""),
            ids[4] + "\n",
            ids[5][:-1] + "g",
            ids[6][:-1],
            ids[7] + "0",
            "00000000-0000-0000-0000-000000000000",
        ]
        for sync_id in ids + near:
            assert sync_token(sync_id) == by_uuid(sync_id), sync_id


class TestMember:
    def test_success_fits_a_32_byte_allocation(self) -> None:
        """UUID id and a 16-hour sync: at most 28 bytes (Redis adds a 3-byte header and NUL)."""
        e = ev(sync_id=str(uuid.uuid4()), created=at(3, 17))
        member = encode_completion(e, started_ms=to_ms(at(3, 1)))
        assert len(member.encode()) <= 28

    def test_decodes_by_end_and_by_start(self) -> None:
        """The same member reads the same from the end-scored and the start-scored set."""
        e = ev(sync_id=str(uuid.uuid4()), created=at(3, 2))
        member = encode_completion(e, started_ms=to_ms(at(3, 1)))
        by_end = decode_completion(member, to_ms(at(3, 2)))
        by_start = decode_completion(member.encode(), to_ms(at(3, 1)), by_start=True)
        assert by_end == by_start
        assert (by_end.sync_id, by_end.started_ms, by_end.ended_ms) == (
            e.sync_id,
            to_ms(at(3, 1)),
            to_ms(at(3, 2)),
        )
        assert by_end.succeeded and by_end.status == "SUCCESSFUL"

    def test_failure_keeps_status_reason_and_task(self) -> None:
        """A failure's member carries what the listing shows; an unknown start stays unknown."""
        e = ev(sync_id="s9", created=at(4), status="FAILURE_WITH_TASK", reason="r, x", taskType="t")
        c = decode_completion(encode_completion(e), to_ms(at(4)))
        assert (c.status, c.reason, c.task_type, c.started_ms) == (
            "FAILURE_WITH_TASK",
            "r, x",
            "t",
            None,
        )
        assert c.failed

    def test_parts_are_what_the_script_joins(self) -> None:
        """prefix + base-36 delta + suffix is encode_completion's member."""
        e = ev(sync_id="s2", created=at(5), status="RESCHEDULED")
        prefix, suffix = completion_parts("s2", "RESCHEDULED", None, None)
        assert prefix + b36(3_600_000) + suffix == encode_completion(
            e, started_ms=to_ms(at(5)) - 3_600_000
        )

    def test_needs_its_score(self) -> None:
        """Without a score a member has no end: refused, not guessed."""
        with pytest.raises(ValueError):
            decode_completion(encode_completion(ev(sync_id="s1", created=at(3))))

    def test_negative_duration_is_refused(self) -> None:
        with pytest.raises(ValueError):
            b36(-1)
