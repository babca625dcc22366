"""This host as the tools act on it: systemd units (`systemd`), who holds a port (`ports`), its GPUs (`gpus`), its
cgroup's memory limit (`cgroup`), and the cutover lock and history (`state`)."""
