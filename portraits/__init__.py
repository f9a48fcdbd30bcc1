"""Hourly resource portraits and Trimaran sliding windows: pure numpy, no Kafka (arrives with issue 4)."""
