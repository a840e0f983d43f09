"""The gateway's settings: one frozen value built by the command line (or by tests).

Every part of the gateway reads its knobs from one :class:`GatewayOptions`, so the command
line, the tests and the defaults of the wire contract (timeouts in seconds) cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_LISTEN = ":8080"
DEFAULT_CREATE_TIMEOUT_SECONDS = 60.0
DEFAULT_SANDBOX_TIMEOUT_SECONDS = 300
DEFAULT_SNAPSHOT_TIMEOUT_SECONDS = 300.0
DEFAULT_SNAPSHOT_ACK_SECONDS = 15.0
MAX_SANDBOX_TIMEOUT_SECONDS = 30 * 24 * 3600


@dataclass(frozen=True)
class GatewayOptions:
    """Settings of one gateway process (durations in seconds).

    Attributes:
        listen: ``host:port`` to serve on (``:8080`` = every interface).
        kubeconfig: kubeconfig path; None = ``$KUBECONFIG``, in-cluster, ``~/.kube/config``.
        namespace: serve only this tenant namespace (caches scoped to it); None = all.
        domain: wildcard domain of the hostname form ``<port>-<id>.<domain>``; returned to
            clients as the sandboxes' ``domain``; None = header routing only.
        public_url: the URL sandboxes reach the gateway at (for the daemon's heartbeat URL);
            None = no heartbeat URL is sent.
        pod_address_override: testing only: every pod IP becomes this host; ``loopback``:
            each pod its own ``127.x.y.z`` (from a hash of its UID), where a local
            daemon per pod listens.
        pod_port_map: testing only: sandbox port -> local port (with the override).
        hmac_secret_file: file holding the token secret; None = a random one per process.
        create_timeout_seconds: how long a create waits for the claim to become Ready.
        default_timeout_seconds: sandbox lifetime when the client sends no ``timeout``.
        init_timeout_seconds: budget of the daemon's ``/init`` call (with its retries).
        kube_api_qps: client-side API requests per second (``<= 0``: unlimited).
        kube_api_burst: client-side burst.
        tls_cert_file: PEM certificate (chain) to serve HTTPS with; None = plain HTTP. Given
            together with ``tls_key_file`` or not at all; reloaded when the files change.
        tls_key_file: PEM private key of ``tls_cert_file``.
        mcp_file_root: the MCP tools' file root: relative paths start there, paths outside
            it are refused.
        http2: serve HTTP/2 as well as HTTP/1.1 (under hypercorn instead of uvicorn): h2 over
            TLS by ALPN, h2c with prior knowledge over plain HTTP.
        gateway_namespace: the namespace of the gateway's pods, which sandboxes with egress
            rules may still reach (heartbeats); None = the service account's namespace when
            running in a cluster, else none.
        enable_tracing: trace creates with OpenTelemetry, exported over OTLP
            (:mod:`kube_agent_sandbox.gateway.tracing`).
        snapshot_timeout_seconds: how long ``create_snapshot`` waits for the SandboxSnapshot
            to be Ready (the commit and push included).
        snapshot_ack_seconds: how long ``create_snapshot`` waits for a snapshot controller to
            give the new SandboxSnapshot a phase before it says the cluster has none.
        pause_keeps_filesystem: claims carry ``snapshot-on-suspend: Filesystem`` so that
            every suspend (pause, auto-pause, the console's) keeps what the sandbox wrote,
            where the controller runs the state keeper (ignored where it does not).
        pause_keeps_memory: a pause (unless ``memory: false``) and the auto-pause of a claim
            created without ``autoPauseMemory: false`` ask for ``snapshot-on-suspend: Memory``
            with the fallback ``Filesystem`` (:mod:`kube_agent_sandbox.gateway.pausekeeps`):
            the memory where the node can checkpoint, the files where it cannot. Off by
            default: the process resumes only on a node with CRIU too, and a checkpoint is
            as large as the sandbox's memory. Needs ``pause_keeps_filesystem``.
    """

    listen: str = DEFAULT_LISTEN
    kubeconfig: str | None = None
    namespace: str | None = None
    domain: str | None = None
    public_url: str | None = None
    pod_address_override: str | None = None
    pod_port_map: dict[int, int] = field(default_factory=dict)
    hmac_secret_file: str | None = None
    create_timeout_seconds: float = DEFAULT_CREATE_TIMEOUT_SECONDS
    default_timeout_seconds: int = DEFAULT_SANDBOX_TIMEOUT_SECONDS
    init_timeout_seconds: float = 5.0
    kube_api_qps: float = 50.0
    kube_api_burst: int = 100
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    mcp_file_root: str = "/"
    http2: bool = False
    gateway_namespace: str | None = None
    enable_tracing: bool = False
    snapshot_timeout_seconds: float = DEFAULT_SNAPSHOT_TIMEOUT_SECONDS
    snapshot_ack_seconds: float = DEFAULT_SNAPSHOT_ACK_SECONDS
    pause_keeps_filesystem: bool = True
    pause_keeps_memory: bool = False

    def __post_init__(self) -> None:
        if self.create_timeout_seconds <= 0:
            raise ValueError("create timeout must be positive")
        if not 0 < self.default_timeout_seconds <= MAX_SANDBOX_TIMEOUT_SECONDS:
            raise ValueError(f"default timeout must be in 1..{MAX_SANDBOX_TIMEOUT_SECONDS} seconds")
        if self.init_timeout_seconds <= 0:
            raise ValueError("init timeout must be positive")
        if self.snapshot_timeout_seconds <= 0 or self.snapshot_ack_seconds <= 0:
            raise ValueError("snapshot timeouts must be positive")
        if self.pause_keeps_memory and not self.pause_keeps_filesystem:
            raise ValueError(
                "--pause-keeps-memory needs --pause-keeps-filesystem: the files are its fallback"
                " where a node cannot checkpoint"
            )
        if self.domain is not None and (not self.domain or self.domain.startswith(".")):
            raise ValueError(f"invalid domain {self.domain!r}")
        if (self.tls_cert_file is None) != (self.tls_key_file is None):
            raise ValueError(
                "TLS needs both a certificate file and a key file (--tls-cert-file and"
                " --tls-key-file), or neither"
            )
        if self.tls_cert_file == "" or self.tls_key_file == "":
            raise ValueError("TLS certificate and key file names must not be empty")
        for port, local in self.pod_port_map.items():
            if not (0 < port < 65536 and 0 < local < 65536):
                raise ValueError(f"invalid port mapping {port}={local}")

    @property
    def tls(self) -> bool:
        """Whether the gateway serves HTTPS (a certificate and key are configured)."""
        return self.tls_cert_file is not None

    @property
    def bind(self) -> tuple[str, int]:
        """``listen`` split into host and port (host ``0.0.0.0`` when empty).

        Raises:
            ValueError: if ``listen`` is not ``host:port`` with a valid port.
        """
        return parse_listen(self.listen)


def parse_listen(listen: str) -> tuple[str, int]:
    """Split ``host:port`` (``[v6]:port`` too); an empty host means every interface.

    Raises:
        ValueError: if there is no valid port.
    """
    host, sep, port_text = listen.rpartition(":")
    if not sep or not port_text.isdigit():
        raise ValueError(f"listen address {listen!r} is not host:port")
    port = int(port_text)
    if not 0 <= port < 65536:
        raise ValueError(f"listen port {port} out of range")
    host = host.strip("[]") or "0.0.0.0"  # default: all interfaces
    return host, port


def parse_port_map(text: str) -> dict[int, int]:
    """Parse ``49983=12345,49999=12346`` into a port mapping.

    Raises:
        ValueError: on a malformed entry or a port outside 1..65535.
    """
    mapping: dict[int, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        left, sep, right = item.partition("=")
        if not sep or not left.strip().isdigit() or not right.strip().isdigit():
            raise ValueError(f"port mapping {item!r} is not PORT=LOCALPORT")
        port, local = int(left), int(right)
        if not (0 < port < 65536 and 0 < local < 65536):
            raise ValueError(f"port mapping {item!r} has a port outside 1..65535")
        mapping[port] = local
    return mapping
