from airflow_plugin.dag_factory import dags_from_folder

dags_from_folder("../sql/sales")
