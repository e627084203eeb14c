"""The session's Airflow harnesses themselves: a component that died is started again before
the next test, so one test's crash does not fail every later test on that Airflow; and each
Airflow, 3 and 2 and the in-process one, keeps its metadata in PostgreSQL, as production does."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from testkit.airflow2_harness import Airflow2Server
from testkit.airflow_harness import AirflowServer


def test_a_dead_scheduler_is_started_again(airflow3: AirflowServer) -> None:
    """SIGKILL the scheduler's process group (a crash, not a stop); revive() starts it
    again and Airflow reports it healthy."""
    proc = airflow3.procs["scheduler"]
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=20)
    with pytest.warns(UserWarning, match="scheduler had exited"):
        assert airflow3.revive() == ["scheduler"]
    assert airflow3.procs["scheduler"].poll() is None
    assert airflow3.revive() == []


def test_airflow_keeps_its_metadata_in_postgresql(airflow3: AirflowServer) -> None:
    """Both of Airflow's engines use psycopg 3 on the harness's own PostgreSQL, and Airflow
    wrote its DAGs there (the dag-processor; the tests' queries read the same)."""
    env = airflow3.env()
    assert airflow3.postgres is not None
    url = f"postgresql+psycopg://postgres@127.0.0.1:{airflow3.postgres.port}/postgres"
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == url
    assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN_ASYNC"] == url
    ((version,),) = airflow3.query("select version()")
    assert str(version).startswith("PostgreSQL")
    airflow3.wait_for_parsed("consume_e2e_conn")


def test_airflow_2_keeps_its_metadata_in_postgresql(airflow2: Airflow2Server) -> None:
    """Airflow 2.11 reaches its own PostgreSQL through psycopg2 (SQLAlchemy 1.4), and its
    ``dags reserialize`` wrote the test DAGs there."""
    assert airflow2.postgres is not None
    url = f"postgresql+psycopg2://postgres@127.0.0.1:{airflow2.postgres.port}/postgres"
    assert airflow2.env()["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"] == url
    ((dags,),) = airflow2.postgres.rows("select count(*) from serialized_dag")
    assert dags > 0


def test_the_in_process_airflow_keeps_its_metadata_in_postgresql(airflow_db: Path) -> None:
    """dag.test()'s Airflow (testkit/airflow_env.py) is migrated into a PostgreSQL of the
    test process's own, through psycopg 3."""
    from airflow import settings

    assert settings.engine is not None
    assert settings.engine.url.drivername == "postgresql+psycopg"
    with settings.engine.connect() as conn:
        assert conn.exec_driver_sql("select version_num from alembic_version").scalar()
