"""This host as the tools act on it: systemd units (`systemd`), who holds a port (`ports`), what
provisioning changed and what to do about it (`apply`), and the cutover lock and history (`state`)."""
