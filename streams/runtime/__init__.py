"""The Kafka runtime: the Faust app, its agents, topics, client security, health, metrics and logs."""
