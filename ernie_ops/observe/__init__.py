"""What an operator reads: vLLM's metrics parsed (`metrics`), `ernie-ops status` (`status` data,
`status_view` rendering), `ernie-ops top` (`top`, `top_view`), merged logs (`logview`), the monitoring
files (`monitoring`), cutover marks for Prometheus (`marks`), and the load generator (`bench`)."""
