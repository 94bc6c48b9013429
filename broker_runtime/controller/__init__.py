"""The cluster controller: one broker, elected through ZooKeeper, decides leaders and replica placement for the
whole cluster and tells the other brokers with LeaderAndIsr, UpdateMetadata and StopReplica requests.
See controller.py for the theory of operation."""
