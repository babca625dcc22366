# Who sees X-Ernie-Gateway (Ansible writes this file from ernie_edge_internal_readers): loopback.
127.0.0.1 1;
::1 1;
