"""Event logs: recording live traffic and replaying it, live through Kafka or offline in process."""
