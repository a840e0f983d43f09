"""Target parsing: headers and Host names, with hostile values refused."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.gateway.dataplane.target import (
    Target,
    TargetError,
    from_host,
    host_name,
    names_a_sandbox,
    resolve,
)

SID = "abcdefghij0123456789"


def h(**pairs: str) -> list[tuple[bytes, bytes]]:
    return [(k.replace("_", "-").encode(), v.encode()) for k, v in pairs.items()]


def test_headers_name_the_target() -> None:
    headers = h(e2b_sandbox_id=SID, e2b_sandbox_port="49983", host="gw.example")
    assert resolve(headers, domain=None) == Target(SID, 49983)


def test_header_names_are_case_insensitive() -> None:
    headers = [(b"E2b-Sandbox-Id", SID.encode()), (b"E2B-SANDBOX-PORT", b"49999")]
    assert resolve(headers, domain=None) == Target(SID, 49999)


def test_a_host_under_the_domain_wins_over_headers() -> None:
    """As E2B's proxy: the name the client connected to decides, not a header it added."""
    headers = h(e2b_sandbox_id=SID, e2b_sandbox_port="8080", host="49983-other.sbx.example.test")
    assert resolve(headers, domain="sbx.example.test") == Target("other", 49983)


@pytest.mark.parametrize(
    "host",
    [
        "gateway.example:8080",  # the Service name (E2B_SANDBOX_URL)
        "127.0.0.1:8080",
        "[::1]:8080",  # malformed as a host name: the headers decide
        "api.sbx.example.test",  # the control plane's name under the domain
        "my-gateway.sbx.example.test",  # a dash, but no <port>- label
        "sbx.example.test",  # E2B's sandbox.<domain> form
        "49983-other.elsewhere.test",  # another domain
    ],
)
def test_headers_decide_for_any_other_host(host: str) -> None:
    headers = h(e2b_sandbox_id=SID, e2b_sandbox_port="8080", host=host)
    assert resolve(headers, domain="sbx.example.test") == Target(SID, 8080)


def test_without_a_domain_headers_win_over_host() -> None:
    headers = h(e2b_sandbox_id=SID, e2b_sandbox_port="8080", host="49983-other.sbx.example.test")
    assert resolve(headers, domain=None) == Target(SID, 8080)


@pytest.mark.parametrize(
    "host",
    [
        f"0-{SID}.sbx.example.test",
        f"70000-{SID}.sbx.example.test",
        f"049983-{SID}.sbx.example.test",
        "49983-a-b.sbx.example.test",
        "49983-.sbx.example.test",
    ],
)
def test_a_malformed_sandbox_host_under_the_domain_is_refused_even_with_headers(
    host: str,
) -> None:
    headers = h(e2b_sandbox_id=SID, e2b_sandbox_port="49983", host=host)
    with pytest.raises(TargetError, match="invalid sandbox"):
        resolve(headers, domain="sbx.example.test")


def test_names_a_sandbox() -> None:
    assert names_a_sandbox(f"49983-{SID}.sbx.example.test", "sbx.example.test")
    assert names_a_sandbox("1-x.sbx.example.test", "SBX.example.test.")
    assert not names_a_sandbox(f"49983-{SID}.sbx.example.test", "example.test")
    assert not names_a_sandbox("api.sbx.example.test", "sbx.example.test")
    assert not names_a_sandbox("a1-x.sbx.example.test", "sbx.example.test")
    assert not names_a_sandbox("sbx.example.test", "sbx.example.test")


@pytest.mark.parametrize(
    "host",
    [
        f"49983-{SID}.sbx.example.test",
        f"49983-{SID}.SBX.Example.Test:443",
        f"49983-{SID}.sbx.example.test.",
    ],
)
def test_host_names_the_target(host: str) -> None:
    assert resolve(h(host=host), domain="sbx.example.test") == Target(SID, 49983)


def test_host_of_another_domain_is_no_target() -> None:
    assert from_host(f"49983-{SID}.evil.test", "sbx.example.test") is None
    with pytest.raises(TargetError, match="no sandbox named"):
        resolve(h(host=f"49983-{SID}.evil.test"), domain="sbx.example.test")


def test_without_domain_any_host_with_the_label_form_works() -> None:
    assert from_host(f"3000-{SID}.anything.example", None) == Target(SID, 3000)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "ABCDEF",  # uppercase: claim names are lowercase
        "abc-def",
        "abc.def",
        "a" * 64,
        "abc def",
        "abc\r\nX-Injected: 1",
        "../etc",
        "abc%2f",
        "ä",
    ],
)
def test_hostile_sandbox_ids_are_refused(value: str) -> None:
    headers = [(b"e2b-sandbox-id", value.encode()), (b"e2b-sandbox-port", b"49983")]
    with pytest.raises(TargetError, match="invalid"):
        resolve(headers, domain=None)


@pytest.mark.parametrize(
    "value",
    [
        "",
        "0",
        "65536",
        "99999",
        "-1",
        "+80",
        "049983",
        "80 ",
        "0x50",
        "\uff11\uff12\uff13",
        "80,81",
    ],
)
def test_hostile_ports_are_refused(value: str) -> None:
    headers = [(b"e2b-sandbox-id", SID.encode()), (b"e2b-sandbox-port", value.encode())]
    with pytest.raises(TargetError):
        resolve(headers, domain=None)


def test_repeated_headers_are_refused() -> None:
    headers = [*h(e2b_sandbox_id=SID, e2b_sandbox_port="49983"), (b"e2b-sandbox-id", b"other")]
    with pytest.raises(TargetError, match="more than one"):
        resolve(headers, domain=None)


def test_port_without_id_and_id_without_port_are_refused() -> None:
    with pytest.raises(TargetError, match="missing E2b-Sandbox-Port"):
        resolve(h(e2b_sandbox_id=SID), domain=None)
    with pytest.raises(TargetError, match="missing E2b-Sandbox-Id"):
        resolve(h(e2b_sandbox_port="49983"), domain=None)


def test_no_target_at_all_is_refused() -> None:
    with pytest.raises(TargetError, match="no sandbox named"):
        resolve([], domain=None)
    with pytest.raises(TargetError, match="no sandbox named"):
        resolve(h(host="gateway.example"), domain=None)


@pytest.mark.parametrize(
    "host",
    [
        f"user@49983-{SID}.sbx.example.test",
        f"49983-{SID}.sbx.example.test:80:80",
        f"49983-{SID}.sbx.example.test:abc",
        f"49983-{SID}..sbx.example.test",
        "[::1]:80",
        f"49983-{SID}.sbx.example.test\r\nX: y",
        f"49983-{SID} .sbx.example.test",
        f"49983-{SID}.sbx.example.test/x",
        "x" * 300,
    ],
)
def test_hostile_hosts_are_refused(host: str) -> None:
    with pytest.raises(TargetError):
        resolve(h(host=host), domain="sbx.example.test")


@pytest.mark.parametrize(
    "host",
    [
        f"0-{SID}.sbx.example.test",
        f"70000-{SID}.sbx.example.test",
        "80-a-b.sbx.example.test",
        "80-a_b.sbx.example.test",
    ],
)
def test_hosts_with_malformed_labels_are_refused(host: str) -> None:
    with pytest.raises(TargetError):
        from_host(host, "sbx.example.test")


def test_host_labels_are_case_insensitive() -> None:
    assert from_host(f"80-{SID.upper()}.sbx.example.test", "sbx.example.test") == Target(SID, 80)


def test_host_name_strips_port_and_case() -> None:
    assert host_name("Gateway.Example:8080") == "gateway.example"
    with pytest.raises(TargetError):
        host_name("gateway.example:")
