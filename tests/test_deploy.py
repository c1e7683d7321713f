"""The deployment files under deploy/: every routefit config loads with routefit's own loader, and
the facts docs/operations.md relies on hold (probes, non-root, read-only root, Redis persistence,
secrets only by reference, ...). Static and fast: no container engine, cluster or linter here —
deploy/check runs hadolint, the Compose schema, kustomize and kubernetes-validate."""

from __future__ import annotations

import http.server
import importlib.metadata
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import threading
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from proxy.cli import build_parser
from proxy.config import load_config
from proxy.metrics import Metrics

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "k8s"
BASE = K8S / "base"
OVERLAYS = sorted(p for p in (K8S / "overlays").iterdir() if p.is_dir())

# deploy/check's own helpers: the test and the check read the files the same way.
sys.path.insert(0, str(DEPLOY))
from checks import env_refs, yaml_docs  # noqa: E402

from proxy.config import ENV_PREFIX  # noqa: E402


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def placeholder_env(raw: Any, given: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {}
    for name, where in env_refs(raw):
        if given and name in given:
            env[name] = given[name]
        elif where == "routefit_settings.redis_url":
            env[name] = "redis://placeholder.invalid:6379/0"
        else:
            env[name] = f"placeholder-{name.lower()}"
    return env


def routefit_configs() -> list[Path]:
    found = []
    for path in sorted(DEPLOY.rglob("*.yaml")):
        docs = yaml_docs(path)
        if len(docs) == 1 and isinstance(docs[0], dict) and "model_list" in docs[0]:
            found.append(path)
    return found


CONFIGS = routefit_configs()


def test_the_expected_configs_are_found():
    rel = {str(p.relative_to(DEPLOY)) for p in CONFIGS}
    assert {"config/routefit.yaml", "k8s/base/routefit.yaml"} <= rel
    assert any(r.startswith("k8s/overlays/") for r in rel)


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: str(p.relative_to(DEPLOY)))
def test_config_loads_cleanly_and_commits_no_secret(path):
    raw = load_yaml(path)
    config = load_config(path, environ=placeholder_env(raw))
    assert config.warnings == ()  # an unknown or misspelt key would warn
    assert config.missing_env == ()
    # Replicas and workers share calibration and budgets only through Redis.
    assert config.settings.redis_url
    # Keys are references to the environment, never values in the file.
    for i, item in enumerate(raw["model_list"]):
        key = item["litellm_params"].get("api_key")
        assert key is None or key.startswith(ENV_PREFIX), f"model_list[{i}] has a literal key"
    settings = raw["routefit_settings"]
    assert str(settings.get("admin_key", ENV_PREFIX)).startswith(ENV_PREFIX)
    assert config.teams, "a deployment config defines its teams (no open gateway)"
    for team in settings["teams"]:
        for key in team["keys"]:
            assert key.startswith((ENV_PREFIX, "sha256:")), f"team {team['id']}: literal key"


# ---- the image --------------------------------------------------------------------------------


def dockerfile_stages() -> list[list[str]]:
    text = re.sub(r"\\\n\s*", " ", (DEPLOY / "Dockerfile").read_text())
    stages: list[list[str]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.upper().startswith("FROM "):
            stages.append([])
        stages[-1].append(line)
    return stages


def instructions(stage: list[str], name: str) -> list[str]:
    return [line[len(name) + 1 :].strip() for line in stage if line.upper().startswith(name + " ")]


def image_env() -> dict[str, str]:
    env = {}
    for args in instructions(dockerfile_stages()[-1], "ENV"):
        for word in shlex.split(args):
            key, _, value = word.partition("=")
            env[key] = value
    return env


def test_dockerfile_is_multistage_on_a_pinned_slim_python():
    stages = dockerfile_stages()
    assert len(stages) >= 2
    for stage in stages:
        image = stage[0].split()[1]
        assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", image), image
    builder = stages[0][0].split()
    assert builder[-2].upper() == "AS"
    final = stages[-1]
    assert f"--from={builder[-1]} /opt/venv /opt/venv" in " ".join(instructions(final, "COPY"))
    text = "\n".join(final)
    for tool in ("apt-get", "gcc", "build-essential", "pip install"):
        assert tool not in text, f"the runtime stage must not install {tool}"


def test_image_runs_as_non_root_with_the_documented_defaults():
    final = dockerfile_stages()[-1]
    (user,) = instructions(final, "USER")
    uid = user.split(":")[0]
    assert uid.isdigit() and int(uid) != 0  # numeric: Kubernetes can verify runAsNonRoot
    env = image_env()
    assert env["ROUTEFIT_CONFIG"] == "/etc/routefit/routefit.yaml"
    assert env["ROUTEFIT_WORKERS"] == "2"
    assert env["ROUTEFIT_HOST"] == "0.0.0.0"
    assert env["ROUTEFIT_PORT"] == "4000"
    assert env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert "4000" in instructions(final, "EXPOSE")
    (entrypoint,) = instructions(final, "ENTRYPOINT")
    (command,) = json.loads(entrypoint)
    copies = instructions(final, "COPY")
    assert any(c.endswith(f"deploy/docker-entrypoint.sh /usr/local/bin/{command}") for c in copies)


def run_entrypoint(args: list[str], tmp_path: Path, **env: str) -> list[str]:
    """The entrypoint with the image's environment and a stand-in `routefit` on PATH."""
    fake = tmp_path / "routefit"
    fake.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\n" "$a"; done\n')
    fake.chmod(0o755)
    environ = {**image_env(), **env, "PATH": f"{tmp_path}:/usr/bin:/bin"}
    script = DEPLOY / "docker-entrypoint.sh"
    done = subprocess.run(
        ["sh", str(script), *args], env=environ, capture_output=True, text=True, check=True
    )
    return done.stdout.splitlines()


def test_entrypoint_serves_with_the_environment(tmp_path):
    assert os.stat(DEPLOY / "docker-entrypoint.sh").st_mode & stat.S_IXUSR
    argv = run_entrypoint([], tmp_path)
    assert argv == [
        "serve",
        "--config",
        "/etc/routefit/routefit.yaml",
        "--host",
        "0.0.0.0",
        "--port",
        "4000",
        "--workers",
        "2",
        "--log-level",
        "info",
    ]
    args = build_parser().parse_args(argv)  # routefit's own CLI accepts exactly this
    assert (args.command, args.host, args.port, args.workers) == ("serve", "0.0.0.0", 4000, 2)
    argv = run_entrypoint(["--access-log"], tmp_path, ROUTEFIT_WORKERS="4")
    args = build_parser().parse_args(argv)
    assert args.workers == 4 and args.access_log
    assert run_entrypoint(["routefit", "price", "x.json"], tmp_path) == ["price", "x.json"]


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200

    def do_GET(self):
        self.send_response(self.status if self.path in ("/healthz", "/readyz") else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def health_server():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_image_healthcheck_asks_healthz_without_curl(health_server, monkeypatch):
    (check,) = instructions(dockerfile_stages()[-1], "HEALTHCHECK")
    argv = json.loads(check[check.index("CMD") + 3 :])
    assert argv[:2] == ["python", "-c"] and "/healthz" in argv[2]
    env = {**os.environ, "ROUTEFIT_PORT": str(health_server.server_address[1])}
    command = [sys.executable, *argv[1:]]
    assert subprocess.run(command, env=env, capture_output=True).returncode == 0
    monkeypatch.setattr(_Health, "status", 503)
    assert subprocess.run(command, env=env, capture_output=True).returncode != 0


def test_build_context_keeps_what_the_dockerfile_copies():
    lines = (DEPLOY / "Dockerfile.dockerignore").read_text().splitlines()
    patterns = [p.strip() for p in lines if p.strip() and not p.startswith("#")]
    assert patterns[0] == "*"  # everything else stays out of the context
    reincluded = {p[1:] for p in patterns if p.startswith("!")}
    sources = []
    for stage in dockerfile_stages():
        for args in instructions(stage, "COPY"):
            words = [w for w in args.split() if not w.startswith("--")]
            if "--from" not in args:
                sources += words[:-1]
    assert sources and set(sources) <= reincluded
    for source in sources:
        assert (ROOT / source).exists(), source
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    packages = {p.rstrip(".*") for p in find["packages"]["find"]["include"]}
    assert packages <= set(sources), "every package pyproject.toml installs is copied"


def test_lock_pins_every_dependency_and_extra_within_its_specifier():
    pins = {}
    for line in (DEPLOY / "requirements.lock").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, version = line.split("==")
            pins[canonicalize_name(name)] = Version(version)
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    needed = []
    for spec in deps:
        req = Requirement(spec)
        needed.append(req)
        for extra in req.extras:  # e.g. redis[hiredis]: what the installed package declares
            for line in importlib.metadata.requires(req.name) or []:
                sub = Requirement(line)
                if sub.marker and sub.marker.evaluate({"extra": extra}):
                    needed.append(sub)
    assert len(needed) > len(deps)
    for req in needed:
        assert canonicalize_name(req.name) in pins, f"{req.name} is not in the lock"
        assert req.specifier.contains(pins[canonicalize_name(req.name)], prereleases=True), req


# ---- compose ----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose():
    return load_yaml(DEPLOY / "compose.yaml")


def test_compose_redis_persists_and_reports_health(compose):
    redis = compose["services"]["redis"]
    command = redis["command"]
    assert command[command.index("--appendonly") + 1] == "yes"
    volume, _, target = redis["volumes"][0].partition(":")
    assert target == "/data" and volume in compose["volumes"]  # a named volume
    assert "redis-cli ping" in " ".join(redis["healthcheck"]["test"])


def test_compose_routefit_waits_for_redis_and_mounts_its_config(compose):
    service = compose["services"]["routefit"]
    assert service["depends_on"]["redis"]["condition"] == "service_healthy"
    assert (DEPLOY / service["build"]["context"] / service["build"]["dockerfile"]).is_file()
    assert {"path": ".env", "required": False} in service["env_file"]
    assert "/readyz" in " ".join(service["healthcheck"]["test"])
    assert service["read_only"] is True and service["cap_drop"] == ["ALL"]
    target = service["environment"]["ROUTEFIT_CONFIG"]
    mounts = [v.split(":") for v in service["volumes"]]
    (source,) = [m[0] for m in mounts if m[1] == target and m[2:] == ["ro"]]
    path = (DEPLOY / source).resolve()
    assert path == DEPLOY / "config" / "routefit.yaml"
    config = load_config(path, environ=placeholder_env(load_yaml(path)))
    host = config.settings.redis_url.split("//", 1)[1].split(":")[0]
    assert host in compose["services"], "redis_url names the compose Redis service"
    assert any(str(p).endswith(":4000") for p in service["ports"])


def test_compose_env_file_documents_every_variable_the_config_reads():
    example = (DEPLOY / ".env.example").read_text()
    documented = set(re.findall(r"^#?\s*([A-Z][A-Z0-9_]*)=", example, re.M))
    needed = {name for name, _ in env_refs(load_yaml(DEPLOY / "config" / "routefit.yaml"))}
    assert needed <= documented
    assert ".env" in (DEPLOY / ".gitignore").read_text().split()


# ---- Kubernetes -------------------------------------------------------------------------------


def kustomization(directory: Path) -> dict[str, Any]:
    return load_yaml(directory / "kustomization.yaml")


def base_object(kind: str) -> dict[str, Any]:
    for name in kustomization(BASE)["resources"]:
        for doc in yaml_docs(BASE / name):
            if doc["kind"] == kind:
                return doc
    raise AssertionError(f"no {kind} in the base")


def routefit_container(deployment: Mapping[str, Any]) -> dict[str, Any]:
    (container,) = [
        c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "routefit"
    ]
    return container


def secret_examples() -> dict[str, set[str]]:
    return {
        doc["metadata"]["name"]: set(doc.get("stringData") or {}) | set(doc.get("data") or {})
        for doc in yaml_docs(BASE / "secret.example.yaml")
    }


def provided_env(env: list[Mapping[str, Any]], env_from: list[Mapping[str, Any]]) -> dict:
    """NAME -> literal value (None when it comes from a Secret) for one container."""
    examples = secret_examples()
    provided: dict[str, str | None] = {e["name"]: e.get("value") for e in env}
    for source in env_from:
        provided.update(dict.fromkeys(examples[source["secretRef"]["name"]]))
    return provided


def test_base_resources_exist_and_commit_no_secret():
    kust = kustomization(BASE)
    for name in kust["resources"]:
        assert (BASE / name).is_file()
        assert all(doc["kind"] != "Secret" for doc in yaml_docs(BASE / name))
    assert "secret.example.yaml" not in kust["resources"]
    (generator,) = kust["configMapGenerator"]
    assert generator["name"] == "routefit-config" and generator["files"] == ["routefit.yaml"]
    assert "trial-redis" not in json.dumps(kust)


def test_deployment_probes_security_and_rollout():
    deployment = base_object("Deployment")
    spec = deployment["spec"]
    pod = spec["template"]["spec"]
    container = routefit_container(deployment)
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["http"] == 4000
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["startupProbe"]["httpGet"]["path"] == "/healthz"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["runAsUser"] != 0
    assert pod["automountServiceAccountToken"] is False
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    assert spec["strategy"]["rollingUpdate"]["maxUnavailable"] == 0
    assert "replicas" not in spec  # the HorizontalPodAutoscaler owns the count
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    # uvicorn drains for 30 s after SIGTERM; the pod must be given longer than that.
    assert pod["terminationGracePeriodSeconds"] > 30
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(ports["http"])
    assert annotations["prometheus.io/path"] == "/metrics"


def test_deployment_mounts_the_config_where_routefit_reads_it_and_writable_dirs():
    deployment = base_object("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    container = routefit_container(deployment)
    env = {e["name"]: e.get("value") for e in container["env"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
    config_dir, _, key = env["ROUTEFIT_CONFIG"].rpartition("/")
    assert key == "routefit.yaml" and mounts[config_dir]["readOnly"] is True
    assert volumes[mounts[config_dir]["name"]]["configMap"]["name"] == "routefit-config"
    writable = {path for path, m in mounts.items() if "emptyDir" in volumes[m["name"]]}
    assert "/tmp" in writable
    for path in [BASE / "routefit.yaml", *(o / "routefit.yaml" for o in OVERLAYS)]:
        store = load_yaml(path)["routefit_settings"]["store_path"]
        assert os.path.dirname(store) in writable, f"{path}: store_path on the read-only root"


def test_secrets_are_referenced_and_documented():
    container = routefit_container(base_object("Deployment"))
    examples = secret_examples()
    for e in container["env"]:
        ref = e.get("valueFrom", {}).get("secretKeyRef")
        if ref:
            assert ref["key"] in examples[ref["name"]], ref
    for source in container["envFrom"]:
        assert source["secretRef"]["name"] in examples


def test_base_config_env_is_provided_by_the_deployment():
    container = routefit_container(base_object("Deployment"))
    provided = provided_env(container["env"], container["envFrom"])
    raw = load_yaml(BASE / "routefit.yaml")
    assert {name for name, _ in env_refs(raw)} <= set(provided)
    given = {k: v for k, v in provided.items() if v is not None}
    config = load_config(BASE / "routefit.yaml", environ=placeholder_env(raw, given))
    assert config.settings.redis_url == provided["ROUTEFIT_REDIS_URL"]


def test_service_hpa_and_pdb_select_the_pods():
    deployment = base_object("Deployment")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = base_object("Service")
    assert service["spec"]["selector"].items() <= labels.items()
    assert service["spec"]["ports"][0]["targetPort"] == "http"
    pdb = base_object("PodDisruptionBudget")
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    hpa = base_object("HorizontalPodAutoscaler")
    assert hpa["apiVersion"] == "autoscaling/v2"
    target = hpa["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", deployment["metadata"]["name"])
    assert hpa["spec"]["metrics"][0]["resource"]["name"] == "cpu"
    assert 2 <= hpa["spec"]["minReplicas"] <= hpa["spec"]["maxReplicas"]


@pytest.mark.parametrize("overlay", OVERLAYS, ids=lambda p: p.name)
def test_overlay_replaces_the_config_and_sets_its_redis(overlay):
    kust = kustomization(overlay)
    assert "../../base" in kust["resources"]
    assert kust["namespace"]
    (generator,) = kust["configMapGenerator"]
    assert generator["name"] == "routefit-config" and generator["behavior"] == "replace"
    config_path = overlay / generator["files"][0]
    # The overlay's env: the base container's, with the patches' entries merged by name.
    container = routefit_container(base_object("Deployment"))
    env = {e["name"]: e for e in container["env"]}
    patched: set[str] = set()
    hpa = dict(base_object("HorizontalPodAutoscaler")["spec"])
    for patch in kust["patches"]:
        doc = load_yaml(overlay / patch["path"])
        if doc["kind"] == "Deployment":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                if c["name"] == "routefit":
                    env.update({e["name"]: e for e in c.get("env", [])})
                    patched |= {e["name"] for e in c.get("env", [])}
        elif doc["kind"] == "HorizontalPodAutoscaler":
            hpa.update(doc["spec"])
    provided = provided_env(list(env.values()), container["envFrom"])
    raw = load_yaml(config_path)
    assert {name for name, _ in env_refs(raw)} <= set(provided)
    assert "ROUTEFIT_REDIS_URL" in patched, "the overlay names its own Redis"
    redis_url = provided["ROUTEFIT_REDIS_URL"]
    assert redis_url.startswith(("redis://", "rediss://"))
    given = {k: v for k, v in provided.items() if v is not None}
    config = load_config(config_path, environ=placeholder_env(raw, given))
    assert config.settings.redis_url == redis_url
    assert config.teams and all(t.quotas.windows() for t in config.teams)
    assert 2 <= hpa["minReplicas"] <= hpa["maxReplicas"]


def test_trial_redis_is_separate_and_persists_with_aof():
    docs = yaml_docs(K8S / "trial-redis" / "redis.yaml")
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[args.index("--appendonly") + 1] == "yes"
    (service,) = [d for d in docs if d["kind"] == "Service"]
    env = {e["name"]: e.get("value") for e in routefit_container(base_object("Deployment"))["env"]}
    assert env["ROUTEFIT_REDIS_URL"].startswith(f"redis://{service['metadata']['name']}:")
    assert "trial-redis" not in json.dumps([kustomization(BASE), *map(kustomization, OVERLAYS)])


# ---- the operations guide ---------------------------------------------------------------------


def test_operations_guide_names_only_metrics_that_exist():
    text = (ROOT / "docs" / "operations.md").read_text()
    families = {m.name for m in Metrics().registry.collect()}
    exposed = set()
    for name in families:
        exposed |= {name, *(name + s for s in ("_total", "_bucket", "_sum", "_count", "_created"))}
    mentioned = set(re.findall(r"\broutefit_[a-z_]+", text)) - {"routefit_settings"}
    assert mentioned, "the guide names the metrics to alert on"
    assert mentioned <= exposed, sorted(mentioned - exposed)
    for family in families:  # and every metric is explained
        assert family in text, family
