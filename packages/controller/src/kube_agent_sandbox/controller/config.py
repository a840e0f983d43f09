"""The controller's options: upstream's flags, their defaults, and their validation.

It stays one module: the option dataclass lists every flag in one place, and the flag set
and the validation next to it are built from and check exactly those fields.

One dataclass field per flag of upstream's ``agent-sandbox-controller`` (names, defaults and
help text as upstream has them), so the flag set is generated from the options and cannot drift
from them. Validation keeps upstream's messages, order and exit codes: malformed flags exit 2
(Go's flag package), invalid values exit 1, questionable ones only warn.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from kube_agent_sandbox.controller.goduration import (
    DurationError,
    format_go_duration,
    parse_go_duration,
)
from kube_agent_sandbox.controller.goflag import Flag, FlagKind, FlagSet, ValueError_
from kube_agent_sandbox.controller.logsetup import (
    LogOptions,
    parse_encoder,
    parse_log_level,
    parse_stacktrace_level,
    parse_time_encoding,
)
from kube_agent_sandbox.controller.runtime import BindAddress, parse_bind_address

__all__ = [
    "ALLOWED_LABEL_DOMAINS_FILE",
    "DEFAULT_WEBHOOK_CERT_DIR",
    "DEFAULT_WEBHOOK_CERT_NAME",
    "DEFAULT_WEBHOOK_KEY_NAME",
    "EXIT_INVALID",
    "MAX_TOTAL_WORKERS",
    "BindAddress",
    "ConfigError",
    "ControllerOptions",
    "build_flagset",
    "parse_args",
    "parse_bind_address",
    "read_allowed_label_domains",
    "validate",
]

EXIT_INVALID: Final = 1
"""Exit status for a flag value the controller refuses (upstream's ``os.Exit(1)``)."""
MAX_TOTAL_WORKERS: Final = 1000
"""Above this many reconcile workers in total, upstream warns of resource exhaustion."""
DEFAULT_WEBHOOK_CERT_DIR: Final = "/tmp/k8s-webhook-server/serving-certs"
DEFAULT_WEBHOOK_CERT_NAME: Final = "tls.crt"
DEFAULT_WEBHOOK_KEY_NAME: Final = "tls.key"
ALLOWED_LABEL_DOMAINS_FILE: Final = "/etc/sandbox-config/allowed-label-domains"
"""Mounted from the optional ConfigMap ``agent-sandbox-config``
(docs/reference/deployment.md)."""


def _flag(name: str, default: Any, usage: str) -> Any:
    """A dataclass field that is also a command-line flag."""
    return field(default=default, metadata={"flag": name, "usage": usage})


def _duration_flag(name: str, default: float, usage: str) -> Any:
    """A Go ``time.Duration`` flag (``300ms``, ``1m30s``), held in seconds."""
    return field(default=default, metadata={"flag": name, "usage": usage, "duration": True})


@dataclass(frozen=True, slots=True)
class ControllerOptions:
    """Everything the command line configures. Defaults are upstream v0.5.6's."""

    version: bool = _flag("version", False, "Print version information and exit.")
    extensions: bool = _flag("extensions", False, "Enable extensions controllers.")
    idle_shutdown: bool = _flag(
        "idle-shutdown",
        False,
        "With --extensions: suspend (or delete) Sandboxes whose kube-agent-sandbox.io/idle-timeout "
        "ran out without activity on their heartbeat Lease.",
    )
    snapshot_registry: str = _flag(
        "snapshot-registry",
        "",
        "With --extensions: the OCI registry SandboxSnapshots are pushed to "
        "(https://host[:port]); setting it starts the SandboxSnapshot controller.",
    )
    snapshot_registry_auth_file: str = _flag(
        "snapshot-registry-auth-file",
        "",
        "Absolute path of the snapshot registry's credentials: the .dockerconfigjson of a "
        "kubernetes.io/dockerconfigjson Secret mounted into the pod, read at each registry call "
        "(none: anonymous).",
    )
    snapshot_registry_ca: str = _flag(
        "snapshot-registry-ca",
        "",
        "PEM file of the CA that signed the snapshot registry's certificate (none: the system's).",
    )
    snapshot_repository_prefix: str = _flag(
        "snapshot-repository-prefix",
        "agent-sandbox/snapshots",
        "Repository prefix of snapshot images: <prefix>/<namespace>/<sandbox>.",
    )
    snapshot_commit_timeout: float = _duration_flag(
        "snapshot-commit-timeout",
        600.0,
        "How long a SandboxSnapshot may stay Committing before it is marked Failed.",
    )
    snapshot_node_lost_grace: float = _duration_flag(
        "snapshot-node-lost-grace",
        60.0,
        "How long the node of a Committing SandboxSnapshot may stay not Ready "
        "(a kubelet restart) before the snapshot is marked Failed (NodeLost).",
    )
    leader_elect: bool = _flag(
        "leader-elect",
        True,
        "Enable leader election for controller manager. "
        "Enabling this will ensure there is only one active controller manager.",
    )
    leader_election_namespace: str = _flag(
        "leader-election-namespace",
        "",
        "The namespace in which the leader election resource will be created.",
    )
    leader_elect_lease_duration: float = _duration_flag(
        "leader-elect-lease-duration",
        15.0,
        "How long a standby waits after the last observed renewal before taking the lease "
        "(also the longest a failover takes).",
    )
    leader_elect_renew_deadline: float = _duration_flag(
        "leader-elect-renew-deadline",
        10.0,
        "How long the leader retries renewing the lease before it gives up leading.",
    )
    leader_elect_retry_period: float = _duration_flag(
        "leader-elect-retry-period",
        2.0,
        "How often candidates try to acquire or renew the lease.",
    )
    sync_period: float = _duration_flag(
        "sync-period",
        36000.0,
        "How often every cached object is reconciled again even without a change "
        "(controller-runtime's SyncPeriod, jittered by 10%; 0 disables).",
    )
    metrics_bind_address: str = _flag(
        "metrics-bind-address", ":8080", "The address the metric endpoint binds to."
    )
    health_probe_bind_address: str = _flag(
        "health-probe-bind-address", ":8081", "The address the probe endpoint binds to."
    )
    cluster_domain: str = _flag(
        "cluster-domain", "cluster.local", "Kubernetes cluster domain for service FQDN generation"
    )
    kube_api_qps: float = _flag(
        "kube-api-qps",
        -1.0,
        "Client-side QPS limit for the Kubernetes API client "
        "(default: -1, no client-side rate limiting)",
    )
    kube_api_burst: int = _flag(
        "kube-api-burst",
        10,
        "The maximum burst for client-side throttling of the Kubernetes API client.",
    )
    api_connections: int = _flag(
        "api-connections",
        1,
        "Number of independent HTTP connection pools to the API server. Requests (writes, "
        "lists, uncached reads, events, leader election) take them round-robin; so do "
        "watches unless --separate-watch-connection is set.",
    )
    separate_watch_connection: bool = _flag(
        "separate-watch-connection",
        False,
        "Give the informers' watch streams a dedicated connection pool to the API server, "
        "isolated from request traffic (their lists stay ordinary requests).",
    )
    sandbox_concurrent_workers: int = _flag(
        "sandbox-concurrent-workers", 100, "Max concurrent reconciles for the Sandbox controller"
    )
    sandbox_claim_concurrent_workers: int = _flag(
        "sandbox-claim-concurrent-workers",
        50,
        "Max concurrent reconciles for the SandboxClaim controller",
    )
    sandbox_warm_pool_concurrent_workers: int = _flag(
        "sandbox-warm-pool-concurrent-workers",
        1,
        "Max concurrent reconciles for the SandboxWarmPool controller",
    )
    sandbox_template_concurrent_workers: int = _flag(
        "sandbox-template-concurrent-workers",
        1,
        "Max concurrent reconciles for the SandboxTemplate controller",
    )
    sandbox_warm_pool_max_batch_size: int = _flag(
        "sandbox-warm-pool-max-batch-size",
        300,
        "Max batch size for parallel sandbox creation and deletion in SandboxWarmPool controller.",
    )
    enable_warm_pool_eviction: bool = _flag(
        "enable-warm-pool-eviction",
        True,
        "Mark pods created by a warm pool as ready-to-evict by default.",
    )
    cache_label_selectors: bool = _flag(
        "cache-label-selectors",
        False,
        "Scope the Pod and Service informer caches to objects carrying the sandbox tracking "
        "label (agents.x-k8s.io/sandbox-name-hash).",
    )
    disable_claim_events: bool = _flag(
        "disable-claim-events",
        False,
        "Disable Kubernetes Event emission from the SandboxClaim controller.",
    )
    disable_claim_observability_annotations: bool = _flag(
        "disable-claim-observability-annotations",
        False,
        "Skip persisting the SandboxClaim observability annotations "
        "(controller first-observed timestamp, trace context).",
    )
    sandbox_write_behind_window: float = _duration_flag(
        "sandbox-write-behind-window",
        0.0,
        "Coalesce recoverable Pod metadata writes of the Sandbox controller within this window "
        "(0 disables write-behind coalescing).",
    )
    sandbox_status_coalesce_window: float = _duration_flag(
        "sandbox-status-coalesce-window",
        0.5,
        "Hold a Sandbox status change that only reports progress towards Ready (Pod created, "
        "scheduled, given an IP) for at most this long, so it rides along with the next write "
        "(0 writes every change at once).",
    )
    sandbox_warm_pool_replenish_delay: float = _duration_flag(
        "sandbox-warm-pool-replenish-delay",
        0.0,
        "Delay before a warm pool replaces members it lost; restarted on every drop (0 = off).",
    )
    sandbox_warm_pool_max_refill_rate: float = _flag(
        "sandbox-warm-pool-max-refill-rate",
        0.0,
        "Max Sandbox creations per second per warm pool (0 disables pacing).",
    )
    sandbox_warm_pool_readiness_grace_period: float = _duration_flag(
        "sandbox-warm-pool-readiness-grace-period",
        300.0,
        "How long a warm pool Sandbox may stay not Ready before it is replaced.",
    )
    sandbox_warm_pool_unschedulable_recheck_interval: float = _duration_flag(
        "sandbox-warm-pool-unschedulable-recheck-interval",
        60.0,
        "How often a warm pool re-checks Sandboxes held because their Pods are unschedulable.",
    )
    enable_tracing: bool = _flag("enable-tracing", False, "Enable OpenTelemetry tracing via OTLP.")
    enable_pprof: bool = _flag(
        "enable-pprof",
        False,
        "Enable the CPU profiling endpoint (/debug/pprof/profile) on the metrics server.",
    )
    enable_pprof_debug: bool = _flag(
        "enable-pprof-debug",
        False,
        "Enable all profiling endpoints including sensitive ones. Implies --enable-pprof. "
        "WARNING: May expose sensitive information and comes with performance overhead.",
    )
    pprof_block_profile_rate: int = _flag(
        "pprof-block-profile-rate",
        1000000,
        "Accepted for compatibility; Python has no block profile (no-op).",
    )
    pprof_mutex_profile_fraction: int = _flag(
        "pprof-mutex-profile-fraction",
        10,
        "Accepted for compatibility; Python has no mutex profile (no-op).",
    )
    enable_webhook: bool = _flag(
        "enable-webhook", True, "Enable webhook server and webhook registrations."
    )
    webhook_port: int = _flag("webhook-port", 9443, "The port the webhook server binds to.")
    webhook_cert_dir: str = _flag(
        "webhook-cert-dir",
        DEFAULT_WEBHOOK_CERT_DIR,
        "The directory that contains the certificates.",
    )
    webhook_cert_name: str = _flag(
        "webhook-cert-name",
        DEFAULT_WEBHOOK_CERT_NAME,
        "The filename of the webhook serving certificate within --webhook-cert-dir. "
        "Only used when --manage-webhook-certs=false.",
    )
    webhook_key_name: str = _flag(
        "webhook-key-name",
        DEFAULT_WEBHOOK_KEY_NAME,
        "The filename of the webhook private key within --webhook-cert-dir. "
        "Only used when --manage-webhook-certs=false.",
    )
    webhook_service_name: str = _flag(
        "webhook-service-name", "agent-sandbox-webhook-service", "The name of the webhook service."
    )
    webhook_namespace: str = _flag(
        "webhook-namespace", "agent-sandbox-system", "The namespace of the webhook service."
    )
    manage_webhook_certs: bool = _flag(
        "manage-webhook-certs",
        True,
        "Manage webhook serving certs and patch CRD conversion caBundles on startup. "
        "Set to false when certs and CRD/webhook configuration are managed externally "
        "by a certificate provisioner.",
    )
    kubeconfig: str = _flag(
        "kubeconfig",
        "",
        "Paths to a kubeconfig. Only required if out-of-cluster.",
    )
    logging: LogOptions = field(default_factory=LogOptions)
    """The ``--zap-*`` flags."""
    args: tuple[str, ...] = ()
    """Arguments after the flags (upstream ignores them)."""
    explicit: frozenset[str] = frozenset()
    """Names of the flags given on the command line."""
    idle_min_timeout: float = 60.0
    """Shortest idle timeout accepted, in seconds (not a flag: tests lower it)."""
    allowed_label_domains: tuple[str, ...] = ()
    """Label domains claims may set on sandbox pods (read from the optional ConfigMap file
    :data:`ALLOWED_LABEL_DOMAINS_FILE` at startup with ``--extensions``; not a flag)."""

    @property
    def total_workers(self) -> int:
        """Reconcile workers of all four controllers, as upstream counts them."""
        return (
            self.sandbox_concurrent_workers
            + self.sandbox_claim_concurrent_workers
            + self.sandbox_warm_pool_concurrent_workers
            + self.sandbox_template_concurrent_workers
        )

    @property
    def effective_template_workers(self) -> int:
        """Template workers as controller-runtime runs them (``<= 0`` means 1)."""
        return max(1, self.sandbox_template_concurrent_workers)

    @property
    def pprof_enabled(self) -> bool:
        """Whether any profiling endpoint is served (``--enable-pprof-debug`` implies it)."""
        return self.enable_pprof or self.enable_pprof_debug


_ZAP_FLAGS: Final = (
    Flag(
        "zap-devel",
        "bool",
        False,
        "Development Mode defaults(encoder=consoleEncoder,logLevel=Debug,stackTraceLevel=Warn). "
        "Production Mode defaults(encoder=jsonEncoder,logLevel=Info,stackTraceLevel=Error)",
    ),
    Flag(
        "zap-encoder",
        "value",
        None,
        "Zap log encoding (one of 'json' or 'console')",
        parse=parse_encoder,
    ),
    Flag(
        "zap-log-level",
        "value",
        None,
        "Zap Level to configure the verbosity of logging. Can be one of 'debug', 'info', "
        "'error', 'panic' or any integer value > 0 which corresponds to custom debug levels "
        "of increasing verbosity",
        parse=parse_log_level,
    ),
    Flag(
        "zap-stacktrace-level",
        "value",
        None,
        "Zap Level at and above which stacktraces are captured (one of 'info', 'error', 'panic').",
        parse=parse_stacktrace_level,
    ),
    Flag(
        "zap-time-encoding",
        "value",
        None,
        "Zap time encoding (one of 'epoch', 'millis', 'nano', 'iso8601', 'rfc3339' or "
        "'rfc3339nano'). Defaults to 'rfc3339'.",
        parse=parse_time_encoding,
    ),
)

_KINDS: Final[dict[type, FlagKind]] = {bool: "bool", int: "int", float: "float", str: "string"}


def _option_fields() -> list[dataclasses.Field[Any]]:
    return [f for f in dataclasses.fields(ControllerOptions) if "flag" in f.metadata]


def _parse_duration_flag(text: str) -> float:
    """Go's ``durationValue.Set``: any ``time.ParseDuration`` failure is ``parse error``."""
    try:
        return parse_go_duration(text)
    except DurationError:
        raise ValueError_("parse error") from None


def build_flagset(program: str) -> FlagSet:
    """Every flag the controller accepts, with upstream's names, defaults and help.

    Args:
        program: the name shown in the usage text.

    Returns:
        A fresh flag set.
    """
    flagset = FlagSet(program)
    for option in _option_fields():
        name, usage = option.metadata["flag"], option.metadata["usage"]
        if option.metadata.get("duration"):
            seconds = float(option.default)  # type: ignore[arg-type]
            flagset.add(
                Flag(
                    name,
                    "value",
                    option.default,
                    usage,
                    parse=_parse_duration_flag,
                    default_text=format_go_duration(seconds) if seconds else "",
                )
            )
            continue
        kind = _KINDS[type(option.default)]
        flagset.add(Flag(name, kind, option.default, usage))
    flagset.add_all(_ZAP_FLAGS)
    return flagset


def parse_args(
    argv: Sequence[str], *, program: str = "agent-sandbox-controller"
) -> ControllerOptions:
    """Parse a command line into options (no validation beyond each value's syntax).

    Args:
        argv: arguments without the program name.
        program: the name shown in the usage text.

    Returns:
        The options.

    Raises:
        goflag.HelpRequested: ``-h``/``-help`` was given.
        goflag.FlagError: a malformed flag (exit 2).
    """
    result = build_flagset(program).parse(argv)
    values = result.values
    kwargs: dict[str, Any] = {
        option.name: values[option.metadata["flag"]] for option in _option_fields()
    }
    kwargs["logging"] = LogOptions(
        development=bool(values["zap-devel"]),
        encoder=values["zap-encoder"],  # type: ignore[arg-type]
        level=values["zap-log-level"],  # type: ignore[arg-type]
        stacktrace_level=values["zap-stacktrace-level"],  # type: ignore[arg-type]
        time_encoding=values["zap-time-encoding"],  # type: ignore[arg-type]
    )
    return ControllerOptions(**kwargs, args=result.args, explicit=result.explicit)


class ConfigError(Exception):
    """Options the controller refuses to start with; the message is upstream's."""

    def __init__(self, message: str, *, exit_code: int = EXIT_INVALID) -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code


def validate(options: ControllerOptions) -> list[str]:
    """Check the options in upstream's order.

    Args:
        options: parsed options.

    Returns:
        Warnings to log (the controller still starts).

    Raises:
        ConfigError: the first refused value, with upstream's message (exit 1).
    """
    if not options.webhook_cert_name.strip():
        raise ConfigError("--webhook-cert-name cannot be empty")
    if not options.webhook_key_name.strip():
        raise ConfigError("--webhook-key-name cannot be empty")
    if options.sandbox_warm_pool_readiness_grace_period <= 0:
        raise ConfigError("--sandbox-warm-pool-readiness-grace-period must be a positive duration")
    if options.sandbox_warm_pool_unschedulable_recheck_interval <= 0:
        raise ConfigError(
            "--sandbox-warm-pool-unschedulable-recheck-interval must be a positive duration"
        )
    if (
        options.sandbox_concurrent_workers <= 0
        or options.sandbox_claim_concurrent_workers <= 0
        or options.sandbox_warm_pool_concurrent_workers <= 0
    ):
        raise ConfigError("concurrent workers must be greater than 0")
    if options.sandbox_warm_pool_max_batch_size <= 0:
        raise ConfigError("sandbox-warm-pool-max-batch-size must be greater than 0")
    rate = options.sandbox_warm_pool_max_refill_rate
    if math.isnan(rate) or math.isinf(rate) or rate < 0:
        raise ConfigError(
            "sandbox-warm-pool-max-refill-rate must be a finite value >= 0 (0 disables pacing)"
        )
    if options.sandbox_status_coalesce_window < 0:
        raise ConfigError(
            "sandbox-status-coalesce-window must be >= 0 (0 writes every status change at once)"
        )
    if options.sandbox_write_behind_window < 0:
        raise ConfigError(
            "sandbox-write-behind-window must be >= 0 (0 disables write-behind coalescing)"
        )
    warnings: list[str] = []
    total = options.total_workers
    if total > MAX_TOTAL_WORKERS:
        warnings.append(
            "Warning: total concurrent workers exceeds 1000, which could lead to resource "
            f"exhaustion (total={total})"
        )
    if options.kube_api_burst <= 0:
        raise ConfigError("kube-api-burst must be greater than 0")
    if options.api_connections < 1:
        raise ConfigError("api-connections must be greater than or equal to 1")
    if options.kube_api_qps > 0 and total > options.kube_api_burst:
        warnings.append(
            "Warning: Total concurrent workers exceeds the kube API burst limit. Workers may "
            f"experience client-side throttling. (totalWorkers={total}, "
            f"kubeAPIBurst={options.kube_api_burst})"
        )
    if options.sync_period < 0:
        raise ConfigError("sync-period must be >= 0 (0 disables periodic resync)")
    if options.leader_elect:
        lease = options.leader_elect_lease_duration
        renew = options.leader_elect_renew_deadline
        retry = options.leader_elect_retry_period
        if min(lease, renew, retry) <= 0:
            raise ConfigError(
                "leader election lease duration, renew deadline and retry period must be positive"
            )
        if lease <= renew:
            raise ConfigError("leader-elect-lease-duration must be greater than renew deadline")
        if renew <= 1.2 * retry:
            raise ConfigError("leader-elect-renew-deadline must be greater than 1.2 * retry period")
    for name, address in (
        ("metrics-bind-address", options.metrics_bind_address),
        ("health-probe-bind-address", options.health_probe_bind_address),
    ):
        try:
            parse_bind_address(address)
        except ValueError as err:
            raise ConfigError(f"invalid --{name} {address!r}: {err}") from None
    if not 0 < options.webhook_port < 65536 and options.enable_webhook:
        raise ConfigError(f"invalid --webhook-port {options.webhook_port}: not in 1..65535")
    return warnings


_DOMAIN_SEPARATORS = re.compile(r"[,\n\r]")


def read_allowed_label_domains(path: str | Path = ALLOWED_LABEL_DOMAINS_FILE) -> tuple[str, ...]:
    """Read the allowed label domains: comma or newline separated, trimmed, lowercased.

    Args:
        path: the file (mounted from the optional ConfigMap).

    Returns:
        The domains; empty when the file does not exist.

    Raises:
        ConfigError: ``failed to read configuration file`` for any other read error (exit 1).
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return ()
    except (OSError, UnicodeDecodeError) as err:
        raise ConfigError(f"failed to read configuration file {str(path)!r}: {err}") from err
    domains = (part.strip().lower() for part in _DOMAIN_SEPARATORS.split(text.strip()))
    return tuple(domain for domain in domains if domain)
