"""The provider's operators: ``sync`` (sync, resync, short-circuit) and ``sql`` (the DAG
factory's, needs ``apache-airflow-providers-common-sql``)."""
