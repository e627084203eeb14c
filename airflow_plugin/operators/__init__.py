"""The provider's operators, one module per concern.

``sync``: ask Fivetran for a sync or a resync and wait for it from the history, or
skip one already done (``FivetranSyncShortCircuitOperator``). ``sql``: the DAG
factory's SQL task (needs ``apache-airflow-providers-common-sql``).
"""
