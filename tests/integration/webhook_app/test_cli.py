"""The fivetran-events CLI: history, decide; one clear line on every error."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from flask.testing import FlaskClient

from testkit.calendars import SCENARIO_A
from testkit.support import payload, signed


def run(args: list[str], redis_url: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {
        **os.environ,
        "FIVETRAN_EVENTS_REDIS_URL": redis_url,
        "FIVETRAN_EVENTS_KEY_PREFIX": "test:",
        **env,
    }
    return subprocess.run(
        [sys.executable, "-m", "webhook_app", *args],
        env=environ,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def scenario_a(http: FlaskClient) -> None:
    for sync_id, ended, status in SCENARIO_A:
        for body in (
            payload("sync_start", sync_id=sync_id, created=ended.replace(hour=5)),
            payload(sync_id=sync_id, created=ended, status=status, reason="quota"),
        ):
            raw, headers = signed(body)
            assert http.post("/webhooks/fivetran", data=raw, headers=headers).status_code == 200


@pytest.mark.usefixtures("scenario_a")
class TestCommands:
    def test_history_table_and_json(self, redis_url: str) -> None:
        out = run(["history", "assimilate_seem"], redis_url)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[0].startswith("SYNC ID") and "a-fail" in lines[1] and "a-ok" in lines[2]
        data = json.loads(
            run(["history", "assimilate_seem", "--json", "--limit", "1"], redis_url).stdout
        )
        assert [s["sync_id"] for s in data["syncs"]] == ["a-fail"]

    @pytest.mark.parametrize(
        ("target", "flags", "code", "word"),
        [
            ("2026-01-05", [], 0, "SUCCESS"),
            ("2026-01-11T00:00:00Z", [], 1, "FAIL"),
            ("2026-01-14", [], 1, "FAIL"),
            ("2026-01-14", ["--no-propagate-failures-forward"], 3, "WAIT"),
        ],
    )
    def test_decide_exit_codes(
        self, redis_url: str, target: str, flags: list[str], code: int, word: str
    ) -> None:
        """decide exits 0 on success, 1 on fail, 3 on wait (scriptable)."""
        out = run(["decide", "assimilate_seem", "--target", target, *flags], redis_url)
        assert out.returncode == code and out.stdout.startswith(word + ":"), out

    def test_decide_json(self, redis_url: str) -> None:
        out = run(["decide", "assimilate_seem", "--target", "2026-01-11", "--json"], redis_url)
        body = json.loads(out.stdout)
        assert body["decision"] == "fail" and body["sync"]["sync_id"] == "a-fail"


class TestErrors:
    @pytest.mark.parametrize(
        ("args", "env", "needle"),
        [
            (["decide", "assimilate_seem", "--target", "soon"], {}, "--target"),
            (
                ["decide", "assimilate_seem", "--target", "2026-01-01", "--criterion", "x"],
                {},
                "--criterion",
            ),
            (["history", "nobody"], {}, "no events recorded for connector 'nobody'"),
            (["history", "bad/id"], {}, "CONNECTOR_ID"),
            (
                ["history", "x"],
                {"FIVETRAN_EVENTS_REDIS_URL": "redis://127.0.0.1:1/0"},
                "cannot reach Redis",
            ),
            (
                ["history", "x"],
                {"FIVETRAN_EVENTS_REDIS_URL": "http://nope"},
                "FIVETRAN_EVENTS_REDIS_URL",
            ),
            (["serve"], {"FIVETRAN_EVENTS_WEBHOOK_SECRETS": ""}, "FIVETRAN_EVENTS_WEBHOOK_SECRETS"),
        ],
    )
    def test_one_line_no_traceback(
        self, redis_url: str, args: list[str], env: dict[str, str], needle: str
    ) -> None:
        out = run(args, redis_url, **env)
        assert out.returncode != 0
        assert "Traceback" not in out.stderr
        assert needle in out.stderr, out.stderr

    def test_a_refused_serve_leaves_no_metrics_files(self, redis_url: str, tmp_path: Path) -> None:
        """Without PROMETHEUS_MULTIPROC_DIR, serve makes one for gunicorn's workers only
        once the configuration is accepted: a refused start leaves nothing behind."""
        environ = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
        environ.update(
            FIVETRAN_EVENTS_REDIS_URL=redis_url,
            FIVETRAN_EVENTS_WEBHOOK_SECRETS="",
            TMPDIR=str(tmp_path / "tmp"),
        )
        (tmp_path / "tmp").mkdir()
        (tmp_path / "cwd").mkdir()
        out = subprocess.run(
            [sys.executable, "-m", "webhook_app", "serve"],
            env=environ,
            cwd=tmp_path / "cwd",
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode != 0 and "FIVETRAN_EVENTS_WEBHOOK_SECRETS" in out.stderr
        assert sorted(p.name for p in tmp_path.rglob("*")) == ["cwd", "tmp"]
