"""The watched part of a cutover: canary steps and the bake (`rollout`), its record on disk so a killed
cutover can be resumed or aborted (`rollout_file`), the SLO gate (`slo`), what the gate measures each
interval (`watch`), counters between two scrapes (`window`), and the gate's own requests on a quiet
service (`synthetic`)."""
