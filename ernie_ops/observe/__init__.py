"""What an operator reads: `ernie-ops status` (`status` data, `status_view` rendering), `ernie-ops top` (`top`,
`top_view`), merged logs (`logview`), the monitoring files (`monitoring`), and the load generator (`bench`)."""
