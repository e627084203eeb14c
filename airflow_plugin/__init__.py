"""fivetran-events inside Airflow, laid out as Airflow's providers are.

``hooks``, ``operators``, ``sensors`` and ``triggers`` hold the classes by role (e.g.
``airflow_plugin.sensors.FivetranDateTimeSensor``, ``airflow_plugin.operators.sync``'s
``FivetranSyncOperator``); ``assets`` the connectors' assets; ``provider`` what Airflow's
provider discovery reads; the ``AirflowPlugin`` in ``airflow_plugin.plugin`` adds
macros and the UI view only.
"""
