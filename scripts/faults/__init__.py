"""The project's fault harness (Jepsen's model): brokers on PostgreSQL across network
namespaces, traffic recorded as histories, faults by a nemesis, invariants judged by a
checker. Modules: ``net`` (namespaces, bridge, nft partitions), ``cluster``
(PostgreSQL and broker processes), ``workload`` (the client worker processes and
their histories), ``sampler`` (who holds what, from PostgreSQL and each broker),
``nemesis`` (the faults), ``checker`` (the invariants), ``rounds`` (one round, in
order) and ``run`` (the command line and the table). See docs/several-hosts.md,
"The fault harness"."""
