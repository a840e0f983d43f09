"""Component flags merge by name: a later value replaces an earlier one, each flag once."""

from __future__ import annotations

import pytest

from kube_agent_sandbox.testing.clusteroptions import LocalClusterOptions
from kube_agent_sandbox.testing.flags import check_flags, flag_name, merge_flags

HARNESS = [
    "--advertise-address=127.0.0.1",
    "--secure-port=6443",
    "--endpoint-reconciler-type=none",
    "--profiling=false",
]


def test_flag_names() -> None:
    assert flag_name("--secure-port=6443") == "secure-port"
    assert flag_name("--allow-privileged") == "allow-privileged"
    assert flag_name("--feature-gates=A=true,B=false") == "feature-gates"
    assert flag_name("--v=") == "v"


def test_real_node_overrides_replace_the_harness_flags_in_place() -> None:
    real_node = [
        "--advertise-address=10.88.0.1",
        "--endpoint-reconciler-type=lease",
        "--kubelet-preferred-address-types=InternalIP",
    ]
    assert merge_flags(HARNESS, real_node) == [
        "--advertise-address=10.88.0.1",
        "--secure-port=6443",
        "--endpoint-reconciler-type=lease",
        "--profiling=false",
        "--kubelet-preferred-address-types=InternalIP",
    ]


def test_the_last_value_wins_within_and_across_groups() -> None:
    merged = merge_flags(["--a=1", "--b=1", "--a=2"], ["--b=2", "--c"], ["--c=false"])
    assert merged == ["--a=2", "--b=2", "--c=false"]


def test_a_flag_differs_from_a_longer_flag_with_the_same_prefix() -> None:
    merged = merge_flags(["--service-account-key-file=a"], ["--service-account-key-file-x=b"])
    assert merged == ["--service-account-key-file=a", "--service-account-key-file-x=b"]


def test_merging_nothing_keeps_the_flags() -> None:
    assert merge_flags(HARNESS) == HARNESS
    assert merge_flags(HARNESS, []) == HARNESS
    assert merge_flags() == []


@pytest.mark.parametrize(
    "bad",
    ["value", "-v=4", "--", "--=x", "---x", "--a b", "", "--\tx=1"],
)
def test_malformed_flags_are_refused(bad: str) -> None:
    with pytest.raises(ValueError, match="not a --name"):
        flag_name(bad)
    with pytest.raises(ValueError, match="not a --name"):
        merge_flags(HARNESS, [bad])
    with pytest.raises(ValueError, match="apiserver_args: not a --name"):
        LocalClusterOptions(apiserver_args=["--ok=1", bad])


def test_the_separate_value_form_is_refused() -> None:
    with pytest.raises(ValueError, match="'6443'"):
        check_flags(["--secure-port", "6443"], what="apiserver_args")


def test_a_single_string_is_refused() -> None:
    with pytest.raises(TypeError, match="not a single string"):
        check_flags("--a=1", what="apiserver_args")
    with pytest.raises(TypeError, match="apiserver_args must be a sequence"):
        LocalClusterOptions(apiserver_args="--profiling=true")


def test_options_accept_well_formed_flags() -> None:
    options = LocalClusterOptions(apiserver_args=("--a=1", "--b", "--a=2"))
    assert list(options.apiserver_args) == ["--a=1", "--b", "--a=2"]
