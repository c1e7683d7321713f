"""The checks of deploy/check that need Python (run from the repository root).

    python deploy/checks.py context     every Dockerfile COPY source exists, every package
                                        pyproject.toml installs is copied, and
                                        Dockerfile.dockerignore lets all of it into the context
    python deploy/checks.py lock        requirements.lock pins every dependency of pyproject.toml
                                        at a version its specifier allows
    python deploy/checks.py manifests   print the plain Kubernetes manifests under deploy/k8s,
                                        one path a line (not kustomizations, not patches)
    python deploy/checks.py configs [--rendered KUSTOMIZATION_DIR=RENDERED_YAML ...]
                                        load every routefit config the deployment files use with
                                        routefit's own loader (proxy.config.load_config)

``configs`` loads: the file deploy/compose.yaml mounts into the routefit service; every file a
kustomization's configMapGenerator names; and, for each ``--rendered`` output of
``kubectl kustomize``, every ConfigMap with a ``routefit.yaml`` key, with the environment the
rendered Deployment that mounts it provides. ``os.environ/NAME`` references resolve to the
value the deployment gives (a literal ``value``) or to a placeholder; a reference that the
deployment does not provide at all, a config warning (an unknown or misspelt key) and a config
without ``redis_url`` (replicas and workers must share one store) are failures.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
ENV_PREFIX = "os.environ/"
CONFIG_KEY = "routefit.yaml"


class CheckFailed(Exception):
    pass


# ---- Dockerfile context ---------------------------------------------------------------------


def _glob_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go filepath.Match plus ``**``) as a regex on /-separated paths."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[":
            end = pattern.index("]", i)
            out.append(pattern[i : end + 1])
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def dockerignore_rules(path: Path) -> list[tuple[bool, re.Pattern[str]]]:
    rules = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = os.path.normpath(line[1:] if negate else line).lstrip("/")
        rules.append((negate, _glob_regex(pattern)))
    return rules


def ignored(rel: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for negate, rx in rules:
        if any(rx.match(p) for p in prefixes):
            result = not negate
    return result


def dockerfile_copy_sources(dockerfile: Path) -> list[str]:
    """Sources of every COPY/ADD from the build context (not ``--from=``)."""
    text = re.sub(r"\\\n", " ", dockerfile.read_text())
    sources = []
    for line in text.splitlines():
        words = line.split()
        if not words or words[0].upper() not in ("COPY", "ADD"):
            continue
        args = words[1:]
        if any(a.startswith("--from") for a in args):
            continue
        args = [a for a in args if not a.startswith("--")]
        sources.extend(args[:-1])
    return sources


def context_files(source: str) -> Iterator[str]:
    path = ROOT / source
    if path.is_file():
        yield source
        return
    for dirpath, dirnames, filenames in os.walk(path):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            if not name.endswith((".pyc", ".pyo")):
                yield str((Path(dirpath) / name).relative_to(ROOT))


def check_context() -> None:
    dockerfile = DEPLOY / "Dockerfile"
    rules = dockerignore_rules(DEPLOY / "Dockerfile.dockerignore")
    sources = dockerfile_copy_sources(dockerfile)
    problems = []
    for source in sources:
        if not (ROOT / source).exists():
            problems.append(f"COPY source {source} does not exist")
            continue
        kept = [f for f in context_files(source) if not ignored(f, rules)]
        dropped = [f for f in context_files(source) if ignored(f, rules)]
        if not kept:
            problems.append(f"COPY source {source}: Dockerfile.dockerignore excludes all of it")
        elif dropped:
            problems.append(f"COPY source {source}: Dockerfile.dockerignore excludes {dropped[:5]}")
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    includes = pyproject["tool"]["setuptools"]["packages"]["find"]["include"]
    for pattern in includes:
        package = pattern.rstrip("*").rstrip(".")
        if package not in sources:
            problems.append(f"package {package!r} (pyproject.toml) is not copied by the Dockerfile")
    for needed in ("pyproject.toml", "README.md"):
        if needed not in sources:
            problems.append(f"{needed} is needed to build the wheel but not copied")
    if problems:
        raise CheckFailed("deploy/Dockerfile context:\n  " + "\n  ".join(problems))
    print(f"ok: Dockerfile context: {len(sources)} COPY sources, all inside the build context")


# ---- the lock -------------------------------------------------------------------------------


def required_pins(dependencies: list[str]) -> list[tuple[str, Any]]:
    """(requirement text, Requirement) for every dependency and every extra it asks for.

    An extra (``redis[hiredis]``) adds the requirements the installed distribution declares for
    it (importlib.metadata of the current environment, where routefit is installed).
    """
    from importlib.metadata import PackageNotFoundError, requires

    from packaging.requirements import Requirement

    out = []
    for spec in dependencies:
        req = Requirement(spec)
        out.append((spec, req))
        for extra in sorted(req.extras):
            try:
                declared = requires(req.name) or []
            except PackageNotFoundError:
                raise CheckFailed(
                    f"{req.name} is not installed: cannot resolve [{extra}]"
                ) from None
            for line in declared:
                sub = Requirement(line)
                if sub.marker is not None and sub.marker.evaluate({"extra": extra}):
                    out.append((f"{line} (from {req.name}[{extra}])", sub))
    return out


def check_lock() -> None:
    from packaging.utils import canonicalize_name
    from packaging.version import Version

    pins: dict[str, Version] = {}
    for raw in (DEPLOY / "requirements.lock").read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        if not sep:
            raise CheckFailed(f"deploy/requirements.lock: {line!r} is not pinned with ==")
        pins[canonicalize_name(name)] = Version(version)
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    problems = []
    needed = required_pins(pyproject["project"]["dependencies"])
    for spec, req in needed:
        pinned = pins.get(canonicalize_name(req.name))
        if pinned is None:
            problems.append(f"{req.name} is not in the lock ({spec})")
        elif not req.specifier.contains(pinned, prereleases=True):
            problems.append(f"{req.name}=={pinned} does not satisfy {spec!r}")
    if problems:
        raise CheckFailed("deploy/requirements.lock vs pyproject.toml:\n  " + "\n  ".join(problems))
    print(f"ok: requirements.lock pins all {len(needed)} dependencies and extras of pyproject.toml")


# ---- Kubernetes manifests -------------------------------------------------------------------


def yaml_docs(path: Path) -> list[Any]:
    with path.open() as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def plain_manifests() -> list[Path]:
    """Files under deploy/k8s whose documents are all complete Kubernetes objects."""
    out = []
    for path in sorted(K8S.rglob("*.yaml")):
        if "patches" in path.relative_to(K8S).parts:
            continue
        docs = yaml_docs(path)
        if not docs or not all(isinstance(d, dict) and "apiVersion" in d for d in docs):
            continue  # a routefit config
        if any(d.get("kind") == "Kustomization" for d in docs):
            continue
        out.append(path)
    return out


# ---- routefit configs -----------------------------------------------------------------------


def env_refs(value: Any, where: str = "") -> Iterator[tuple[str, str]]:
    """(NAME, key path) of every os.environ/NAME in a parsed config."""
    if isinstance(value, str) and value.startswith(ENV_PREFIX):
        yield value[len(ENV_PREFIX) :], where
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from env_refs(v, f"{where}.{k}" if where else str(k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from env_refs(v, f"{where}[{i}]")


def environ_for(
    raw: Any, provided: Mapping[str, str | None] | None
) -> tuple[dict[str, str], list[str]]:
    """Values for the config's env references, and the references nothing provides.

    ``provided``: NAME -> literal value (or None when it comes from a secret); None = accept any.
    """
    environ, unprovided = {}, []
    for name, where in env_refs(raw):
        if provided is not None and name not in provided:
            unprovided.append(f"{where} (os.environ/{name})")
            continue
        literal = provided.get(name) if provided is not None else None
        if literal is not None:
            environ[name] = literal
        elif where == "routefit_settings.redis_url":
            environ[name] = "redis://placeholder.invalid:6379/0"
        else:
            environ[name] = f"placeholder-{name.lower()}"
    return environ, unprovided


def load_one(path: Path, label: str, provided: Mapping[str, str | None] | None) -> None:
    from proxy.config import ConfigError, load_config

    raw = yaml.safe_load(path.read_text())
    environ, unprovided = environ_for(raw, provided)
    try:
        config = load_config(path, environ=environ)
    except ConfigError as exc:
        raise CheckFailed(f"{label}: {exc}") from None
    problems = [f"not provided by the deployment: {u}" for u in unprovided]
    problems += [f"warning: {w}" for w in config.warnings]
    if not config.settings.redis_url:
        problems.append("routefit_settings.redis_url is not set: replicas would not share budgets")
    if problems:
        raise CheckFailed(f"{label}:\n  " + "\n  ".join(problems))
    teams = ", ".join(t.id for t in config.teams) or "none (open)"
    print(
        f"ok: {label}: {len(config.routes)} routes, teams: {teams}, "
        f"store {config.settings.redis_url}"
    )


def compose_config() -> tuple[Path, dict[str, str | None]]:
    compose = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    service = compose["services"]["routefit"]
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(e.split("=", 1) if "=" in e else (e, None) for e in environment)
    target = environment.get("ROUTEFIT_CONFIG", "/etc/routefit/routefit.yaml")
    for volume in service.get("volumes", []):
        source, _, rest = volume.partition(":")
        if rest.split(":")[0] == target:
            path = (DEPLOY / source).resolve()
            break
    else:
        raise CheckFailed(f"deploy/compose.yaml: nothing is mounted at ROUTEFIT_CONFIG={target}")
    provided: dict[str, str | None] = {
        k: (str(v) if v is not None else None) for k, v in environment.items()
    }
    # Variables deploy/.env.example documents (commented out or not) reach the container through
    # env_file: .env.
    for line in (DEPLOY / ".env.example").read_text().splitlines():
        m = re.match(r"#?\s*([A-Z][A-Z0-9_]*)=", line)
        if m:
            provided.setdefault(m.group(1), None)
    return path, provided


def generator_files(kustomization: Path) -> list[Path]:
    data = yaml.safe_load(kustomization.read_text())
    files = []
    for gen in data.get("configMapGenerator") or []:
        for entry in gen.get("files") or []:
            files.append(kustomization.parent / entry.split("=", 1)[-1])
    return files


def secret_keys() -> dict[str, list[str]]:
    """Secret name -> its keys, from deploy/k8s/**/secret.example.yaml."""
    keys: dict[str, list[str]] = {}
    for path in K8S.rglob("secret.example.yaml"):
        for doc in yaml_docs(path):
            data = {**(doc.get("data") or {}), **(doc.get("stringData") or {})}
            keys[doc["metadata"]["name"]] = list(data)
    return keys


def rendered_configs(rendered: Path) -> Iterator[tuple[str, str, dict[str, str | None]]]:
    """(ConfigMap name, config text, env the mounting container provides) per rendered config."""
    docs = yaml_docs(rendered)
    maps = {
        d["metadata"]["name"]: d["data"][CONFIG_KEY]
        for d in docs
        if d.get("kind") == "ConfigMap" and CONFIG_KEY in (d.get("data") or {})
    }
    examples = secret_keys()
    used = set()
    for d in docs:
        if d.get("kind") not in ("Deployment", "StatefulSet", "DaemonSet"):
            continue
        pod = d["spec"]["template"]["spec"]
        volumes = {
            v["name"]: v["configMap"]["name"] for v in pod.get("volumes", []) if "configMap" in v
        }
        for container in pod["containers"]:
            image = container.get("image", "").rsplit("/", 1)[-1].split(":")[0]
            names = {e["name"] for e in container.get("env", [])}
            if image != "routefit" and "ROUTEFIT_CONFIG" not in names:
                continue  # not a routefit container (e.g. the trial Redis)
            provided: dict[str, str | None] = {}
            for env in container.get("env", []):
                provided[env["name"]] = env.get("value")
            for source in container.get("envFrom", []):
                ref = source.get("secretRef") or source.get("configMapRef") or {}
                if ref.get("name") not in examples:
                    raise CheckFailed(
                        f"{rendered}: envFrom {ref.get('name')!r}: its keys are unknown "
                        "(no secret.example.yaml documents it)"
                    )
                for key in examples[ref["name"]]:
                    provided.setdefault(source.get("prefix", "") + key, None)
            config_path = provided.get("ROUTEFIT_CONFIG") or "/etc/routefit/routefit.yaml"
            for mount in container.get("volumeMounts", []):
                if mount["name"] in volumes and config_path == f"{mount['mountPath']}/{CONFIG_KEY}":
                    name = volumes[mount["name"]]
                    if name not in maps:
                        raise CheckFailed(f"{rendered}: ConfigMap {name} has no {CONFIG_KEY}")
                    used.add(name)
                    yield name, maps[name], provided
                    break
            else:
                raise CheckFailed(
                    f"{rendered}: {d['metadata']['name']}/{container['name']}: no ConfigMap "
                    f"provides ROUTEFIT_CONFIG={config_path}"
                )
    unused = set(maps) - used
    if unused:
        raise CheckFailed(f"{rendered}: ConfigMap(s) {sorted(unused)} mounted by no Deployment")


def check_configs(rendered: list[str]) -> None:
    count = 0
    path, provided = compose_config()
    load_one(path, f"{path.relative_to(ROOT)} (compose)", provided)
    count += 1
    for kustomization in sorted(K8S.rglob("kustomization.yaml")):
        for file in generator_files(kustomization):
            rel = file.relative_to(ROOT)
            load_one(file, f"{rel} (configMapGenerator of {kustomization.parent.name})", None)
            count += 1
    for item in rendered:
        directory, _, output = item.partition("=")
        with tempfile.TemporaryDirectory() as tmp:
            for name, text, env in rendered_configs(Path(output)):
                path = Path(tmp) / CONFIG_KEY
                path.write_text(text)
                load_one(path, f"{directory} rendered ConfigMap {name}", env)
                count += 1
    print(f"ok: {count} routefit config(s) load")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="deploy/checks.py")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("context")
    sub.add_parser("lock")
    sub.add_parser("manifests")
    configs = sub.add_parser("configs")
    configs.add_argument("--rendered", action="append", default=[], metavar="DIR=FILE")
    args = parser.parse_args(argv)
    try:
        if args.command == "context":
            check_context()
        elif args.command == "lock":
            check_lock()
        elif args.command == "manifests":
            for path in plain_manifests():
                print(path.relative_to(ROOT))
        else:
            check_configs(args.rendered)
    except CheckFailed as exc:
        print(f"FAILED: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
