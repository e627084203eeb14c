"""astronomer's ``dev/dags/example_fivetran_xcom`` DAG, its import lines pointing at us:
the operator's XCom (a time) is the sensor's ``completed_after_time``. The delay task
sleeps 5 seconds (astronomer's: 60), shorter than the stand-in's sync."""

import time
from datetime import datetime, timedelta

from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG

from airflow_plugin.astronomer import FivetranOperator, FivetranSensor

default_args = {
    "owner": "Airflow",
    "start_date": datetime(2021, 4, 6),
    "provide_context": True,
}

dag = DAG(
    dag_id="example_fivetran_xcom",
    default_args=default_args,
    schedule=timedelta(days=1),
    catchup=False,
)

with dag:
    fivetran_operator = FivetranOperator(
        task_id="fivetran-operator",
        fivetran_conn_id="fivetran_default",
        connector_id="{{ var.value.connector_id }}",
        wait_for_completion=False,
    )

    delay_task = PythonOperator(task_id="delay_python_task", python_callable=lambda: time.sleep(5))

    fivetran_sensor = FivetranSensor(
        task_id="fivetran-sensor",
        fivetran_conn_id="fivetran_default",
        connector_id="{{ var.value.connector_id }}",
        poke_interval=5,
        completed_after_time="{{ task_instance.xcom_pull('fivetran-operator', key='return_value') }}",  # noqa: E501
    )

    fivetran_operator >> delay_task >> fivetran_sensor
