"""What the operators, the UI and the admin DAG share beyond hooks: the one-call task
group and its retry policy, lineage, metrics, the Spark application guard, admin actions."""
