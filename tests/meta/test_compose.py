"""compose.yaml stays runnable: Docker is not here, so check its shape and its commands."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import click
import yaml

from producers.cli.main import cli
from producers.gateway.metrics import GatewayMetrics
from shared.db import Store
from shared.metrics import StoreCollector
from shared.platforms import registry
from workers.metrics import WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]


def _receiver_services() -> list[str]:
    """Each registered platform's receiver service (its descriptor's `compose_service`)."""
    return [p.compose_service for p in registry.platforms().values() if p.compose_service]


def _compose() -> dict[str, Any]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert isinstance(data, dict)
    return data


def _resolve(argv: list[str]) -> click.Command:
    """Walk `hermes a b ...` down the real command tree; fail if a step does not exist."""
    ctx = click.Context(cli)
    command: click.Command = cli
    for word in argv:
        if word.startswith("-") or not isinstance(command, click.Group):
            break
        found = command.get_command(ctx, word)
        assert found is not None, f"`hermes {' '.join(argv)}`: no command {word!r}"
        command = found
    return command


def test_every_hermes_service_runs_a_real_command() -> None:
    services = _compose()["services"]
    hermes_services = {n: s for n, s in services.items() if s.get("command", [""])[0] == "hermes"}
    assert {"worker", "beat", "flower", *_receiver_services()} <= set(hermes_services)
    for name, service in hermes_services.items():
        command = _resolve(service["command"][1:])
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        for word in service["command"][1:]:
            if word.startswith("--"):
                assert word in options, f"{name}: `{word}` is not an option of its command"


def test_redis_is_durable_and_never_evicts() -> None:
    command = " ".join(_compose()["services"]["redis"]["command"])
    assert "--appendonly yes" in command
    assert "--maxmemory-policy noeviction" in command


def test_a_standby_beat_and_workers_scale() -> None:
    services = _compose()["services"]
    assert services["beat"]["deploy"]["replicas"] == 2  # one schedules, one stands by
    assert services["worker"]["deploy"]["replicas"] >= 1


def test_postgres_is_a_profile_and_flower_has_basic_auth() -> None:
    services = _compose()["services"]
    assert services["postgres"]["profiles"] == ["postgres"]
    assert "HERMES_FLOWER__BASIC_AUTH" in services["flower"]["environment"]


def test_compose_variables_are_settings_the_readme_lists() -> None:
    readme = (ROOT / "README.md").read_text()
    services = _compose()["services"]
    names = set(_compose()["x-hermes"]["environment"])
    for service in services.values():
        names |= set(service.get("environment") or {})
    for name in sorted(names):
        if not name.startswith("HERMES_"):
            continue
        key = name.removeprefix("HERMES_").lower().replace("__", ".")
        generic = key
        for platform in registry.names():
            generic = generic.replace(f".{platform}.", ".<p>.")
        listed = f"`{key}`" in readme or f"`{generic}`" in readme
        assert name == "HERMES_HOME" or listed, f"README does not list {key}"


def test_workers_carry_every_platform_credential_the_receivers_use() -> None:
    """Workers send the replies: a token only the receiver knows would fail every delivery."""
    compose = _compose()
    shared = set(compose["x-hermes"]["environment"])
    platform_vars = {name for name in shared if name.startswith("HERMES_PLATFORMS__")}
    tokens = {f"HERMES_PLATFORMS__{name.upper()}__TOKEN" for name in registry.names()}
    assert tokens <= platform_vars
    services = compose["services"]
    for name in ("worker", *_receiver_services()):
        env = set(services[name].get("environment") or shared)
        assert platform_vars <= env, f"{name} lacks {sorted(platform_vars - env)}"


def test_the_image_installs_every_platform_sdk() -> None:
    dockerfile = (ROOT / "Dockerfile").read_text()
    for extra in (*registry.names(), "flower", "postgres"):
        assert extra in dockerfile.split("pip install", 1)[1].splitlines()[0], extra


def _monitoring() -> tuple[dict[str, Any], dict[str, Any]]:
    prometheus = yaml.safe_load((ROOT / "monitoring" / "prometheus.yml").read_text())
    dashboard = json.loads(
        (ROOT / "monitoring" / "grafana" / "dashboards" / "hermes-fleet.json").read_text()
    )
    return prometheus, dashboard


def test_monitoring_is_a_profile_with_prometheus_and_grafana() -> None:
    services = _compose()["services"]
    for name in ("prometheus", "grafana"):
        assert services[name]["profiles"] == ["monitoring"]
    mounted = " ".join(services["prometheus"]["volumes"] + services["grafana"]["volumes"])
    for path in ("./monitoring/prometheus.yml", "./monitoring/grafana/dashboards"):
        assert path in mounted
        assert (ROOT / path).exists()


def test_prometheus_scrapes_the_ports_the_services_serve_metrics_on() -> None:
    services = _compose()["services"]
    prometheus, _ = _monitoring()
    jobs = {job["job_name"]: job for job in prometheus["scrape_configs"]}
    (workers,) = jobs["hermes-workers"]["dns_sd_configs"]
    assert workers["names"] == ["worker"]
    worker_env = services["worker"]["environment"]
    assert str(workers["port"]) == worker_env["HERMES_WORKERS__METRICS_PORT"]
    assert worker_env["HERMES_WORKERS__METRICS_HOST"] == "0.0.0.0"
    for target in jobs["hermes-receivers"]["static_configs"][0]["targets"]:
        name, port = target.split(":")
        command = services[name]["command"]
        assert command[command.index("--port") + 1] == port, target


def _exported(store: Store) -> set[str]:
    """Every sample name the receivers and workers can export."""
    names: set[str] = set()
    families = [
        *WorkerMetrics().registry.collect(),
        *GatewayMetrics().registry.collect(),  # type: ignore[union-attr]
        *StoreCollector(store, time.time).collect(),
    ]
    for family in families:
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
        names |= {family.name + s for s in suffixes.get(family.type, [""])}
    return names


def test_the_dashboard_asks_only_for_metrics_that_exist(store: Store) -> None:
    _, dashboard = _monitoring()
    exported = _exported(store)
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"hermes_[a-z_]+", target["expr"])
    }
    assert len(asked) >= 12
    assert asked <= exported, sorted(asked - exported)


def _env_file(name: str) -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in (ROOT / name).read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    return {key.strip(): value.strip() for key, value in pairs}


def test_one_migrate_step_runs_before_every_hermes_service() -> None:
    """The schema is upgraded once, by `migrate`, and every other hermes service starts only
    after it exited 0 (not each service upgrading at start, racing the others)."""
    services = _compose()["services"]
    migrate = services["migrate"]
    assert migrate["command"] == ["hermes", "db", "upgrade"]
    _resolve(migrate["command"][1:])
    assert migrate["restart"] == "no"
    waits = migrate["depends_on"]["postgres"]
    assert waits == {"condition": "service_healthy", "required": False}
    assert services["postgres"]["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    hermes_services = [
        name
        for name, service in services.items()
        if service.get("command", [""])[0] == "hermes" and name != "migrate"
    ]
    assert {"worker", "beat", *_receiver_services()} <= set(hermes_services)
    for name in hermes_services:
        after = services[name]["depends_on"]
        assert after["migrate"] == {"condition": "service_completed_successfully"}, name
        assert after["redis"] == {"condition": "service_healthy"}, name


def test_the_postgres_env_file_turns_on_the_profile_and_points_every_service_at_it() -> None:
    services = _compose()["services"]
    chosen = _env_file("compose.postgres.env")
    assert chosen["COMPOSE_PROFILES"] == "postgres"
    database = services["postgres"]["environment"]
    url = chosen["HERMES_DATABASE_URL"]
    user, db = database["POSTGRES_USER"], database["POSTGRES_DB"]
    assert url.startswith(f"postgresql://{user}:") and url.endswith(f"@postgres:5432/{db}"), url
    assert "${POSTGRES_PASSWORD:-hermes}" in url  # the password the postgres service got
    for name, service in services.items():
        if service.get("command", [""])[0] == "hermes":
            value = service["environment"]["HERMES_DATABASE_URL"]
            assert value.startswith("${HERMES_DATABASE_URL:-"), name
