"""deploy/ passes real validators: the Compose spec, compose's own loader, a Dockerfile
linter and nginx's configuration test."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from fivetran_events.redis_url import parse_sentinel_url

ROOT = Path(__file__).resolve().parents[3]
DEPLOY = ROOT / "deploy"
BIN = Path(sys.executable).parent


def run(*args: str | Path, cwd: Path = DEPLOY) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(a) for a in args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


class TestCompose:
    def test_matches_the_compose_specification(self) -> None:
        out = run(
            BIN / "check-jsonschema",
            "--builtin-schema",
            "vendor.compose-spec",
            DEPLOY / "compose.yaml",
        )
        assert out.returncode == 0, out.stdout + out.stderr

    def test_docker_compose_loads_it(self, tmp_path: Path) -> None:
        """compose's own loader (no engine needed) accepts the file; a typo is caught."""
        out = run(BIN / "docker-compose", "-f", "compose.yaml", "config", "-q")
        # The PyPI wrapper exits 0 even on errors: what it prints is the verdict.
        assert out.returncode == 0 and out.stderr.strip() == "", out.stderr
        bad = DEPLOY / ".compose-typo-test.yaml"
        bad.write_text((DEPLOY / "compose.yaml").read_text().replace("target: app", "targett: app"))
        try:
            out = run(BIN / "docker-compose", "-f", bad.name, "config", "-q")
        finally:
            bad.unlink()
        assert "targett" in out.stderr

    def test_redis_is_append_only_everysec_and_ports_are_loopback(self) -> None:
        text = (DEPLOY / "compose.yaml").read_text()
        assert '"--appendonly", "yes", "--appendfsync", "everysec"' in text
        ports = [
            line.strip()
            for line in text.splitlines()
            if line.strip().startswith('- "') and ":" in line and line.strip()[3].isdigit()
        ]
        assert ports and all(p.startswith('- "127.0.0.1:') for p in ports)

    def test_replicated_profile(self) -> None:
        """``--profile replicated``: a primary, a replica, three sentinels of one service,
        and an app and workers that reach them through a sentinel URL, waiting for one
        replica; without the profile none of it starts."""
        ha = {"redis-primary", "redis-replica", "web-ha", "worker-ha"}
        ha |= {f"redis-sentinel-{i}" for i in (1, 2, 3)}
        base = ("-f", "compose.yaml")
        plain = run(BIN / "docker-compose", *base, "config", "--services").stdout.split()
        assert plain and not ha & set(plain)
        out = run(
            BIN / "docker-compose", *base, "--profile", "replicated", "config", "--format", "json"
        )
        assert out.stderr.strip() == "", out.stderr
        services = json.loads(out.stdout)["services"]
        assert ha <= set(services)
        for name in ("web-ha", "worker-ha"):
            env = services[name]["environment"]
            url_text = env["FIVETRAN_EVENTS_REDIS_URL"]
            url = parse_sentinel_url(url_text)
            assert env["FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS"] == "1"
            assert sorted(url.sentinels) == [(f"redis-sentinel-{i}", 26379) for i in (1, 2, 3)]
        for i in (1, 2, 3):
            command = " ".join(services[f"redis-sentinel-{i}"]["command"])
            assert f"'sentinel monitor {url.service} redis-primary 6379 2'" in command
            assert "--sentinel" in command
        assert services["redis-replica"]["command"][-3:] == ["--replicaof", "redis-primary", "6379"]


class TestDockerfile:
    def test_lint(self) -> None:
        lint = ROOT / ".venv" / "node" / "node_modules" / ".bin" / "dockerfilelint"
        out = run(lint, DEPLOY / "Dockerfile")
        assert out.returncode == 0 and "Issues: None found" in out.stdout, out.stdout

    def test_our_wheel_is_installed_by_path_and_from_no_index(self) -> None:
        """Every stage installs our wheel by its file and asks no index (--no-index): a
        package named like ours on an index is never installed (dependency confusion)."""
        text = (DEPLOY / "Dockerfile").read_text().replace("\\\n", " ")
        installs = [line for line in text.splitlines() if "pip install" in line]
        assert len(installs) == 2, installs  # the app and the airflow stage
        for line in installs:
            assert "--no-index" in line and "/wheels/fivetran_events-*.whl)[" in line, line
            assert '"fivetran-events[' not in line, line

    def test_runs_as_non_root(self) -> None:
        text = (DEPLOY / "Dockerfile").read_text()
        app_stage = text.split("AS app", 1)[1].split("\nFROM ", 1)[0]
        assert "USER 10001" in app_stage


class TestNginx:
    def test_nginx_accepts_the_proxy_config(self, tmp_path: Path) -> None:
        """nginx -t with the example as a conf.d file and self-signed certificates."""
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
        subprocess.run(
            [
                "openssl",
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=fivetran-events.example.com",
                "-keyout",
                str(key),
                "-out",
                str(cert),
            ],
            check=True,
            capture_output=True,
            timeout=60,
        )
        site = (DEPLOY / "nginx.conf").read_text()
        site = site.replace(
            "/etc/letsencrypt/live/fivetran-events.example.com/fullchain.pem", str(cert)
        )
        site = site.replace(
            "/etc/letsencrypt/live/fivetran-events.example.com/privkey.pem", str(key)
        )
        (tmp_path / "site.conf").write_text(site)
        (tmp_path / "nginx.conf").write_text(
            f"pid {tmp_path}/nginx.pid;\nerror_log {tmp_path}/error.log;\n"
            f"events {{}}\nhttp {{\n  access_log off;\n  include {tmp_path}/site.conf;\n}}\n"
        )
        out = run(nginx, "-t", "-p", tmp_path, "-c", tmp_path / "nginx.conf")
        assert out.returncode == 0, out.stderr
        assert "syntax is ok" in out.stderr

    def test_limits_requests_and_cuts_slow_clients(self) -> None:
        """The proxy in front reads bodies whole, cuts a client stalled for more than a few
        seconds and limits requests and connections per address (test_slow_clients.py
        covers the app server itself)."""
        text = (DEPLOY / "nginx.conf").read_text()
        settings = {
            parts[0]: parts[1:]
            for parts in (
                line.split("#")[0].strip().rstrip(";").split() for line in text.splitlines()
            )
            if parts
        }
        for timeout in ("client_body_timeout", "client_header_timeout", "send_timeout"):
            value = settings[timeout][0]
            assert value.endswith("s") and int(value[:-1]) <= 10, (timeout, value)
        assert settings["limit_req_zone"] and settings["limit_conn_zone"]
        webhook = text.split("location = /webhooks/fivetran {", 1)[1].split("}", 2)[1]
        assert "limit_req zone=" in webhook and "proxy_request_buffering on" in webhook
        assert "limit_conn " in text
