"""astronomer's ``dev/dags/example_fivetran_resync`` DAG, its import line pointing at us:
a resync of the whole connector and one of a scope."""

from datetime import datetime, timedelta

from airflow.sdk import DAG

from airflow_plugin.astronomer import FivetranResyncOperator

default_args = {
    "owner": "Airflow",
    "start_date": datetime(2021, 4, 6),
}

dag = DAG(
    dag_id="example_fivetran_resync",
    default_args=default_args,
    schedule=timedelta(days=1),
    catchup=False,
)

with dag:
    fivetran_resync_all = FivetranResyncOperator(
        task_id="fivetran_resync_all",
        fivetran_conn_id="fivetran_default",
        connector_id="{{ var.value.connector_id }}",
    )

    fivetran_resync_scoped = FivetranResyncOperator(
        task_id="fivetran_resync_scoped",
        fivetran_conn_id="fivetran_default",
        connector_id="{{ var.value.connector_id }}",
        scope={"ci_airflow_provider_fivetran_async": ["ci_airflow_provider_fivetran_async"]},
    )
