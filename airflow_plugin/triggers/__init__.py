"""The provider's triggers: ``decision`` (the sensor's), ``sync`` (a sync request's) and
``watcher`` (an ``AssetWatcher``'s, Airflow 3.3+, so nothing is imported here);
``_wakeups`` is their one pub/sub listener and pool per triggerer."""
