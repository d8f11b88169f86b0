"""A Docker engine, the Compose v2 CLI and base images for the compose lab's tests, on a machine
that may have none of them and reaches no image registry.

- The engine: Debian's docker.io, installed and started by this module when none answers (root).
- Compose v2: the CLI plugin of Debian's package (trixie's, a static binary: bookworm ships only
  Compose 1), checked against its pinned SHA-256; when that file is gone from the mirror, built from
  its Go module (``go build ./cmd``, about 100 s of both cores). Either goes into the cache and is
  used through ``DOCKER_CONFIG``, so nothing is installed system-wide.
- Base images: the official image when it is here or can be pulled, else a stand-in made from
  Debian's packages (debootstrap, then ``docker import``) that trusts this machine's CAs.
"""

from __future__ import annotations

import hashlib
import http.client
import logging
import os
import shutil
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from strait.paths import cache_dir, repo_root

log = logging.getLogger(__name__)

COMPOSE_MODULE = "github.com/docker/compose/v2"
COMPOSE_VERSION = "v2.40.3"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
COMPOSE_DEB = "pool/main/d/docker-compose/docker-compose_2.26.1-4_amd64.deb"  # Debian trixie's
COMPOSE_DEB_SHA256 = "47681197cb2b1ab88206b42a1a92fc75f50d9530a6322d03494a473eed0408ea"
COMPOSE_DEB_PLUGIN = "usr/libexec/docker/cli-plugins/docker-compose"
STANDIN_PACKAGES = (
    "python3", "python3-venv", "python3-pip", "ca-certificates", "ca-certificates-java",
    "openjdk-17-jdk-headless", "maven", "redis-server", "redis-tools", "prometheus", "wget", "procps",
)
STANDIN_BASE = f"strait-standin/debian:{DEBIAN_SUITE}"
STANDIN_DOCKERFILE = Path(__file__).with_name("standins.Dockerfile")
PULL_TIMEOUT = 30.0


class EngineUnavailable(RuntimeError):
    """No Docker engine answers and this process cannot start one; the message says why."""


@dataclass(frozen=True)
class BaseImage:
    """One base image the compose lab needs: its variable, the official image and its stand-in target."""

    variable: str
    official: str
    standin_target: str


BASE_IMAGES = (
    BaseImage("PYTHON_IMAGE", "python:3.12.11-slim-bookworm", "python"),
    BaseImage("MAVEN_IMAGE", "maven:3.9.11-eclipse-temurin-17", "maven"),
    BaseImage("JRE_IMAGE", "eclipse-temurin:17-jre", "jre"),
    BaseImage("REDIS_IMAGE", "redis:7.4.2-alpine", "redis"),
    BaseImage("PROMETHEUS_IMAGE", "prom/prometheus:v3.5.0", "prometheus"),
)


@dataclass
class DockerHost:
    """The engine and CLI this test session uses; ``env`` is the environment for every docker call."""

    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    started: subprocess.Popen[bytes] | None = None
    setup_seconds: float = 0.0  # installing, starting and building what was missing

    def run(self, *args: str, timeout: float = 600.0, check: bool = True,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        """Run ``docker ARGS`` (with ``env`` added to the host's); a failure with ``check`` raises with
        the command's output."""
        proc = subprocess.run(["docker", *args], env={**self.env, **(env or {})}, capture_output=True,
                              timeout=timeout)
        result = subprocess.CompletedProcess(proc.args, proc.returncode, proc.stdout.decode(errors="replace"),
                                             proc.stderr.decode(errors="replace"))
        if check and result.returncode != 0:
            raise RuntimeError(f"docker {' '.join(args)} failed ({result.returncode}):\n"
                               f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        return result

    def stop(self) -> None:
        """Stop the engine if this session started it."""
        if self.started is not None and self.started.poll() is None:
            self.started.terminate()
            try:
                self.started.wait(30)
            except subprocess.TimeoutExpired:
                self.started.kill()
                self.started.wait(10)


def docker_host() -> DockerHost:
    """An answering engine and a Compose v2 CLI (both set up when missing); raises EngineUnavailable."""
    workdir = cache_dir() / "docker"
    workdir.mkdir(parents=True, exist_ok=True)
    if shutil.which("docker") is None and os.geteuid() != 0:
        raise EngineUnavailable("no docker command here and installing one needs root")
    host = DockerHost(workdir, {**os.environ, "DOCKER_CONFIG": str(workdir / "config")})
    if host.run("info", check=False, timeout=30).returncode != 0:
        host.started = _start_engine(host)
    _ensure_compose(host)
    return host


def _start_engine(host: DockerHost) -> subprocess.Popen[bytes]:
    if os.geteuid() != 0:
        raise EngineUnavailable("no Docker engine answers and starting one (dockerd) needs root: start dockerd, "
                                "or run the compose tests as root")
    if shutil.which("dockerd") is None or shutil.which("debootstrap") is None:
        _apt_install("docker.io", "debootstrap")
    _remove_stale_pid_file(Path("/var/run/docker.pid"))
    log_path = host.workdir / "dockerd.log"
    log.info("starting dockerd log=%s", log_path)
    with open(log_path, "ab") as out:
        process = subprocess.Popen(["dockerd"], stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 60
    while host.run("info", check=False, timeout=30).returncode != 0:
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            raise EngineUnavailable(f"dockerd did not answer within 60 s; see {log_path}")
        time.sleep(1)
    return process


def _remove_stale_pid_file(pid_file: Path) -> None:
    """A dockerd that died with its machine leaves its pid file, and a new one refuses to start."""
    try:
        pid = int(pid_file.read_text().strip() or 0)
    except (OSError, ValueError):
        return
    try:
        if Path(f"/proc/{pid}/comm").read_text().strip() == "dockerd":
            return  # a live dockerd has it: its own refusal then says what to do
    except OSError:
        pass  # no such process
    log.info("removing dockerd's stale pid file %s (pid %s is gone)", pid_file, pid)
    pid_file.unlink(missing_ok=True)


def _apt_install(*packages: str) -> None:
    log.info("installing %s from Debian's packages", " ".join(packages))
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-q"],
                    ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]):
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise EngineUnavailable(f"`{' '.join(command)}` failed ({done.returncode}): "
                                    f"{(done.stderr or done.stdout).strip().splitlines()[-1:]}")


def _ensure_compose(host: DockerHost) -> None:
    """Compose v2 as a CLI plugin in DOCKER_CONFIG (a system-wide one is used when present)."""
    if host.run("compose", "version", check=False, timeout=30).returncode == 0:
        return
    plugin = host.workdir / "config" / "cli-plugins" / "docker-compose"
    plugin.parent.mkdir(parents=True, exist_ok=True)
    if not (_compose_from_debian(host, plugin) and host.run("compose", "version", check=False, timeout=30).returncode == 0):
        _build_compose(host, plugin)  # no package, or its binary does not run here (another architecture)
    host.run("compose", "version", timeout=30)


def _compose_from_debian(host: DockerHost, plugin: Path) -> bool:
    """Debian's Compose v2 plugin into ``plugin``; False (logged) when it cannot be had as pinned."""
    url = f"{DEBIAN_MIRROR}/{COMPOSE_DEB}"
    try:
        with urllib.request.urlopen(url, timeout=120) as response:
            package = response.read()
    except (OSError, http.client.HTTPException) as exc:  # unreachable, gone, or cut short
        log.info("no docker compose package at %s (%s): building it instead", url, exc)
        return False
    if hashlib.sha256(package).hexdigest() != COMPOSE_DEB_SHA256:
        log.warning("%s does not match its pinned SHA-256: building docker compose instead", url)
        return False
    unpacked = host.workdir / "compose-deb"
    shutil.rmtree(unpacked, ignore_errors=True)
    unpacked.mkdir()
    (unpacked / "package.deb").write_bytes(package)
    unpacking = subprocess.run(["dpkg-deb", "-x", "package.deb", "."], cwd=unpacked, capture_output=True,
                               timeout=120)
    if unpacking.returncode != 0 or not (unpacked / COMPOSE_DEB_PLUGIN).is_file():
        log.warning("unpacking %s failed: building docker compose instead", url)
        return False
    shutil.copy2(unpacked / COMPOSE_DEB_PLUGIN, plugin)
    shutil.rmtree(unpacked, ignore_errors=True)
    log.info("docker compose from Debian's package %s", COMPOSE_DEB)
    return True


def _build_compose(host: DockerHost, plugin: Path) -> None:
    log.info("building docker compose %s from its Go module", COMPOSE_VERSION)
    listed = subprocess.run(["go", "mod", "download", "-json", f"{COMPOSE_MODULE}@{COMPOSE_VERSION}"],
                            capture_output=True, text=True, check=True, timeout=900, cwd=host.workdir)
    source = Path(_json_field(listed.stdout, "Dir"))
    build = host.workdir / "compose-src"
    shutil.rmtree(build, ignore_errors=True)
    shutil.copytree(source, build)
    for path in build.rglob("*"):  # the module cache is read-only
        path.chmod(path.stat().st_mode | 0o200)
    subprocess.run(["go", "build", "-o", str(plugin), "./cmd"], cwd=build, check=True, capture_output=True,
                   timeout=1800)
    shutil.rmtree(build, ignore_errors=True)


def _json_field(text: str, name: str) -> str:
    import json

    return str(json.loads(text)[name])


def base_images(host: DockerHost) -> dict[str, str]:
    """Variable -> image for every base of the compose lab: the official one when here or pullable,
    else its stand-in (built once per engine)."""
    chosen: dict[str, str] = {}
    for base in BASE_IMAGES:
        if _present(host, base.official) or _pulled(host, base.official):
            chosen[base.variable] = base.official
            continue
        tag = f"strait-standin/{base.standin_target}:{DEBIAN_SUITE}"
        if not _present(host, tag):
            _build_standin(host, base.standin_target, tag)
        chosen[base.variable] = tag
    return chosen


def _present(host: DockerHost, image: str) -> bool:
    return host.run("image", "inspect", image, check=False, timeout=30).returncode == 0


def _pulled(host: DockerHost, image: str) -> bool:
    try:
        return host.run("pull", "-q", image, check=False, timeout=PULL_TIMEOUT).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def _build_standin(host: DockerHost, target: str, tag: str) -> None:
    if not _present(host, STANDIN_BASE):
        _import_debian(host)
    host.run("build", "-q", "-f", str(STANDIN_DOCKERFILE), "--build-arg", f"BASE={STANDIN_BASE}",
             "--target", target, "-t", tag, str(STANDIN_DOCKERFILE.parent), timeout=900)
    log.info("built stand-in base image %s", tag)


def _import_debian(host: DockerHost) -> None:
    """A Debian root file system with every stand-in's packages, imported as one image."""
    if shutil.which("debootstrap") is None:
        if os.geteuid() != 0:
            raise EngineUnavailable("no official base image can be pulled and building stand-ins needs "
                                    "debootstrap (root)")
        _apt_install("debootstrap")
    rootfs = host.workdir / "standin-rootfs"
    shutil.rmtree(rootfs, ignore_errors=True)
    log.info("debootstrap %s into %s", DEBIAN_SUITE, rootfs)
    subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(STANDIN_PACKAGES)}", DEBIAN_SUITE,
                    str(rootfs), DEBIAN_MIRROR], check=True, capture_output=True, timeout=1800)
    # this machine's own CAs (a TLS-inspecting egress, say): the stand-ins reach PyPI and Maven with them
    local_cas = Path("/usr/local/share/ca-certificates")
    if local_cas.is_dir():
        shutil.copytree(local_cas, rootfs / "usr/local/share/ca-certificates", dirs_exist_ok=True)
    for package in (rootfs / "var/cache/apt/archives").glob("*.deb"):
        package.unlink()
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    imported = subprocess.run(["docker", "import", "-", STANDIN_BASE], stdin=tar.stdout, env=host.env,
                              capture_output=True, timeout=900)
    tar.wait()
    if imported.returncode != 0:
        raise RuntimeError(f"docker import failed: {imported.stderr.decode(errors='replace')}")
    shutil.rmtree(rootfs, ignore_errors=True)


def compose_file() -> Path:
    """The compose lab's file."""
    return repo_root() / "compose" / "compose.yml"
