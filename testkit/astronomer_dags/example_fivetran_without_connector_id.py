"""astronomer's ``dev/dags/example_fivetran_without_connector_id`` DAG, its import line
pointing at us: the connector is found by its name and its destination's."""

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_plugin.astronomer import FivetranOperator

default_args = {
    "owner": "Airflow",
    "start_date": datetime(2021, 4, 6),
}

with DAG(
    "example_fivetran_without_conn_id",
    default_args=default_args,
    schedule=timedelta(days=1),
    catchup=False,
) as dag:
    fivetran_sync_start = FivetranOperator(
        task_id="fivetran_task",
        fivetran_conn_id="fivetran_default",
        connector_name="{{ var.value.connector_name }}",
        destination_name="{{ var.value.destination_name }}",
    )
