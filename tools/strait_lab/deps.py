"""Installs and checks what the lab needs outside Python: Java, Kafka jars, redis-server, prometheus,
and the replicator's native copy loop (its compiler and librdkafka's headers).

Jar sets are resolved by Maven from Maven Central into the git-ignored cache, once per pom change;
binaries come from the OS packages when missing. Run as ``python -m strait_lab.deps`` (the
Makefile does) or call the ``ensure_*`` functions. Each failure is one line naming cause and fix.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
from importlib import resources
from pathlib import Path

from strait.errors import StraitError
from strait.paths import cache_dir
from strait_lab.errors import SetupError

log = logging.getLogger(__name__)

# kafka-3.9 and kafka-2.4 are the ZooKeeper-mode brokers of compatibility clusters, resolved on demand
# when such a cluster starts (strait_lab.kafka), so `make deps` does not wait for them.
JAR_SETS = {"kafka": "kafka-pom.xml", "kafka-3.9": "kafka-3.9-pom.xml", "kafka-2.4": "kafka-2.4-pom.xml",
            "mm2": "mm2-pom.xml", "spark-kafka": "spark-kafka-pom.xml"}
_STAMP = ".resolved"

# Binary name -> Debian package that provides it.
SYSTEM_PACKAGES = {
    "java": "openjdk-17-jre-headless",
    "javac": "openjdk-17-jdk-headless",
    "mvn": "maven",
    "redis-server": "redis-server",
    "prometheus": "prometheus",
    "promtool": "prometheus",
    "gcc": "gcc",
}
# What the native copy loop (spark/strait_replicator/_copyloop.c) includes beyond Python's headers.
LIBRDKAFKA_HEADER = Path("/usr/include/librdkafka/rdkafka.h")
NATIVE = "native"


def jars_dir(name: str) -> Path:
    """The folder of one resolved jar set, e.g. ``kafka`` or ``mm2``."""
    return cache_dir() / "jars" / name


def _pom_path(name: str) -> Path:
    if name not in JAR_SETS:
        raise SetupError(f"unknown jar set {name!r}; known: {', '.join(sorted(JAR_SETS))}")
    return Path(str(resources.files("strait_lab") / "java" / JAR_SETS[name]))


def _pom_digest(pom: Path) -> str:
    return hashlib.sha256(pom.read_bytes()).hexdigest()


def jars_ready(name: str) -> bool:
    """True when the jar set was resolved from the current pom."""
    stamp = jars_dir(name) / _STAMP
    return stamp.exists() and stamp.read_text().strip() == _pom_digest(_pom_path(name))


def ensure_jars(name: str) -> Path:
    """Resolve a jar set with Maven unless already resolved from the same pom; return its folder."""
    target = jars_dir(name)
    if jars_ready(name):
        return target
    ensure_binary("mvn")
    pom = _pom_path(name)
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    log.info("resolving jar set=%s from Maven Central into %s", name, target)
    cmd = [
        "mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(pom), "dependency:copy-dependencies",
        f"-DoutputDirectory={target}", "-DincludeScope=runtime",
    ]
    settings = os.environ.get("STRAIT_MAVEN_SETTINGS")
    if settings:  # a corporate mirror or proxy: Maven's own settings.xml format
        cmd += ["-s", settings]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        detail = _maven_failure(proc.stdout + proc.stderr)
        raise SetupError(
            f"Maven could not resolve the {name} jars ({detail}); check that Maven Central is "
            f"reachable (proxy settings in ~/.m2/settings.xml) and run `make deps` again"
        )
    (target / _STAMP).write_text(_pom_digest(pom))
    return target


def _maven_failure(output: str) -> str:
    for line in output.splitlines():
        if "[ERROR]" in line and ("Could not" in line or "Failed" in line or "resolve" in line):
            return re.sub(r"\s+", " ", line.replace("[ERROR]", "")).strip()[:300]
    return "exit code non-zero, no error line"


def classpath(name: str) -> str:
    """The Java class path of a resolved jar set; fails with what to run when it is missing."""
    if not jars_ready(name):
        raise SetupError(f"the {name} jars are not resolved yet: run `make deps` (or `make test`) first")
    return str(jars_dir(name) / "*")


_VERSIONED_JAR = re.compile(r"^(?P<artifact>.+?)-\d[\w.]*\.jar$")


def _artifact(jar: Path) -> str:
    match = _VERSIONED_JAR.match(jar.name)
    return match.group("artifact") if match else jar.stem


def spark_kafka_jars() -> list[str]:
    """Spark's Kafka connector jars beyond those pyspark ships (one copy of each library on the class path)."""
    import pyspark

    folder = ensure_jars("spark-kafka")
    shipped = {_artifact(jar) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}
    return sorted(str(jar) for jar in folder.glob("*.jar") if _artifact(jar) not in shipped)


def java_major_version() -> int:
    """The major version of the `java` on PATH; raises when Java is missing."""
    java = shutil.which("java")
    if java is None:
        raise SetupError(
            "Java is not installed, and Kafka brokers need Java 17 or newer: "
            "run `apt-get install openjdk-17-jre-headless` or `make deps`"
        )
    out = subprocess.run([java, "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise SetupError(f"cannot read the Java version from `java -version`: {out.strip()[:200]}")
    major = int(match.group(1))
    return int(match.group(2)) if major == 1 and match.group(2) else major


def ensure_java() -> None:
    """Raise unless Java 17 or newer is on PATH."""
    major = java_major_version()
    if major < 17:
        raise SetupError(f"Java {major} found on PATH, but Kafka 4 needs Java 17 or newer: install openjdk-17")


def ensure_binary(binary: str) -> str:
    """The path of a binary from SYSTEM_PACKAGES, installing its Debian package when missing."""
    found = shutil.which(binary)
    if found:
        return found
    package = SYSTEM_PACKAGES[binary]
    _apt_install([package])
    found = shutil.which(binary)
    if not found:
        raise SetupError(f"{binary} is still missing after installing the {package} package")
    return found


def ensure_system_packages() -> None:
    """Install every missing binary's Debian package in one apt run."""
    missing = sorted({pkg for binary, pkg in SYSTEM_PACKAGES.items() if shutil.which(binary) is None})
    if missing:
        _apt_install(missing)
    ensure_java()


def _apt_install(packages: list[str]) -> None:
    if shutil.which("apt-get") is None:
        raise SetupError(f"missing {', '.join(packages)} and no apt-get here: install them with your package manager")
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    log.info("installing Debian packages %s", " ".join(packages))
    for cmd in (sudo + ["apt-get", "update", "-qq"], sudo + ["apt-get", "install", "-y", "-qq", *packages]):
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            last = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
            raise SetupError(
                f"`{' '.join(cmd)}` failed ({last[0][:200]}); install {', '.join(packages)} by hand "
                f"or run as root"
            )
    # Debian's packages start their daemons where an init system runs; the lab runs its own.
    for service in ("redis-server", "prometheus"):
        if service in packages:
            subprocess.run(sudo + ["service", service, "stop"], capture_output=True)


def ensure_native_loop() -> None:
    """Build the replicator's copy loop when it is missing or older than its C source (an editable
    install: ``pip install -e .`` again, which compiles it), after installing librdkafka's headers
    when they are missing; raise unless it then loads."""
    import sysconfig

    if not LIBRDKAFKA_HEADER.exists():
        _apt_install(["librdkafka-dev"])
    if not (Path(sysconfig.get_paths()["include"]) / "Python.h").exists():
        _apt_install(["python3-dev"])
    if _native_loop_stale():
        log.info("building the native copy loop (pip install -e .)")
        root = Path(__file__).resolve().parents[2]
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                               "--no-deps", "-e", str(root)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise SetupError(f"building the native copy loop failed: {(proc.stderr or proc.stdout).strip()[-600:]}")
    try:
        from strait_replicator.native import native_copy_class

        native_copy_class()
    except StraitError as exc:
        raise SetupError(f"{exc} (gcc and {LIBRDKAFKA_HEADER} were there: see pip's build output)") from exc


def _native_loop_stale() -> bool:
    """Whether the copy loop's extension is missing, or older than the C source beside it."""
    import importlib.util

    import strait_replicator

    source = Path(strait_replicator.__file__).with_name("_copyloop.c")
    spec = importlib.util.find_spec("strait_replicator._copyloop")
    if spec is None or spec.origin is None:
        return True
    return source.exists() and source.stat().st_mtime > Path(spec.origin).stat().st_mtime


def main(argv: list[str] | None = None) -> int:
    """Command line: ``python -m strait_lab.deps [system] [spark] [NAME ...]`` (NAME: a jar set)."""
    parser = argparse.ArgumentParser(prog="python -m strait_lab.deps", description=__doc__)
    parser.add_argument("what", nargs="*", default=["system", "kafka"],
                        help="`system` for OS packages, `native` for the replicator's copy loop, `spark` for the "
                             "Spark driver's class archive, or a jar set name (kafka, mm2, kafka-3.9, ...)")
    args = parser.parse_args(argv)
    from strait_lab import class_archive  # it starts a broker: strait_lab.kafka imports this module

    logging.basicConfig(level="INFO", format="%(message)s")
    try:
        for item in args.what:
            if item == "system":
                ensure_system_packages()
            elif item == NATIVE:
                ensure_native_loop()
            elif item == class_archive.SPARK:
                class_archive.ensure_archive(class_archive.SPARK)
            else:
                print(f"jars {item}: {ensure_jars(item)}")
                if item == class_archive.KAFKA:
                    class_archive.ensure_archive(class_archive.KAFKA)
    except StraitError as exc:
        print(f"strait: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
