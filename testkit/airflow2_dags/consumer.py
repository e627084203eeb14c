"""An Airflow 2 DAG scheduled on a Fivetran connector's dataset (testkit/airflow2_harness.py)."""

from __future__ import annotations

from datetime import datetime

from airflow import DAG
from airflow.datasets import Dataset
from airflow.operators.empty import EmptyOperator

with DAG(
    dag_id="consume_af2_conn",
    schedule=[Dataset("fivetran://connector/af2_conn")],
    start_date=datetime(2026, 1, 1),
    catchup=False,
):
    EmptyOperator(task_id="noop")
