"""The jobs' SparkSession: ``local[*]`` on a laptop, ``SPARK_MASTER`` on a cluster, the same code either way."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from jobs.source import OdradekDataSource


def spark_session(
    app_name: str, master: str | None = None, conf: dict[str, str] | None = None
) -> SparkSession:
    """A SparkSession with the ``odradek`` data source registered.

    The master is ``master``, else ``SPARK_MASTER``, else ``local[*]``. Python workers run this interpreter
    (``PYSPARK_PYTHON``), which has pyarrow and confluent-kafka, unless the environment names another one
    (on a cluster, an interpreter with the ``jobs`` extra installed). Under ``spark-submit`` its master and
    settings apply; a session already running in this process is reused as it is.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = SparkSession.getActiveSession()
    if spark is None:  # else reuse the running session (a test's, a notebook's) as it is configured
        builder = SparkSession.builder.appName(app_name)
        settings = dict(conf or {})
        if not _submitted():  # spark-submit's --master and --conf win over these defaults
            builder = builder.master(master or os.environ.get("SPARK_MASTER") or "local[*]")
            settings = {**LOCAL_DEFAULTS, **settings}
        for key, value in settings.items():
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    # hours and days in the reports are UTC, whatever the machine's or the submitter's time zone
    spark.conf.set("spark.sql.session.timeZone", "UTC")
    spark.dataSource.register(OdradekDataSource)
    return spark


LOCAL_DEFAULTS = {
    "spark.ui.showConsoleProgress": "false",
    # the reports aggregate small results: a few shuffle partitions beat Spark's 200 on a laptop
    "spark.sql.shuffle.partitions": "8",
}


def _submitted() -> bool:
    """Whether spark-submit started this driver: it starts the JVM first and tells PySpark where it is."""
    return bool(os.environ.get("PYSPARK_GATEWAY_PORT"))
