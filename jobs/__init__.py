"""PySpark report jobs over any Kafka-compatible cluster, read through the `odradek` Spark data source.

Nothing here imports the broker: the jobs reach a cluster only over the Kafka protocol (confluent-kafka, and
kio for DescribeLogDirs), so they work against Odradek and any other Kafka-compatible cluster alike.
"""
