# The edges that may use the edges' listener (Ansible writes this file): this host's HTTPS front on loopback.
127.0.0.1 1;
::1 1;
