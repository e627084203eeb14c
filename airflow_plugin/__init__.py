"""fivetran-events inside Airflow: sensor, trigger, hook, short-circuit operator, assets.

Operators and sensors are plain importable modules (``airflow_plugin.sensors`` and so
on); the ``AirflowPlugin`` in ``airflow_plugin.plugin`` adds only macros.
"""
