"""What operators are told: each request's report and headers (``report``), the metrics
(``metrics``), and the one place that emits them from a request's result (``telemetry``)."""
