"""deploy/: every manifest parses, fits together, and uses only documented, validated settings.

No container runtime runs here; ``test_deploy_install`` (integration) runs the image's install
steps in a fresh venv instead.
"""

import os
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from compact_hook.proxy.request.models import validate_model_list
from compact_hook.settings.model import CompactConfig

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
DOCS = "\n".join(
    (ROOT / name).read_text(encoding="utf-8")
    for name in ("README.md", "docs/configuration.md", "docs/operations.md")
)
ENV_NAME = re.compile(r"\b((?:COMPACT|REDIS|LITELLM|OPENAI|ANTHROPIC)_[A-Z_]+)\b")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc]


def k8s() -> dict[tuple[str, str], dict[str, Any]]:
    found = {}
    for path in sorted((DEPLOY / "k8s").glob("*.yaml")):
        for doc in documents(path):
            found[(doc["kind"], doc.get("metadata", {}).get("name", ""))] = doc
    return found


def health_routes() -> set[str]:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from litellm.proxy.health_endpoints._health_endpoints import router

    return {route.path for route in router.routes}  # type: ignore[attr-defined]


def test_the_proxy_deployment_has_replicas_probes_and_resources() -> None:
    manifests = k8s()
    deployment = manifests[("Deployment", "compact-hook")]
    assert deployment["spec"]["replicas"] >= 2
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    routes = health_routes()
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"]["path"] in routes
    assert container["resources"]["requests"]["cpu"] and container["resources"]["requests"]["memory"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert manifests[("Service", "compact-hook")]["spec"]["selector"].items() <= labels.items()
    assert (
        manifests[("PodDisruptionBudget", "compact-hook")]["spec"]["selector"]["matchLabels"].items()
        <= labels.items()
    )
    assert ("Deployment", "compact-hook-redis") in manifests and (
        "Service",
        "compact-hook-redis",
    ) in manifests
    redis_host = {e["name"]: e.get("value") for e in container["env"]}["REDIS_HOST"]
    assert redis_host == "compact-hook-redis"
    kustomized = set(documents(DEPLOY / "k8s" / "kustomization.yaml")[0]["resources"])
    assert kustomized == {path.name for path in (DEPLOY / "k8s").glob("*.yaml")} - {"kustomization.yaml"}


@pytest.mark.parametrize("source", ["configmap", "compose"])
def test_the_proxy_configs_pass_the_proxys_own_validation(source: str) -> None:
    if source == "configmap":
        text = k8s()[("ConfigMap", "compact-hook-config")]["data"]["litellm_config.yaml"]
    else:
        text = (DEPLOY / "litellm_config.yaml").read_text(encoding="utf-8")
    config = yaml.safe_load(text)
    assert validate_model_list(config["model_list"], CompactConfig())
    assert "compact_hook.proxy_handler_instance" in config["litellm_settings"]["callbacks"]


def test_compose_runs_two_replicas_behind_a_balancer_with_redis_and_health_checks() -> None:
    [compose] = documents(DEPLOY / "compose.yaml")
    services = compose["services"]
    assert {"proxy-1", "proxy-2", "lb", "redis", "standin"} <= set(services)
    assert all("healthcheck" in service for service in services.values())
    assert services["proxy-1"]["environment"]["REDIS_HOST"] == "redis"
    nginx = (DEPLOY / "nginx.conf").read_text()
    assert "server proxy-1:4000" in nginx and "server proxy-2:4000" in nginx
    assert "health/liveliness" in str(services["proxy-1"]["healthcheck"]["test"])


def test_every_setting_the_deploy_files_use_is_documented_in_the_readme() -> None:
    names = set()
    for path in DEPLOY.rglob("*"):
        if path.is_file() and "__pycache__" not in path.parts:  # the bytecode a test may leave
            names |= set(ENV_NAME.findall(path.read_text(encoding="utf-8")))
    assert names and {"COMPACT_METRICS_PORT", "REDIS_HOST"} <= names
    undocumented = sorted(name for name in names if name not in DOCS)
    assert not undocumented, f"deploy/ uses settings the docs do not document: {undocumented}"
    assert "## Deploying" in DOCS


def test_the_dockerfile_copies_paths_that_exist_and_loads_the_tokenizers() -> None:
    dockerfile = (DEPLOY / "Dockerfile").read_text(encoding="utf-8")
    for line in dockerfile.splitlines():
        if line.startswith("COPY "):
            for source in line.split()[1:-1]:
                assert (ROOT / source).exists(), source
    assert "load_tokenizer" in dockerfile and "litellm" in dockerfile.split("CMD")[-1]
