"""The system CA store is looked up per certificate, and only where that keeps the same trust."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from kube_agent_sandbox.controller import truststore


def _defaults(monkeypatch: pytest.MonkeyPatch, capath: Path, cafile: Path | None = None) -> None:
    """Make ``capath`` (and ``cafile``) OpenSSL's compiled-in defaults."""
    real = ssl.get_default_verify_paths()
    bundle = cafile or capath / "cert.pem"
    monkeypatch.setattr(
        truststore.ssl,
        "get_default_verify_paths",
        lambda: real._replace(openssl_capath=str(capath), openssl_cafile=str(bundle)),
    )


def test_hashed_directory_replaces_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "5ad8a5d6.0").write_text("-")
    _defaults(monkeypatch, tmp_path)
    env: dict[str, str] = {}
    assert truststore.defer_system_trust_store(env)
    assert env == {"SSL_CERT_DIR": str(tmp_path), "SSL_CERT_FILE": os.devnull}


def test_variables_naming_the_defaults_through_links_are_not_a_choice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Debian: SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt, OpenSSL's /usr/lib/ssl/cert.pem
    # links to it; SSL_CERT_DIR=/etc/ssl/certs, OpenSSL's /usr/lib/ssl/certs links to it.
    certs = tmp_path / "etc-ssl-certs"
    certs.mkdir()
    (certs / "5ad8a5d6.0").write_text("-")
    (certs / "ca-certificates.crt").write_text("-")
    (tmp_path / "certs").symlink_to(certs)
    (tmp_path / "cert.pem").symlink_to(certs / "ca-certificates.crt")
    _defaults(monkeypatch, tmp_path / "certs", tmp_path / "cert.pem")
    env = {"SSL_CERT_FILE": str(certs / "ca-certificates.crt"), "SSL_CERT_DIR": str(certs)}
    assert truststore.defer_system_trust_store(env)
    assert env == {"SSL_CERT_DIR": str(tmp_path / "certs"), "SSL_CERT_FILE": os.devnull}


@pytest.mark.parametrize("variable", ["SSL_CERT_FILE", "SSL_CERT_DIR"])
def test_operator_setting_wins(
    variable: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "5ad8a5d6.0").write_text("-")
    _defaults(monkeypatch, tmp_path)
    env = {variable: "/etc/custom"}
    assert not truststore.defer_system_trust_store(env)
    assert env == {variable: "/etc/custom"}


def test_directory_without_hash_names_keeps_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "ca-certificates.crt").write_text("-")
    (tmp_path / "README.0").write_text("-")  # .0 but not an 8-digit subject hash
    _defaults(monkeypatch, tmp_path)
    env: dict[str, str] = {}
    assert not truststore.defer_system_trust_store(env)
    assert env == {}


def test_missing_directory_keeps_the_bundle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _defaults(monkeypatch, tmp_path / "absent")
    env: dict[str, str] = {}
    assert not truststore.defer_system_trust_store(env)
    assert env == {}


def test_controller_start_holds_no_parsed_bundle() -> None:
    # In a fresh interpreter: after deferring, a default context (aiohttp builds two when
    # imported) holds no parsed certificate (they are looked up on demand); the bundle would
    # have put every system CA in it.
    script = (
        "import ssl, sys\n"
        "from kube_agent_sandbox.controller.truststore import defer_system_trust_store\n"
        "if not defer_system_trust_store():\n"
        "    sys.exit(3)\n"
        "print(ssl.create_default_context().cert_store_stats()['x509_ca'])\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SSL_CERT_FILE", "SSL_CERT_DIR")}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, check=False
    )
    if done.returncode == 3:
        pytest.skip("this machine has no hashed CA directory")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0"
