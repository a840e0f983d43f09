"""Every flag of upstream's controller: name, default, Go syntax, validation.

See docs/reference/controller-flags.md.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from kube_agent_sandbox.controller.config import (
    ConfigError,
    ControllerOptions,
    build_flagset,
    parse_args,
    validate,
)
from kube_agent_sandbox.controller.goflag import FlagError

# (flag, attribute, upstream default) straight from upstream v0.5.6
# cmd/agent-sandbox-controller/main.go.
UPSTREAM_FLAGS: list[tuple[str, str, Any]] = [
    ("version", "version", False),
    ("extensions", "extensions", False),
    ("leader-elect", "leader_elect", True),
    ("leader-election-namespace", "leader_election_namespace", ""),
    ("metrics-bind-address", "metrics_bind_address", ":8080"),
    ("health-probe-bind-address", "health_probe_bind_address", ":8081"),
    ("cluster-domain", "cluster_domain", "cluster.local"),
    ("kube-api-qps", "kube_api_qps", -1.0),
    ("kube-api-burst", "kube_api_burst", 10),
    ("api-connections", "api_connections", 1),
    ("separate-watch-connection", "separate_watch_connection", False),
    ("sandbox-concurrent-workers", "sandbox_concurrent_workers", 100),
    ("sandbox-claim-concurrent-workers", "sandbox_claim_concurrent_workers", 50),
    ("sandbox-warm-pool-concurrent-workers", "sandbox_warm_pool_concurrent_workers", 1),
    ("sandbox-template-concurrent-workers", "sandbox_template_concurrent_workers", 1),
    ("sandbox-warm-pool-max-batch-size", "sandbox_warm_pool_max_batch_size", 300),
    ("enable-warm-pool-eviction", "enable_warm_pool_eviction", True),
    ("cache-label-selectors", "cache_label_selectors", False),
    ("disable-claim-events", "disable_claim_events", False),
    (
        "disable-claim-observability-annotations",
        "disable_claim_observability_annotations",
        False,
    ),
    ("enable-tracing", "enable_tracing", False),
    ("enable-pprof", "enable_pprof", False),
    ("enable-pprof-debug", "enable_pprof_debug", False),
    ("pprof-block-profile-rate", "pprof_block_profile_rate", 1000000),
    ("pprof-mutex-profile-fraction", "pprof_mutex_profile_fraction", 10),
    ("enable-webhook", "enable_webhook", True),
    ("webhook-port", "webhook_port", 9443),
    ("webhook-cert-dir", "webhook_cert_dir", "/tmp/k8s-webhook-server/serving-certs"),
    ("webhook-cert-name", "webhook_cert_name", "tls.crt"),
    ("webhook-key-name", "webhook_key_name", "tls.key"),
    ("webhook-service-name", "webhook_service_name", "agent-sandbox-webhook-service"),
    ("webhook-namespace", "webhook_namespace", "agent-sandbox-system"),
    ("manage-webhook-certs", "manage_webhook_certs", True),
    ("kubeconfig", "kubeconfig", ""),
    # Added up to v0.5.6 (cmd/agent-sandbox-controller/main.go); durations are held in seconds.
    ("sandbox-write-behind-window", "sandbox_write_behind_window", 0.0),
    ("sandbox-warm-pool-replenish-delay", "sandbox_warm_pool_replenish_delay", 0.0),
    ("sandbox-warm-pool-max-refill-rate", "sandbox_warm_pool_max_refill_rate", 0.0),
    (
        "sandbox-warm-pool-readiness-grace-period",
        "sandbox_warm_pool_readiness_grace_period",
        300.0,
    ),
    (
        "sandbox-warm-pool-unschedulable-recheck-interval",
        "sandbox_warm_pool_unschedulable_recheck_interval",
        60.0,
    ),
]
# Reliability flags this implementation adds (docs/guides/reliability.md); durations in seconds.
ADDED_FLAGS: list[tuple[str, str, Any]] = [
    ("leader-elect-lease-duration", "leader_elect_lease_duration", 15.0),
    ("leader-elect-renew-deadline", "leader_elect_renew_deadline", 10.0),
    ("leader-elect-retry-period", "leader_elect_retry_period", 2.0),
    ("sync-period", "sync_period", 36000.0),
    # Idle shutdown (docs/guides/idle-shutdown.md), opt-in.
    ("idle-shutdown", "idle_shutdown", False),
    # SandboxSnapshots (docs/guides/snapshots.md), opt-in.
    ("snapshot-registry", "snapshot_registry", ""),
    ("snapshot-registry-auth-file", "snapshot_registry_auth_file", ""),
    ("snapshot-registry-ca", "snapshot_registry_ca", ""),
    ("snapshot-repository-prefix", "snapshot_repository_prefix", "agent-sandbox/snapshots"),
    ("snapshot-commit-timeout", "snapshot_commit_timeout", 600.0),
    ("snapshot-node-lost-grace", "snapshot_node_lost_grace", 60.0),
    # Status writes (docs/guides/upstream-differences.md, status coalescing).
    ("sandbox-status-coalesce-window", "sandbox_status_coalesce_window", 0.5),
]
ZAP_FLAGS = [
    "zap-devel",
    "zap-encoder",
    "zap-log-level",
    "zap-stacktrace-level",
    "zap-time-encoding",
]


def test_flag_set_is_exactly_upstreams() -> None:
    names = set(build_flagset("p").flags)
    added = {flag for flag, _, _ in ADDED_FLAGS}
    assert names == {flag for flag, _, _ in UPSTREAM_FLAGS} | set(ZAP_FLAGS) | added


@pytest.mark.parametrize(("flag", "attribute", "default"), ADDED_FLAGS)
def test_added_flags_default(flag: str, attribute: str, default: Any) -> None:
    assert getattr(parse_args([]), attribute) == default, flag


@pytest.mark.parametrize(("flag", "attribute", "default"), UPSTREAM_FLAGS)
def test_default(flag: str, attribute: str, default: Any) -> None:
    options = parse_args([])
    value = getattr(options, attribute)
    assert value == default
    assert type(value) is type(default)
    assert build_flagset("p").flags[flag].default == default


DURATION_FLAGS = {
    "sandbox-write-behind-window",
    "sandbox-status-coalesce-window",
    "sandbox-warm-pool-replenish-delay",
    "sandbox-warm-pool-readiness-grace-period",
    "sandbox-warm-pool-unschedulable-recheck-interval",
}


def _other_value(default: Any, flag: str = "") -> tuple[str, Any]:
    if flag in DURATION_FLAGS:
        return ("2m30s", 150.0)
    if isinstance(default, bool):
        return ("false", False) if default else ("true", True)
    if isinstance(default, int):
        return (str(default + 3), default + 3)
    if isinstance(default, float):
        return ("2.5", 2.5)
    return ("other-value", "other-value")


@pytest.mark.parametrize(("flag", "attribute", "default"), UPSTREAM_FLAGS)
@pytest.mark.parametrize("form", ["--{}={}", "-{}={}", "--{} {}", "-{} {}"])
def test_every_flag_in_every_go_form(flag: str, attribute: str, default: Any, form: str) -> None:
    text, expected = _other_value(default, flag)
    if isinstance(default, bool) and " " in form:
        argv = [f"--{flag}"] if expected else [f"--{flag}=false"]
    else:
        argv = form.format(flag, text).split(" ", 1)
    options = parse_args(argv)
    assert getattr(options, attribute) == expected
    assert flag in options.explicit


@pytest.mark.parametrize(
    ("flag", "attribute"),
    [(flag, attribute) for flag, attribute, default in UPSTREAM_FLAGS if isinstance(default, bool)],
)
def test_bare_boolean_means_true(flag: str, attribute: str) -> None:
    assert getattr(parse_args([f"--{flag}"]), attribute) is True
    assert getattr(parse_args([f"-{flag}=false"]), attribute) is False


@pytest.mark.parametrize(
    ("flag", "default"),
    [
        (f, d)
        for f, _, d in UPSTREAM_FLAGS
        if isinstance(d, int | float) and not isinstance(d, bool)
    ],
)
def test_numeric_flags_reject_garbage(flag: str, default: Any) -> None:
    with pytest.raises(FlagError, match=rf'^invalid value "x" for flag -{flag}: parse error$'):
        parse_args([f"--{flag}=x"])


def test_unknown_flag() -> None:
    with pytest.raises(FlagError, match=r"^flag provided but not defined: -leader-election$"):
        parse_args(["--leader-election"])


def test_positional_arguments_stop_parsing() -> None:
    options = parse_args(["--extensions", "run", "--leader-elect=false"])
    assert options.extensions is True
    assert options.leader_elect is True
    assert options.args == ("run", "--leader-elect=false")


def test_zap_flags() -> None:
    options = parse_args(
        [
            "--zap-devel",
            "--zap-encoder=JSON",
            "--zap-log-level",
            "3",
            "--zap-stacktrace-level=panic",
            "-zap-time-encoding=nano",
        ]
    )
    assert options.logging.development is True
    assert options.logging.encoder == "json"
    assert options.logging.level == logging.DEBUG - 2
    assert options.logging.stacktrace_level == logging.CRITICAL
    assert options.logging.time_encoding == "nanos"


def test_zap_defaults_are_production() -> None:
    log = parse_args([]).logging
    assert (log.effective_encoder, log.effective_level, log.effective_stacktrace_level) == (
        "json",
        logging.INFO,
        logging.ERROR,
    )
    assert log.effective_time_encoding == "rfc3339"
    dev = parse_args(["--zap-devel"]).logging
    assert (dev.effective_encoder, dev.effective_level, dev.effective_stacktrace_level) == (
        "console",
        logging.DEBUG,
        logging.WARNING,
    )
    mixed = parse_args(["--zap-devel", "--zap-encoder=json", "--zap-log-level=error"]).logging
    assert (mixed.effective_encoder, mixed.effective_level) == ("json", logging.ERROR)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--zap-encoder=xml"],
            'invalid value "xml" for flag -zap-encoder: invalid encoder value "xml"',
        ),
        (
            ["--zap-log-level=warn"],
            'invalid value "warn" for flag -zap-log-level: invalid log level "warn"',
        ),
        (["--zap-log-level=0"], 'invalid value "0" for flag -zap-log-level: invalid log level "0"'),
        (
            ["--zap-log-level=-1"],
            'invalid value "-1" for flag -zap-log-level: invalid log level "-1"',
        ),
        (
            ["--zap-stacktrace-level=debug"],
            'invalid value "debug" for flag -zap-stacktrace-level: '
            'invalid stacktrace level "debug"',
        ),
        (
            ["--zap-time-encoding=unix"],
            'invalid value "unix" for flag -zap-time-encoding: invalid time-encoding value "unix"',
        ),
        (["--zap-devel=maybe"], 'invalid boolean value "maybe" for -zap-devel: parse error'),
    ],
)
def test_zap_flag_errors(argv: list[str], message: str) -> None:
    with pytest.raises(FlagError) as caught:
        parse_args(argv)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--webhook-cert-name="], "--webhook-cert-name cannot be empty"),
        (["--webhook-cert-name", "  "], "--webhook-cert-name cannot be empty"),
        (["--webhook-key-name= "], "--webhook-key-name cannot be empty"),
        (["--sandbox-concurrent-workers=0"], "concurrent workers must be greater than 0"),
        (["--sandbox-claim-concurrent-workers=-1"], "concurrent workers must be greater than 0"),
        (["--sandbox-warm-pool-concurrent-workers=0"], "concurrent workers must be greater than 0"),
        (
            ["--sandbox-warm-pool-max-batch-size=0"],
            "sandbox-warm-pool-max-batch-size must be greater than 0",
        ),
        (["--kube-api-burst=0"], "kube-api-burst must be greater than 0"),
        (["--kube-api-burst=-5"], "kube-api-burst must be greater than 0"),
        (["--api-connections=0"], "api-connections must be greater than or equal to 1"),
        (
            ["--metrics-bind-address=localhost"],
            "invalid --metrics-bind-address 'localhost': expected host:port",
        ),
        (
            ["--health-probe-bind-address=:70000"],
            "invalid --health-probe-bind-address ':70000': port out of range",
        ),
        (["--webhook-port=-1"], "invalid --webhook-port -1: not in 1..65535"),
        (["--webhook-port=65536"], "invalid --webhook-port 65536: not in 1..65535"),
    ],
)
def test_validation_errors_exit_1(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(parse_args(argv))
    assert caught.value.message == message
    assert caught.value.exit_code == 1


def test_validation_order_follows_upstream() -> None:
    """Cert name is checked before workers, workers before burst (first error wins)."""
    with pytest.raises(ConfigError, match="cert-name"):
        validate(parse_args(["--webhook-cert-name=", "--sandbox-concurrent-workers=0"]))
    with pytest.raises(ConfigError, match="concurrent workers"):
        validate(parse_args(["--kube-api-burst=0", "--sandbox-concurrent-workers=0"]))


def test_template_workers_are_not_validated_but_run_at_least_one() -> None:
    options = parse_args(["--sandbox-template-concurrent-workers=0"])
    assert validate(options) == []
    assert options.effective_template_workers == 1


def test_webhook_port_is_not_checked_when_webhook_is_off() -> None:
    assert validate(parse_args(["--enable-webhook=false", "--webhook-port=-1"])) == []


def test_defaults_validate_without_warnings() -> None:
    assert validate(ControllerOptions()) == []


def test_warning_total_workers_over_1000() -> None:
    warnings = validate(parse_args(["--sandbox-concurrent-workers=950"]))
    assert len(warnings) == 1
    assert "total concurrent workers exceeds 1000" in warnings[0]
    assert "total=1002" in warnings[0]
    assert validate(parse_args(["--sandbox-concurrent-workers=948"])) == []


def test_warning_workers_exceed_burst_only_with_positive_qps() -> None:
    assert validate(parse_args(["--kube-api-burst=20"])) == []  # qps -1: no limiter
    warnings = validate(parse_args(["--kube-api-qps=50", "--kube-api-burst=20"]))
    assert len(warnings) == 1
    assert "exceeds the kube API burst limit" in warnings[0]
    assert "totalWorkers=152" in warnings[0]
    assert validate(parse_args(["--kube-api-qps=50", "--kube-api-burst=152"])) == []


def test_both_warnings() -> None:
    warnings = validate(parse_args(["--sandbox-concurrent-workers=2000", "--kube-api-qps=5"]))
    assert len(warnings) == 2


def test_pprof_debug_implies_pprof() -> None:
    assert parse_args(["--enable-pprof-debug"]).pprof_enabled is True
    assert parse_args(["--enable-pprof"]).pprof_enabled is True
    assert parse_args([]).pprof_enabled is False


# --- v0.5.6 duration and rate flags (docs/reference/controller-flags.md) --------------------------


@pytest.mark.parametrize(
    ("argv", "attribute", "seconds"),
    [
        (
            ["--sandbox-warm-pool-readiness-grace-period=1m30s"],
            "sandbox_warm_pool_readiness_grace_period",
            90.0,
        ),
        (
            ["--sandbox-warm-pool-unschedulable-recheck-interval", "10s"],
            "sandbox_warm_pool_unschedulable_recheck_interval",
            10.0,
        ),
        (["--sandbox-write-behind-window=300ms"], "sandbox_write_behind_window", 0.3),
        (["--sandbox-status-coalesce-window=0"], "sandbox_status_coalesce_window", 0.0),
        (["--sandbox-status-coalesce-window=2s"], "sandbox_status_coalesce_window", 2.0),
        (["--sandbox-warm-pool-replenish-delay=0"], "sandbox_warm_pool_replenish_delay", 0.0),
        (["--sandbox-warm-pool-max-refill-rate=2.5"], "sandbox_warm_pool_max_refill_rate", 2.5),
    ],
)
def test_duration_and_rate_flags_parse(argv: list[str], attribute: str, seconds: float) -> None:
    assert getattr(parse_args(argv), attribute) == pytest.approx(seconds)


@pytest.mark.parametrize("value", ["5", "1x", "", "fast"])
def test_duration_flag_refuses_go_invalid_text(value: str) -> None:
    with pytest.raises(FlagError, match="parse error"):
        parse_args([f"--sandbox-warm-pool-readiness-grace-period={value}"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--sandbox-warm-pool-readiness-grace-period=0"],
            "--sandbox-warm-pool-readiness-grace-period must be a positive duration",
        ),
        (
            ["--sandbox-warm-pool-unschedulable-recheck-interval=-1s"],
            "--sandbox-warm-pool-unschedulable-recheck-interval must be a positive duration",
        ),
        (
            ["--sandbox-warm-pool-max-refill-rate=NaN"],
            "sandbox-warm-pool-max-refill-rate must be a finite value >= 0 (0 disables pacing)",
        ),
        (
            ["--sandbox-warm-pool-max-refill-rate=-1"],
            "sandbox-warm-pool-max-refill-rate must be a finite value >= 0 (0 disables pacing)",
        ),
        (
            ["--sandbox-warm-pool-max-refill-rate=+Inf"],
            "sandbox-warm-pool-max-refill-rate must be a finite value >= 0 (0 disables pacing)",
        ),
        (
            ["--sandbox-write-behind-window=-1ms"],
            "sandbox-write-behind-window must be >= 0 (0 disables write-behind coalescing)",
        ),
        (
            ["--sandbox-status-coalesce-window=-1ms"],
            "sandbox-status-coalesce-window must be >= 0 (0 writes every status change at once)",
        ),
    ],
)
def test_v056_flag_validation_messages(argv: list[str], message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        validate(parse_args(argv))
    assert caught.value.message == message


def test_grace_is_checked_before_workers() -> None:
    """Upstream's order: grace/recheck, then workers and batch size, then rate, then window."""
    options = parse_args(
        ["--sandbox-warm-pool-readiness-grace-period=0", "--sandbox-concurrent-workers=0"]
    )
    with pytest.raises(ConfigError, match="readiness-grace-period"):
        validate(options)
    options = parse_args(
        ["--sandbox-warm-pool-max-refill-rate=-1", "--sandbox-write-behind-window=-1s"]
    )
    with pytest.raises(ConfigError, match="refill-rate"):
        validate(options)


def test_duration_defaults_print_the_go_way() -> None:
    usage = build_flagset("p").usage()
    assert (
        "How long a warm pool Sandbox may stay not Ready before it is replaced. (default 5m0s)"
        in usage
    )
    assert "(default 1m0s)" in usage
    window_help = usage.split("-sandbox-write-behind-window value\n")[1].splitlines()[0]
    assert "(default" not in window_help
