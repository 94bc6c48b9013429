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
    (on a cluster, an interpreter with the ``jobs`` extra installed). Under ``spark-submit`` the session the
    submitter configured is reused.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    if "spark.master" not in _submitted_conf():
        builder = builder.master(master or os.environ.get("SPARK_MASTER") or "local[*]")
    defaults = {
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        # the reports aggregate small results: a few shuffle partitions beat Spark's 200 on a laptop
        "spark.sql.shuffle.partitions": os.environ.get("ODRADEK_SHUFFLE_PARTITIONS", "8"),
    }
    for key, value in {**defaults, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.dataSource.register(OdradekDataSource)
    return spark


def _submitted_conf() -> dict[str, str]:
    """Settings spark-submit passed to this driver (it exports them as system properties to the JVM it
    starts; PySpark sees them only after the gateway is up, so check the environment spark-submit sets)."""
    if os.environ.get("SPARK_ENV_LOADED") or os.environ.get("PYSPARK_GATEWAY_PORT"):
        return {"spark.master": "submitted"}
    return {}
