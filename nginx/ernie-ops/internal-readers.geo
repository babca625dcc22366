# Who sees X-Ernie-Upstream (Ansible writes this file from ernie_nginx_metrics_allow): loopback.
127.0.0.1 1;
::1 1;
