"""`gateway.ca_file`: the CLI, the chat app, the bench and the probes verify an https gateway's certificate as any
client does, against the configured CA or the system's; a CA file that is missing or not PEM is a sentence."""

from __future__ import annotations

import ssl
import subprocess

import pytest

from ernie_ops import config
from ernie_ops.client.gateway import GatewayClient
from ernie_ops.errors import UsageError
from ernie_ops.operate import apply


def make_ca(tmp_path):
    cert = tmp_path / "ca.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "1",
         "-subj", "/CN=test CA", "-keyout", str(tmp_path / "ca.key"), "-out", str(cert)],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert


def test_without_a_ca_file_the_system_trust_store_verifies():
    assert config.GatewayConfig(url="https://gw.example").tls_verify() is True


def test_a_ca_file_is_what_the_certificate_is_verified_against(tmp_path):
    ca = make_ca(tmp_path)
    ctx = config.GatewayConfig(url="https://gw.example", ca_file=str(ca)).tls_verify()
    assert isinstance(ctx, ssl.SSLContext) and ctx.verify_mode == ssl.CERT_REQUIRED and ctx.check_hostname
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "test CA"),),)]


@pytest.mark.parametrize("content", [None, "not a certificate\n"])
def test_a_missing_or_unreadable_ca_file_is_a_sentence(tmp_path, content):
    ca = tmp_path / "ca.pem"
    if content is not None:
        ca.write_text(content)
    with pytest.raises(UsageError, match=rf"^gateway.ca_file {ca}: .+; it must be the PEM file of the CA that signed"):
        config.GatewayConfig(url="https://gw.example", ca_file=str(ca)).tls_verify()


def test_a_relative_ca_file_is_refused_by_the_config(tmp_path):
    path = tmp_path / "ernie.yaml"
    path.write_text("instances: [{port: 8000}]\ngateway:\n  url: https://gw.example\n  ca_file: tls/ca.pem\n")
    with pytest.raises(config.ConfigError, match=r"ernie.yaml:4: gateway.ca_file = 'tls/ca.pem': .*must be the absolute path of the CA"):
        config.load(str(path))


def test_the_chat_app_verifies_with_the_configured_ca(tmp_path):
    ca = make_ca(tmp_path)
    cfg = config.Config(instances=[{"port": 8000}], gateway={"url": "https://gw.example", "ca_file": str(ca)})
    client = GatewayClient.from_config(cfg, {})
    ctx = client.http._transport._pool._ssl_context
    assert [c["subject"] for c in ctx.get_ca_certs()] == [((("commonName", "test CA"),),)]


def test_a_new_ca_file_restarts_the_chat_app_and_no_ca_file_keeps_old_digests(tmp_path):
    base = {"instances": [{"port": 8000}], "gateway": {"url": "https://gw.example"}}
    plain = config.Config(**base)
    with_ca = config.Config(**{**base, "gateway": {"url": "https://gw.example", "ca_file": "/etc/ernie-ops/tls/gateway.crt"}})
    assert apply.config_digest(plain, "chat") != apply.config_digest(with_ca, "chat")
    assert "gateway_ca_file" not in apply.READS["chat"](plain.model_dump(mode="json"))  # digests of before stay valid
    assert apply.config_digest(plain, "engine") == apply.config_digest(with_ca, "engine")
