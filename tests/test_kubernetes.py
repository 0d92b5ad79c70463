"""deploy/kubernetes/, checked without a cluster (none runs here, and no image is built):

* the SparkApplication validates against the schema kept beside it
  (``sparkapplication.schema.yaml``, a hand-written subset of the operator's CRD) and loads
  in the operator's own Python models (``kubeflow-spark-api``), and every field the schema
  names is a field of those models;
* the Dockerfile's every step has what it needs (the model of tests/support/dockerfile.py,
  the one that walks docker/Dockerfile), it ends as the base image's unprivileged user, and
  it makes the virtualenv and the submit script that the manifest runs;
* no volume the pods mount shadows what the image or Spark uses: the working directory,
  ``$SPARK_HOME``, the virtualenv, the submit script's folder;
* every ``${VAR}`` of the mounted config, and the S3 keys of an ``s3a://`` checkpoint, reach
  the driver and the executors from the Secret;
* the arguments name files the ConfigMap holds, where the driver mounts it, and a checkpoint
  that outlives the driver's pod;
* the ConfigMap's topology is topologies/load.yaml, and ``sqe validate`` accepts it with the
  ConfigMap's config.

Each check returns a list of problems; the tests at the end break a copy on purpose and
assert that the check notices.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePosixPath
from typing import Any

import jsonschema
import pydantic
import tomllib
import yaml
from kubeflow_spark_api import models
from packaging.specifiers import SpecifierSet

from sqe.cli.main import main
from sqe.secrets import expand_env
from tests.support import ROOT
from tests.support.dockerfile import APACHE_SPARK_PYTHON, Image, build, context

KUBE = ROOT / "deploy" / "kubernetes"
DOCKERFILE = KUBE / "Dockerfile"


def load(name: str) -> Any:
    return yaml.safe_load((KUBE / name).read_text(encoding="utf-8"))


def image(text: str | None = None) -> Image:
    """The image deploy/kubernetes/Dockerfile builds, walked on paper."""
    files, ignore = context()
    return build(DOCKERFILE.read_text() if text is None else text, files, ignore,
                 APACHE_SPARK_PYTHON)


def pods(app: dict) -> dict[str, dict]:
    spec = app.get("spec") or {}
    return {"driver": spec.get("driver") or {}, "executor": spec.get("executor") or {}}


def local_path(uri: str) -> str:
    """The path inside the image of a ``local://`` URI (or of a plain path)."""
    return uri.removeprefix("local://")


def app_args(app: dict) -> dict[str, Any]:
    """The topology, the --config files and the --checkpoint of ``sqe run``'s arguments."""
    args = [str(a) for a in app["spec"].get("arguments") or []]
    valued = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
    configs = [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--config"]
    return {"topology": args[0] if args else None, "configs": configs,
            "checkpoint": valued.get("--checkpoint")}


# -- the schema ---------------------------------------------------------------------------

def schema_problems(app: dict, schema: dict | None = None) -> list[str]:
    """What the vendored schema says of ``app``."""
    validator = jsonschema.Draft202012Validator(schema or load("sparkapplication.schema.yaml"))
    return [f"{'.'.join(map(str, e.absolute_path)) or '(top)'}: {e.message}"
            for e in sorted(validator.iter_errors(app), key=lambda e: list(e.absolute_path))]


def model_problems(app: dict) -> list[str]:
    """What the operator's own Python models (generated from its OpenAPI spec) say of ``app``:
    types are strict there, unknown fields pass."""
    try:
        models.SparkV1beta2SparkApplication.model_validate(app)
    except pydantic.ValidationError as exc:
        return [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
    return []


#: The schema's definitions and the operator's models they are a subset of.
SCHEMA_MODELS = {
    "(top)": models.SparkV1beta2SparkApplication,
    "ObjectMeta": models.IoK8sApimachineryPkgApisMetaV1ObjectMeta,
    "SparkApplicationSpec": models.SparkV1beta2SparkApplicationSpec,
    "Dependencies": models.SparkV1beta2Dependencies,
    "RestartPolicy": models.SparkV1beta2RestartPolicy,
    "SparkPodSpec": models.SparkV1beta2DriverSpec,
    "DriverSpec": models.SparkV1beta2DriverSpec,
    "ExecutorSpec": models.SparkV1beta2ExecutorSpec,
    "EnvVar": models.IoK8sApiCoreV1EnvVar,
    "EnvVarSource": models.IoK8sApiCoreV1EnvVarSource,
    "KeySelector": models.IoK8sApiCoreV1SecretKeySelector,
    "EnvFromSource": models.IoK8sApiCoreV1EnvFromSource,
    "EnvSource": models.IoK8sApiCoreV1SecretEnvSource,
    "Volume": models.IoK8sApiCoreV1Volume,
    "Volume.configMap": models.IoK8sApiCoreV1ConfigMapVolumeSource,
    "Volume.secret": models.IoK8sApiCoreV1SecretVolumeSource,
    "Volume.emptyDir": models.IoK8sApiCoreV1EmptyDirVolumeSource,
    "KeyToPath": models.IoK8sApiCoreV1KeyToPath,
    "VolumeMount": models.IoK8sApiCoreV1VolumeMount,
}


def _objects(schema: dict) -> Iterator[tuple[str, dict]]:
    """(name, schema) of the schema's object definitions, nested ones as ``Def.field``."""
    yield "(top)", schema
    for name, definition in schema["$defs"].items():
        if "properties" in definition:
            yield name, definition
            for field, sub in definition["properties"].items():
                if "properties" in sub:
                    yield f"{name}.{field}", sub


def subset_problems(schema: dict) -> list[str]:
    """Fields of the schema that the operator's models lack, and required fields that differ
    from theirs (the Kubernetes meta fields the API server requires aside)."""
    problems = []
    for name, definition in _objects(schema):
        model = SCHEMA_MODELS.get(name)
        if model is None:
            problems.append(f"{name}: no model of kubeflow-spark-api to check it against")
            continue
        fields = {f.alias or k: f for k, f in model.model_fields.items()}
        unknown = sorted(set(definition["properties"]) - set(fields))
        if unknown:
            problems.append(f"{name}: {unknown} are not fields of {model.__name__}")
        required = {k for k, f in fields.items() if f.is_required()}
        ours = set(definition.get("required", []))
        # the API server, not the CRD, requires apiVersion, kind and metadata.name
        if ours != required and not (name in ("(top)", "ObjectMeta") and required <= ours):
            problems.append(f"{name}: requires {sorted(ours)}, {model.__name__} "
                            f"{sorted(required)}")
    return problems


# -- the image ------------------------------------------------------------------------------

def image_problems(text: str, app: dict) -> list[str]:
    """The Dockerfile builds, on paper, what the manifest runs, from the Spark it names."""
    walked = image(text)
    problems = list(walked.problems)
    if walked.user in ("root", "0"):
        problems.append("the image ends as root (the base image's user is spark)")
    if re.search(r"^(ENTRYPOINT|CMD)\b", text, re.M):
        problems.append("the image replaces the base image's entrypoint, which starts the "
                        "driver and the executors")
    base = re.search(r"^FROM\s+apache/spark:(\S+)-python3\s*$", text, re.M)
    version = re.search(r"^ARG SPARK_VERSION=(\S+)", text, re.M)
    if not base or base.group(1) != "${SPARK_VERSION}" or not version:
        problems.append("the image is not FROM apache/spark:${SPARK_VERSION}-python3")
    else:
        pin = next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
            "dependencies"] if d.startswith("pyspark"))
        if version.group(1) not in SpecifierSet(pin.removeprefix("pyspark")):
            problems.append(f"Spark {version.group(1)} is not what pyproject.toml allows ({pin})")
        if str(app["spec"].get("sparkVersion")) != version.group(1):
            problems.append(f"spec.sparkVersion {app['spec'].get('sparkVersion')} is not the "
                            f"image's Spark {version.group(1)}")
    extras = re.search(r"^ARG SQE_EXTRAS=(\S+)", text, re.M)
    known = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    if not extras or not set(extras.group(1).split(",")) <= set(known):
        problems.append("SQE_EXTRAS names an extra pyproject.toml does not have")
    if not re.search(r'pip install [^\n]*"/tmp/sqe-src\[\$SQE_EXTRAS\]"', text):
        problems.append("the image does not pip-install the build context with SQE_EXTRAS")
    conf = app["spec"].get("sparkConf") or {}
    for key in ("spark.pyspark.python", "spark.pyspark.driver.python"):
        python = conf.get(key)
        venv = str(PurePosixPath(python).parent.parent) if python else None
        if not python or f"{venv}/bin" not in walked.dirs or not re.search(
                rf"-m venv {re.escape(venv)}\b", text):
            problems.append(f"sparkConf {key} is {python}, not the python of a virtualenv "
                            "the image makes")
    script = local_path(app["spec"].get("mainApplicationFile", ""))
    if script not in walked.files or "-m sqe.cli.submit --path" not in text:
        problems.append(f"mainApplicationFile {script}: the image makes no link there to "
                        "`python -m sqe.cli.submit --path`")
    return problems


def protected_paths(app: dict, walked: Image) -> dict[str, str]:
    """What a mount must not shadow: the working directory (where Spark puts what it ships
    to a pod, archives unpacked too), SPARK_HOME, the virtualenv, the submit script's folder."""
    python = (app["spec"].get("sparkConf") or {}).get("spark.pyspark.python", "/")
    return {"the working directory": walked.workdir,
            "SPARK_HOME": walked.env["SPARK_HOME"],
            "the virtualenv": str(PurePosixPath(python).parent.parent),
            "the submit script's folder": str(PurePosixPath(
                local_path(app["spec"]["mainApplicationFile"])).parent)}


def mount_problems(app: dict) -> list[str]:
    protected = protected_paths(app, image())
    problems = []
    for pod, spec in pods(app).items():
        for mount in spec.get("volumeMounts") or []:
            path = PurePosixPath(mount["mountPath"])
            if not path.is_absolute():
                problems.append(f"{pod}: mountPath {path} is not absolute")
                continue
            for what, used in protected.items():
                p = PurePosixPath(used)
                if path == p or path in p.parents or p in path.parents:
                    problems.append(f"{pod}: {mount['name']} mounted at {path} shadows {what} "
                                    f"({used})")
    return problems


# -- the secrets ----------------------------------------------------------------------------

class _Recorder(Mapping[str, str]):
    """An environment that has every variable and notes which were asked for."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def __contains__(self, name: object) -> bool:
        self.names.add(str(name))
        return True

    def __getitem__(self, name: str) -> str:
        self.names.add(name)
        return "x"

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __len__(self) -> int:
        return len(self.names)


def referenced(config: Any) -> set[str]:
    """The variables a config names as ``${VAR}``, as SQE expands them."""
    recorder = _Recorder()
    expand_env(config, "config", recorder)
    return recorder.names


def secret_env(spec: dict, secret: dict) -> set[str]:
    """The variables a pod gets from ``secret``: its ``env`` entries with a secretKeyRef to
    one of its keys, and every key through an ``envFrom`` secretRef."""
    name = secret["metadata"]["name"]
    keys = {*(secret.get("stringData") or {}), *(secret.get("data") or {})}
    got = set()
    for var in spec.get("env") or []:
        ref = (var.get("valueFrom") or {}).get("secretKeyRef") or {}
        if ref.get("name") == name and ref.get("key") in keys:
            got.add(var["name"])
    for source in spec.get("envFrom") or []:
        if (source.get("secretRef") or {}).get("name") == name:
            got |= {source.get("prefix", "") + k for k in keys}
    return got


def mounted_files(app: dict, configmap: dict) -> dict[str, str]:
    """{path in the driver: ConfigMap key} of the ConfigMap's files where the driver mounts it."""
    volumes = {v["name"]: v for v in app["spec"].get("volumes") or []}
    name, data = configmap["metadata"]["name"], configmap.get("data") or {}
    files = {}
    for mount in pods(app)["driver"].get("volumeMounts") or []:
        source = volumes.get(mount["name"], {}).get("configMap") or {}
        if source.get("name") != name:
            continue
        items = {i["path"]: i["key"] for i in source.get("items") or []} or {k: k for k in data}
        if mount.get("subPath"):
            if mount["subPath"] in items:
                files[mount["mountPath"]] = items[mount["subPath"]]
        else:
            files.update({f"{mount['mountPath'].rstrip('/')}/{path}": key
                          for path, key in items.items()})
    return files


def config_of(app: dict, configmap: dict) -> dict:
    """The config files the arguments name, parsed, merged in order."""
    files = mounted_files(app, configmap)
    merged: dict = {}
    for path in app_args(app)["configs"]:
        if path in files:
            for section, values in (yaml.safe_load(configmap["data"][files[path]]) or {}).items():
                merged.setdefault(section, {}).update(values or {})
    return merged


def secret_problems(app: dict, configmap: dict, secret: dict) -> list[str]:
    needed = referenced(config_of(app, configmap))
    s3 = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    if str(app_args(app)["checkpoint"]).startswith("s3a://"):
        needed |= s3
    if not needed - s3:
        return ["the config names no ${VAR}: its secrets would be written in the ConfigMap"]
    problems = []
    for pod, spec in pods(app).items():
        missing = sorted(needed - secret_env(spec, secret))
        if missing:
            problems.append(f"{pod}: {missing} are not set from the Secret "
                            f"{secret['metadata']['name']}")
    return problems


# -- the arguments --------------------------------------------------------------------------

def argument_problems(app: dict, configmap: dict) -> list[str]:
    files = mounted_files(app, configmap)
    args = app_args(app)
    problems = []
    for what, path in [("topology", args["topology"]), *(("config", c) for c in args["configs"])]:
        if path not in files:
            problems.append(f"the {what} {path} is not a file of the ConfigMap "
                            f"{configmap['metadata']['name']} where the driver mounts it "
                            f"({sorted(files)})")
    if not args["configs"]:
        problems.append("no --config")
    if not re.match(r"(s3a|gs|abfss|hdfs)://", str(args["checkpoint"])):
        problems.append(f"--checkpoint {args['checkpoint']}: not on a store that outlives the "
                        "driver's pod (s3a://, gs://, abfss://, hdfs://)")
    return problems


# -- the tests ------------------------------------------------------------------------------

def test_the_sparkapplication_validates_against_the_vendored_schema():
    app = load("sparkapplication.yaml")
    assert schema_problems(app) == []
    jsonschema.Draft202012Validator.check_schema(load("sparkapplication.schema.yaml"))


def test_the_sparkapplication_loads_in_the_operators_own_models():
    assert model_problems(load("sparkapplication.yaml")) == []


def test_the_schema_names_only_fields_of_the_operators_models():
    assert subset_problems(load("sparkapplication.schema.yaml")) == []


def test_the_image_builds_what_the_manifest_runs():
    app = load("sparkapplication.yaml")
    assert image_problems(DOCKERFILE.read_text(), app) == []
    walked = image()
    assert {"/opt/sqe/venv", "/opt/sqe/venv/bin"} <= walked.dirs
    assert walked.user == "spark" and walked.workdir == "/opt/spark/work-dir"


def test_no_mount_shadows_what_the_image_or_spark_uses():
    app = load("sparkapplication.yaml")
    assert mount_problems(app) == []
    assert set(protected_paths(app, image()).values()) == {
        "/opt/spark/work-dir", "/opt/spark", "/opt/sqe/venv", "/opt/sqe"}


def test_every_secret_the_config_names_comes_from_the_secret():
    app, configmap, secret = (load("sparkapplication.yaml"), load("configmap.yaml"),
                              load("secret.example.yaml"))
    assert secret_problems(app, configmap, secret) == []
    assert referenced(config_of(app, configmap)) == {
        "REDIS_PASSWORD", "KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD"}


def test_the_arguments_name_files_of_the_configmap():
    assert argument_problems(load("sparkapplication.yaml"), load("configmap.yaml")) == []


def test_the_configmap_holds_the_repositorys_topology():
    data = load("configmap.yaml")["data"]
    assert data["load.yaml"] == (ROOT / "topologies" / "load.yaml").read_text(encoding="utf-8")


def test_sqe_validates_the_configmaps_topology_with_its_config(tmp_path, monkeypatch, capsys):
    """`sqe validate` of the two files as the driver reads them, with the Secret's example
    values in the environment (without them, the config's ${VAR} are an error)."""
    app, configmap, secret = (load("sparkapplication.yaml"), load("configmap.yaml"),
                              load("secret.example.yaml"))
    files = mounted_files(app, configmap)
    args = app_args(app)

    def here(path: str) -> str:
        (tmp_path / Path(path).name).write_text(configmap["data"][files[path]])
        return str(tmp_path / Path(path).name)

    argv = ["validate", here(args["topology"])]
    for config in args["configs"]:
        argv += ["--config", here(config)]
    for key, value in secret["stringData"].items():
        monkeypatch.setenv(key, value)
    assert main(argv) == 0, capsys.readouterr()
    out = capsys.readouterr()
    assert "OK " in out.out and "topology 'load'" in out.out, out
    monkeypatch.delenv("REDIS_PASSWORD")
    assert main(argv) == 2
    assert "${REDIS_PASSWORD} is not set" in capsys.readouterr().err


# -- each check notices what it is there for ----------------------------------------------

def _broken(change: Any) -> dict:
    app = copy.deepcopy(load("sparkapplication.yaml"))
    change(app["spec"])
    return app


def test_the_schema_refuses_what_the_operator_would():
    def typo(spec: dict) -> None:
        spec["sparkconf"] = spec.pop("sparkConf")

    def number(spec: dict) -> None:
        spec["sparkConf"]["spark.sql.shuffle.partitions"] = 8

    def cores(spec: dict) -> None:
        spec["executor"]["cores"] = "2"

    def mode(spec: dict) -> None:
        spec["mode"] = "standalone"

    def mount(spec: dict) -> None:
        spec["driver"]["volumeMounts"][0]["path"] = spec["driver"]["volumeMounts"][0].pop(
            "mountPath")

    def driver(spec: dict) -> None:
        del spec["driver"]

    for change, expected in [(typo, "'sparkconf' was unexpected"), (number, "8 is not of type"),
                             (cores, "'2' is not of type 'integer'"),
                             (mode, "'standalone' is not one of"),
                             (mount, "'mountPath' is a required property"),
                             (driver, "'driver' is a required property")]:
        problems = schema_problems(_broken(change))
        assert any(expected in p for p in problems), (change.__name__, problems)
    assert model_problems(_broken(cores))  # the operator's models refuse it too
    unknown = copy.deepcopy(load("sparkapplication.schema.yaml"))
    unknown["$defs"]["SparkPodSpec"]["properties"]["coreLimits"] = {"type": "string"}
    assert any("['coreLimits'] are not fields of" in p for p in subset_problems(unknown))
    required = copy.deepcopy(load("sparkapplication.schema.yaml"))
    required["$defs"]["SparkApplicationSpec"]["required"].remove("mainApplicationFile")
    assert any("SparkApplicationSpec: requires" in p for p in subset_problems(required))


def test_the_image_check_notices_a_broken_dockerfile():
    app, text = load("sparkapplication.yaml"), DOCKERFILE.read_text()
    for old, new, expected in [
            ("USER spark", "USER root", "ends as root"),
            ("ln -s", "ln -s /dev/null /opt/sqe/bin/x && ln -s", "/opt/sqe/bin does not exist"),
            ("python3 -m venv /opt/sqe/venv", "python3 -m venv /opt/venv",
             "not the python of a virtualenv"),
            ("ARG SPARK_VERSION=4.3.0", "ARG SPARK_VERSION=3.5.1", "is not what pyproject.toml"),
            ("USER spark", 'USER spark\nENTRYPOINT ["sqe"]', "replaces the base image's"),
            ('--path)" /opt/sqe/submit.py', '--path)" /opt/sqe/run.py',
             "mainApplicationFile /opt/sqe/submit.py")]:
        assert old in text, old
        problems = image_problems(text.replace(old, new, 1), app)
        assert any(expected in p for p in problems), (new, problems)


def test_the_mount_check_notices_a_mount_over_what_the_image_uses():
    for path, what in [("/opt/spark/work-dir", "the working directory"),
                       ("/opt/spark/conf", "SPARK_HOME"), ("/opt", "the virtualenv"),
                       ("/opt/sqe", "the submit script's folder")]:
        def change(spec: dict, path: str = path) -> None:
            spec["executor"]["volumeMounts"] = [{"name": "sqe-files", "mountPath": path}]
        problems = mount_problems(_broken(change))
        assert any(f"executor: sqe-files mounted at {path} shadows {what}" in p
                   for p in problems), (path, problems)


def test_the_secret_check_notices_a_variable_the_pods_do_not_get():
    configmap, secret = load("configmap.yaml"), load("secret.example.yaml")

    def no_env(spec: dict) -> None:
        del spec["executor"]["envFrom"]

    assert secret_problems(_broken(no_env), configmap, secret) == [
        "executor: ['AWS_ACCESS_KEY_ID', 'AWS_SECRET_ACCESS_KEY', 'KAFKA_SASL_PASSWORD', "
        "'KAFKA_SASL_USERNAME', 'REDIS_PASSWORD'] are not set from the Secret sqe-secrets"]
    fewer = copy.deepcopy(secret)
    del fewer["stringData"]["KAFKA_SASL_PASSWORD"]
    problems = secret_problems(load("sparkapplication.yaml"), configmap, fewer)
    assert len(problems) == 2 and all("['KAFKA_SASL_PASSWORD']" in p for p in problems)
    plain = copy.deepcopy(configmap)
    plain["data"]["config.yaml"] = re.sub(r"\$\{\w+\}", "hunter2", plain["data"]["config.yaml"])
    assert "names no ${VAR}" in secret_problems(load("sparkapplication.yaml"), plain, secret)[0]


def test_the_argument_check_notices_a_file_the_configmap_lacks():
    configmap = load("configmap.yaml")

    def other(spec: dict) -> None:
        spec["arguments"][spec["arguments"].index("--config") + 1] = "/etc/sqe/cluster.yaml"

    def unmounted(spec: dict) -> None:
        spec["driver"]["volumeMounts"][0]["mountPath"] = "/etc/sqe-files"

    def local(spec: dict) -> None:
        spec["arguments"][spec["arguments"].index("--checkpoint") + 1] = "/tmp/checkpoints"

    assert "the config /etc/sqe/cluster.yaml is not a file" in argument_problems(
        _broken(other), configmap)[0]
    assert len(argument_problems(_broken(unmounted), configmap)) == 2
    assert "not on a store that outlives" in argument_problems(_broken(local), configmap)[0]
