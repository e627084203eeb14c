"""A lone worker (``fivetran-events worker --concurrency 1``) outlives a Redis timeout.

RQ's work loop retries a refused connection but quits on ``redis.TimeoutError``; a pool
restarts a member that quits, a lone worker would stay down. Real redis-server of the
test's own: its clients are cut, then it stops answering (SIGSTOP) with its accept
queue full, so the worker's reconnect times out as across a network that drops packets.
"""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from rq import Worker

from fivetran_events import Settings
from testkit.own_redis import OwnRedis, own_redis
from testkit.processes import poll_until
from testkit.worker_process import WorkerProcess
from webhook_app.forwarding.sweeper import FORWARD_JOB
from webhook_app.worker.queue import forward_queue

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

#: The worker's Redis timeouts (connect and command), short so the test is too.
TIMEOUT_S = 1
#: What the worker logs when RQ's loop quit and it starts it again.
LOOP_ENDED = "its work loop ended; starting it again"
#: Times the connections are cut and Redis stopped before the loop must have ended.
ROUNDS = 5


@contextlib.contextmanager
def unreachable(server: OwnRedis) -> Iterator[None]:
    """Make ``server`` take no new connection for the block: stopped, its queue full.

    A stopped process's kernel still completes handshakes into the listen queue
    (``--tcp-backlog 1``); once that is full, a new connect hangs until its timeout.
    """
    assert server.proc is not None
    fillers: list[socket.socket] = []
    server.proc.send_signal(signal.SIGSTOP)
    try:
        while True:
            s = socket.socket()
            s.settimeout(0.5)
            try:
                s.connect(("127.0.0.1", server.port))
            except (TimeoutError, OSError):
                s.close()
                break
            fillers.append(s)
            assert len(fillers) < 64, "the listen queue never filled"
        yield
    finally:
        for s in fillers:
            s.close()
        server.proc.send_signal(signal.SIGCONT)


def test_a_lone_worker_survives_redis_timing_out(settings: Settings, tmp_path: Path) -> None:
    """The worker's reconnect times out for a while; once Redis answers again the same
    process registers again and runs the next job; SIGTERM still stops it."""
    with own_redis(tmp_path / "redis", "--tcp-backlog", "1") as server:
        own = Settings(
            **{
                **{k: getattr(settings, k) for k in Settings.model_fields},
                "redis_url": server.url,
                "airflow_username": "admin",  # never used: no job here calls Airflow
                "airflow_password": "unused",
            }
        )
        client = server.client()
        with WorkerProcess(
            own,
            tmp_path,
            "lone",
            args=("--concurrency", "1"),
            redis_timeout_seconds=TIMEOUT_S,
        ) as worker:
            poll_until(lambda: Worker.all(connection=client), "the worker to register", 30)
            # Its connections are cut, then Redis stops answering. The work loop may have
            # reconnected between the two (it then waits on a live connection, and only
            # its sweeper thread times out): cut and stop again until the loop ends.
            for _ in range(ROUNDS):
                client.client_kill_filter(_type="normal", skipme=True)
                with unreachable(server):
                    with contextlib.suppress(TimeoutError):
                        poll_until(lambda: LOOP_ENDED in worker.log(), "the loop to end", 10)
                    assert worker.proc.poll() is None, worker.log()
                if LOOP_ENDED in worker.log():
                    break
            else:
                pytest.fail(f"the work loop never met a Redis timeout in {ROUNDS} rounds")
            job = forward_queue(own, client).enqueue(FORWARD_JOB, delivery="c1:s1:nothing")
            poll_until(
                lambda: job.get_status(refresh=True) == "finished",
                "the worker to run a job after Redis came back",
                60,
                details=worker.log,
            )
            result = job.return_value()
            assert isinstance(result, dict) and result["delivery"] == "c1:s1:nothing", result
            assert worker.proc.poll() is None
            assert [w.pid for w in Worker.all(connection=client)] == [worker.pid]
            worker.stop()  # a stop request still ends it, at once and cleanly
            assert worker.proc.returncode == 0, worker.log()
