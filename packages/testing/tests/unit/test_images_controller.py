"""The controller and gateway images ship the ``tracing`` extra: the controller's built either
way, by the Dockerfile and by the harness's own image build (the one the real-node e2e suite
deploys); the gateway's by its Dockerfile.

There is no Docker here: the Dockerfile's install command is run by ``/bin/sh`` as ``RUN``
would, with its folders moved under a temporary directory and ``python`` a stub whose venv's
``pip`` records its arguments, so the shell's reading of the command (globs, quotes, the
extra's brackets) is what is checked.
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from kube_agent_sandbox.testing.images.controller import (
    IMAGE_EXTRAS,
    IMAGE_PACKAGES,
    locked_requirements,
)

WHEELS = [
    "kube_agent_sandbox_api_types-0.1.0-py3-none-any.whl",
    "kube_agent_sandbox_controller-0.1.0-py3-none-any.whl",
    "kube_agent_sandbox_extensions-0.1.0-py3-none-any.whl",
]
GATEWAY_WHEELS = [
    "kube_agent_sandbox_api_types-0.1.0-py3-none-any.whl",
    "kube_agent_sandbox_controller-0.1.0-py3-none-any.whl",
    "kube_agent_sandbox_sdk-0.1.0-py3-none-any.whl",
    "kube_agent_sandbox_gateway-0.1.0-py3-none-any.whl",
]

# `python -m venv DIR`: a venv whose pip writes its arguments, one a line, to $PIP_ARGS.
PYTHON_STUB = """#!/bin/sh
[ "$1 $2" = "-m venv" ] || exit 0
mkdir -p "$3/bin"
printf '#!/bin/sh\\nprintf "%%s\\\\n" "$@" > "$PIP_ARGS"\\n' > "$3/bin/pip"
printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/python"
printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/agent-sandbox-controller"
printf '#!/bin/sh\\nexit 0\\n' > "$3/bin/agent-sandbox-gateway"
chmod +x "$3/bin/pip" "$3/bin/python" "$3/bin/agent-sandbox-controller" \\
    "$3/bin/agent-sandbox-gateway"
"""


@pytest.fixture
def repo(request: pytest.FixtureRequest) -> Path:
    return Path(request.config.rootpath)


def install_command(dockerfile: Path) -> str:
    """The ``RUN`` instruction that pip-installs the wheels (continuation lines joined)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    runs = [line[4:] for line in text.splitlines() if line.startswith("RUN ")]
    (command,) = [run for run in runs if "pip install" in run]
    return command


@pytest.mark.parametrize(
    ("dockerfile", "wheels", "extra_on"),
    [
        ("Dockerfile", WHEELS, 1),
        ("packages/gateway/Dockerfile", GATEWAY_WHEELS, 3),
    ],
    ids=["controller", "gateway"],
)
def test_the_dockerfile_installs_its_package_with_the_tracing_extra(
    repo: Path, tmp_path: Path, dockerfile: str, wheels: list[str], extra_on: int
) -> None:
    folder, venv, stubs = tmp_path / "wheels", tmp_path / "venv", tmp_path / "stubs"
    for made in (folder, stubs):
        made.mkdir()
    for wheel in wheels:
        (folder / wheel).touch()
    (stubs / "python").write_text(PYTHON_STUB)
    (stubs / "python").chmod(0o755)
    command = (
        install_command(repo / dockerfile)
        .replace("/wheels/", f"{folder}/")
        .replace("/opt/agent-sandbox", str(venv))
    )
    args = tmp_path / "pip-args"
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "PIP_ARGS": str(args)}
    subprocess.run(["/bin/sh", "-c", command], env=env, check=True, timeout=60)
    expected = [f"{folder}/{wheel}" for wheel in wheels]
    expected[extra_on] += "[tracing]"
    assert args.read_text().splitlines() == ["install", *expected]


def test_the_extras_exist_in_the_controllers_package(repo: Path) -> None:
    pyproject = tomllib.loads((repo / "packages/controller/pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    assert set(IMAGE_EXTRAS) <= set(extras)
    assert any(req.startswith("opentelemetry-sdk") for req in extras["tracing"])


def test_the_gateways_tracing_extra_brings_the_controllers(repo: Path) -> None:
    gateway = tomllib.loads((repo / "packages/gateway/pyproject.toml").read_text())
    (requirement,) = gateway["project"]["optional-dependencies"]["tracing"]
    assert requirement.startswith("kube-agent-sandbox-controller[tracing]")


def test_the_harness_image_installs_opentelemetry_with_the_extra(repo: Path) -> None:
    def pinned(requirements: str) -> set[str]:
        return set(re.findall(r"^([a-z0-9_.-]+)==", requirements, flags=re.MULTILINE))

    with_extra = pinned(locked_requirements(repo, packages=IMAGE_PACKAGES, extras=IMAGE_EXTRAS))
    without = pinned(locked_requirements(repo, packages=IMAGE_PACKAGES))
    tracing = {"opentelemetry-sdk", "opentelemetry-exporter-otlp-proto-grpc", "grpcio"}
    assert tracing <= with_extra
    assert not tracing & without
