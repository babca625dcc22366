"""Where requests go: nginx's upstream include and its validated reload (`gateway`), the edge's draining
reload (`edge_reload`), the access log (`accesslog`), the host operations a cutover needs (`hostops`),
the cutover runbook (`cutover`) and what it reports (`runbook`: steps, result, outcomes, and the verbs
the canary drives it by), and the canary that watches a new instance take traffic (`canary/`)."""
