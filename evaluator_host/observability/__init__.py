"""What the service tells its operator: logs, Prometheus metrics, OpenTelemetry tracing."""
