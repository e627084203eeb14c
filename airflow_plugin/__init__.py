"""fivetran-events inside Airflow, laid out as Airflow's providers are: a module or package
per role (``hooks``, ``operators``, ``sensors``, ``triggers``); ``plugin`` holds connectors'
assets, the macros and the ``AirflowPlugin``; ``provider`` what provider discovery reads.
"""
