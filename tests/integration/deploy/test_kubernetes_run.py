"""The manifests' containers run here as processes, with the manifests' own command,
environment and mounted files, and answer what the cluster will ask: the web pods'
probes on the probes' port, a signed delivery on the Ingress's path, the workers'
metrics on their declared port.

Only what cannot be the cluster's is changed: 127.0.0.1 for 0.0.0.0, free ports for the
containers' ports, the suite's Redis for the Secret's URL, temporary folders for the
mounts (secrets laid out as the kubelet lays them: ``..data`` and links), and the
image's files for the repository's (kube.IMAGE_FILES).
"""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from fivetran_events.uris import dataset_uri
from testkit.airflow2_standin import Airflow2StandIn, running_airflow2_standin
from testkit.processes import free_port, poll_until, stop_group
from testkit.support import payload, signed

from .kube import IMAGE_FILES, ROOT, Container, kubelet_secret_folder, localizer, ours, render

pytestmark = pytest.mark.slow

BIN = Path(sys.executable).parent
SECRETS_DIR = "/run/secrets/fivetran-events"
PREFIX = "k8s-run:"
PROMETHEUS_TOKEN = "k8s-prometheus-token-0123456789abcdef"
AIRFLOW_TOKEN = "k8s-managed-airflow-token-0123456789"
#: docs/kubernetes.md's lines for a managed Airflow's token (a test finds them there).
TOKEN_SETTINGS = (
    "FIVETRAN_EVENTS_AIRFLOW_USERNAME=",
    "FIVETRAN_EVENTS_AIRFLOW_TOKEN_FILE=/run/secrets/fivetran-events/airflow_token",
)
#: What an operator puts into the Secrets (docs/kubernetes.md), save the Redis URL.
SECRET_VALUES = {
    "fivetran_events_webhook_secrets": "k8s-webhook-secret-0123456789abcdef",
    # Yours and Prometheus's, one a line (docs/kubernetes.md).
    "fivetran_events_api_tokens": f"k8s-api-token-0123456789abcdef0123\n{PROMETHEUS_TOKEN}",
    "fivetran_events_airflow_password": "k8s-airflow-password-0123456789ab",
}


@dataclass
class Running:
    proc: subprocess.Popen[bytes]
    ports: dict[int, int]
    log: Path

    def url(self, port: int, path: str) -> str:
        return f"http://127.0.0.1:{self.ports[port]}{path}"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]


@contextmanager
def run_container(
    c: Container,
    tmp: Path,
    redis_url: str,
    airflow_url: str | None = None,
    secrets: dict[str, str] = SECRET_VALUES,
    settings: tuple[str, ...] = (),
) -> Iterator[Running]:
    """Start container ``c`` as a process, as its pod would start it; ``airflow_url``
    stands for the cluster's Airflow, ``secrets`` are the keys the Secrets hold (an
    optional key they lack is no file), ``settings`` lines an overlay merges into the
    ConfigMap (``NAME=value``)."""
    tmp = tmp / c.spec["name"]
    objects = render("base")
    ports = {int(p["containerPort"]): free_port() for p in c.spec.get("ports", [])}
    paths: dict[str, Path] = dict(IMAGE_FILES)
    for mount, volume in c.mounts().items():
        folder = tmp / mount.strip("/").replace("/", "_")
        paths[mount] = folder
        if mount == SECRETS_DIR:
            values = {**secrets, "fivetran_events_redis_url": redis_url}
            files = {
                name: values[key]
                for name, (_, key) in c.secret_files(mount).items()
                if key in values
            }
            kubelet_secret_folder(folder, files)
        else:
            assert "emptyDir" in volume, mount
            folder.mkdir(parents=True)

    local = localizer(paths, ports)

    merged = dict(line.split("=", 1) for line in settings)
    env = {k: local(v) for k, v in {**c.env(objects), **merged}.items()}
    assert not [v for v in env.values() if v.startswith("secret:")], "secretKeyRef: none here"
    if airflow_url:
        env["FIVETRAN_EVENTS_AIRFLOW_URL"] = airflow_url
    env.update(
        PATH=f"{BIN}:/usr/bin:/bin",
        HOME=str(tmp),
        # This test's keys on the suite's Redis (the manifests keep the default prefix).
        FIVETRAN_EVENTS_KEY_PREFIX=PREFIX,
    )
    argv = [local(a) for a in c.argv()]
    argv[0] = str(BIN / argv[0])
    log = tmp / f"{c.spec['name']}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp
        )
    try:
        yield Running(proc, ports, log)
    finally:
        stop_group(proc)


def answers(running: Running, port: int, path: str) -> requests.Response | None:
    """The answer to GET ``path``; None while nothing listens or it answers 503 (not
    ready yet); raises if the process exited."""
    if running.proc.poll() is not None:
        raise RuntimeError(f"exited with {running.proc.returncode}:\n{running.tail()}")
    try:
        resp = requests.get(running.url(port, path), timeout=2)
    except requests.RequestException:
        return None
    return None if resp.status_code == 503 else resp


CONNECTOR = "k8s_first_delivery"


def container(name: str) -> Container:
    [c] = [c for c in ours("base") if c.name == name]
    return c


def test_web_answers_its_probes_and_a_signed_delivery(redis_url: str, tmp_path: Path) -> None:
    web = container("fivetran-events-web/web")
    with run_container(web, tmp_path, redis_url) as running:
        for probe in ("readinessProbe", "livenessProbe"):
            get = web.spec[probe]["httpGet"]
            port, path = web.port(get["port"]), str(get["path"])
            resp = poll_until(
                lambda: answers(running, port, path),  # noqa: B023 (called in this turn)
                f"{probe} {path}",
                timeout=60,
                details=running.tail,
            )
            assert resp.status_code == 200, (probe, resp.text)
        assert deliver(running, web).status_code == 200
        # Prometheus's scrape, with the token of its Secret: the connector's series too.
        scrape = running.url(web.port("http"), "/metrics")
        bearer = {"Authorization": f"Bearer {PROMETHEUS_TOKEN}"}
        assert CONNECTOR in requests.get(scrape, headers=bearer, timeout=5).text
        assert CONNECTOR not in requests.get(scrape, timeout=5).text


def deliver(running: Running, web: Container) -> requests.Response:
    """A sync's end, signed with the mounted Secret's webhook secret, on the Ingress's path."""
    body = payload("sync_end", connector_id=CONNECTOR)
    raw, headers = signed(body, SECRET_VALUES["fivetran_events_webhook_secrets"])
    url = running.url(web.port("http"), "/webhooks/fivetran")
    return requests.post(url, data=raw, headers=headers, timeout=5)


def test_worker_serves_metrics_on_its_declared_port(redis_url: str, tmp_path: Path) -> None:
    worker = container("fivetran-events-worker/worker")
    port = worker.port("metrics")
    with run_container(worker, tmp_path, redis_url) as running:
        probe = worker.spec["livenessProbe"]["tcpSocket"]
        assert worker.port(probe["port"]) == port

        def connects() -> bool:
            answers(running, port, "/")  # raises if the worker exited
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", running.ports[port])) == 0

        poll_until(connects, "the worker's metrics port", timeout=60, details=running.tail)
        resp = poll_until(
            lambda: answers(running, port, "/metrics"), "/metrics", timeout=30, details=running.tail
        )
        assert resp.status_code == 200
        assert "fivetran_events_" in resp.text, resp.text[:2000]


def delivered_to_airflow(
    serving: Running, working: Running, airflow: Airflow2StandIn, uri: str
) -> None:
    """Once the web pod is ready, a signed delivery becomes the asset event in Airflow."""
    web = container("fivetran-events-web/web")
    worker = container("fivetran-events-worker/worker")
    poll_until(
        lambda: answers(serving, web.port("http"), "/readyz"),
        "the web pod ready",
        timeout=60,
        details=serving.tail,
    )
    assert deliver(serving, web).status_code == 200

    def posted() -> list[dict[str, object]]:
        answers(working, worker.port("metrics"), "/")  # raises if it exited
        return [e for e in airflow.events if e.get("uri") == uri]

    poll_until(posted, "the asset event in Airflow", timeout=60, details=working.tail)


def test_a_signed_delivery_reaches_airflow(redis_url: str, tmp_path: Path) -> None:
    """Web and worker as the manifests run them: the worker logs in to Airflow as the
    ConfigMap's user with the mounted Secret's password and posts the connector's asset
    event for the delivery the web pod recorded."""
    web = container("fivetran-events-web/web")
    worker = container("fivetran-events-worker/worker")
    env = worker.env(render("base"))
    with running_airflow2_standin("3.3.2") as airflow:
        airflow.username = env["FIVETRAN_EVENTS_AIRFLOW_USERNAME"]
        airflow.password = SECRET_VALUES["fivetran_events_airflow_password"]
        uri = dataset_uri(CONNECTOR)
        airflow.add_dataset(uri, dags=("k8s_dag",))
        with (
            run_container(web, tmp_path, redis_url) as serving,
            run_container(worker, tmp_path, redis_url, airflow.url) as working,
        ):
            delivered_to_airflow(serving, working, airflow, uri)


def test_a_managed_airflows_token_file_logs_the_worker_in(redis_url: str, tmp_path: Path) -> None:
    """docs/kubernetes.md's managed Airflow: the token as the worker Secret's
    airflow_token, FIVETRAN_EVENTS_AIRFLOW_TOKEN_FILE pointing at it, no username; the
    worker sends it as a bearer and posts the asset event."""
    docs = (ROOT / "docs" / "kubernetes.md").read_text()
    assert all(line in docs for line in TOKEN_SETTINGS)
    web = container("fivetran-events-web/web")
    worker = container("fivetran-events-worker/worker")
    secrets = {k: v for k, v in SECRET_VALUES.items() if k != "fivetran_events_airflow_password"}
    with running_airflow2_standin("3.3.2") as airflow:
        airflow.token = AIRFLOW_TOKEN
        uri = dataset_uri(CONNECTOR)
        airflow.add_dataset(uri, dags=("k8s_dag",))
        with (
            run_container(web, tmp_path, redis_url) as serving,
            run_container(
                worker,
                tmp_path,
                redis_url,
                airflow.url,
                secrets={**secrets, "airflow_token": AIRFLOW_TOKEN},
                settings=TOKEN_SETTINGS,
            ) as working,
        ):
            delivered_to_airflow(serving, working, airflow, uri)
