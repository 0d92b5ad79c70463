"""docker/compose.yaml, docker/Dockerfile, docker/conf.yaml and docs/deploy.md's "The
Docker stack", checked without a Docker engine: the structure of the stack, that every file it
names exists, that the hosts and ports it names agree, and that `sqe validate` accepts the
topologies it runs with the config it runs them with.

Each check returns a list of problems; the tests at the end break a copy of the compose
file on purpose and assert that the checks notice.
"""

from __future__ import annotations

import copy
import fnmatch
import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from sqe.cli.main import main
from tests.support import ROOT

DOCKER = ROOT / "docker"
COMPOSE_FILE = DOCKER / "compose.yaml"
CONF = "docker/conf.yaml"
SECTION = "### Running the stack"  # docs/deploy.md

#: The services of the stack (docs/deploy.md, "The Docker stack").
REQUIRED = ("kafka", "redis", "postgres", "spark-master", "spark-worker", "sqe", "topics")

#: spark-submit options that take a value (the rest of its options are flags).
SUBMIT_VALUED = {
    "--master", "--deploy-mode", "--class", "--name", "--jars", "--packages",
    "--exclude-packages", "--repositories", "--py-files", "--files", "--archives", "--conf",
    "-c", "--properties-file", "--driver-memory", "--driver-java-options",
    "--driver-library-path", "--driver-class-path", "--executor-memory", "--proxy-user",
    "--driver-cores", "--total-executor-cores", "--executor-cores", "--num-executors",
    "--principal", "--keytab", "--queue",
}


# -- reading the files ----------------------------------------------------------------------

def load_compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))


def argv(value: Any) -> list[str]:
    """A compose command (list or string) as a list of arguments."""
    if value is None:
        return []
    return [str(a) for a in value] if isinstance(value, list) else shlex.split(str(value))


def dockerfile_path(compose: dict, name: str) -> Path:
    build = compose["services"][name]["build"]
    build = {"context": build} if isinstance(build, str) else build
    return (DOCKER / build.get("context", ".")).resolve() / build.get("dockerfile", "Dockerfile")


def dockerfile_facts(path: Path) -> dict:
    """WORKDIR, base image and the path the image links to `python -m sqe.cli.submit --path`."""
    text = path.read_text(encoding="utf-8")
    link = re.search(r'ln\s+-sf?\s+"?\$\(python3? -m sqe\.cli\.submit --path\)"?\s+(\S+)', text)
    workdir = re.findall(r"^WORKDIR\s+(\S+)", text, re.M)
    base = re.findall(r"^FROM\s+(\S+)", text, re.M)
    return {"text": text, "submit": link.group(1) if link else None,
            "workdir": workdir[-1] if workdir else None, "base": base[-1] if base else None}


def project_image(compose: dict) -> dict:
    """Facts of the image built from docker/Dockerfile (the first service with a build)."""
    name = next(n for n, s in compose["services"].items() if "build" in s)
    return dockerfile_facts(dockerfile_path(compose, name))


def parse_submit(args: list[str]) -> dict:
    """spark-submit's options, its primary resource and the application's arguments."""
    assert args and args[0] == "spark-submit", args
    options: dict[str, list[str]] = {}
    i = 1
    while i < len(args) and args[i].startswith("-"):
        if args[i] in SUBMIT_VALUED:
            options.setdefault(args[i], []).append(args[i + 1])
            i += 2
        else:
            options.setdefault(args[i], []).append("")
            i += 1
    resource = args[i] if i < len(args) else None
    app = args[i + 1:]
    configs = [app[j + 1] for j, a in enumerate(app[:-1]) if a == "--config"]
    return {"options": options, "resource": resource, "app": app,
            "topology": app[0] if app else None, "configs": configs}


def master_url(compose: dict) -> str:
    """spark://<host>:<port> of the master service, from its own command."""
    args = argv(compose["services"]["spark-master"].get("command"))
    host = args[args.index("--host") + 1] if "--host" in args else "spark-master"
    port = args[args.index("--port") + 1] if "--port" in args else "7077"
    return f"spark://{host}:{port}"


def kafka_env(compose: dict) -> dict[str, str]:
    env = compose["services"]["kafka"].get("environment") or {}
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    return {k: str(v) for k, v in env.items()}


def listeners(value: str) -> dict[str, tuple[str, str]]:
    """'NAME://host:port,...' as {NAME: (host, port)}."""
    out = {}
    for item in filter(None, value.split(",")):
        name, _, address = item.partition("://")
        host, _, port = address.rpartition(":")
        out[name] = (host, port)
    return out


def internal_kafka(compose: dict) -> str:
    """host:port that containers on the compose network use for Kafka."""
    env = kafka_env(compose)
    advertised = listeners(env["KAFKA_ADVERTISED_LISTENERS"])
    return ":".join(advertised[env["KAFKA_INTER_BROKER_LISTENER_NAME"]])


def host_ports(service: dict) -> list[tuple[str, str]]:
    """(published port, container port) of a service's port mappings."""
    out = []
    for p in service.get("ports") or []:
        if isinstance(p, dict):
            out.append((str(p.get("published", "")), str(p["target"])))
            continue
        parts = str(p).split("/")[0].split(":")
        if len(parts) == 1:
            out.append(("", parts[0]))  # container port only: Docker picks a free host port
        else:
            out.append((parts[-2], parts[-1]))
    return out


def mounts(service: dict) -> list[tuple[str, str]]:
    """(source, target) of a service's volumes (short syntax or long)."""
    out = []
    for v in service.get("volumes") or []:
        if isinstance(v, dict):
            out.append((str(v.get("source", "")), str(v["target"])))
        else:
            source, _, rest = str(v).partition(":")
            out.append((source, rest.split(":")[0]))
    return out


def is_bind(source: str) -> bool:
    return source.startswith((".", "/", "~"))


def readme_section() -> str:
    text = (ROOT / "docs" / "deploy.md").read_text(encoding="utf-8")
    assert SECTION in text, f"docs/deploy.md has no section {SECTION!r}"
    body = text.split(SECTION, 1)[1]
    return body.split("\n## ", 1)[0]


def readme_commands() -> list[list[str]]:
    """The `docker compose ...` commands of the section's shell blocks, as argument lists."""
    commands = []
    for block in re.findall(r"```sh\n(.*?)```", readme_section(), re.S):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.split("  #")[0].strip()
            if line.startswith("docker compose"):
                commands.append(shlex.split(line))
    return commands


def compose_invocation(args: list[str]) -> dict:
    """`docker compose -f FILE [--profile P] SUBCOMMAND [flags] [SERVICE [COMMAND...]]`."""
    i, files, profiles = 2, [], []
    while args[i].startswith("-"):
        (files if args[i] == "-f" else profiles).append(args[i + 1])
        i += 2
    sub = args[i]
    rest = args[i + 1:]
    j = 0
    while j < len(rest) and rest[j].startswith("-"):
        j += 1
    return {"files": files, "profiles": profiles, "sub": sub,
            "service": rest[j] if j < len(rest) else None, "command": rest[j + 1:]}


# -- the checks -----------------------------------------------------------------------------

def structure_problems(c: dict) -> list[str]:
    services = c.get("services") or {}
    problems = [f"no service {n!r}" for n in REQUIRED if n not in services]
    if problems:
        return problems
    kafka = services["kafka"]
    if not str(kafka.get("image", "")).startswith("apache/kafka:"):
        problems.append("kafka: expected the official apache/kafka image")
    env = kafka_env(c)
    if set(env.get("KAFKA_PROCESS_ROLES", "").split(",")) != {"broker", "controller"}:
        problems.append("kafka: not a single KRaft node (process.roles broker,controller)")
    if any("ZOOKEEPER" in k for k in env):
        problems.append("kafka: ZooKeeper settings in a KRaft node")
    declared = listeners(env.get("KAFKA_LISTENERS", ""))
    advertised = listeners(env.get("KAFKA_ADVERTISED_LISTENERS", ""))
    controller = env.get("KAFKA_CONTROLLER_LISTENER_NAMES", "")
    voters = env.get("KAFKA_CONTROLLER_QUORUM_VOTERS", "")
    if controller not in declared or not voters.endswith(f":{declared.get(controller, ('', '?'))[1]}"):
        problems.append("kafka: the controller quorum voters do not name the controller listener")
    for name, (_host, port) in advertised.items():
        if declared.get(name, (None, None))[1] != port:
            problems.append(f"kafka: advertised listener {name} port {port} is not listened on")
    inter = env.get("KAFKA_INTER_BROKER_LISTENER_NAME", "")
    if advertised.get(inter, ("",))[0] not in {"kafka", kafka.get("hostname")}:
        problems.append("kafka: no listener advertised under the service name for the network")
    published = dict(host_ports(kafka))
    host_listeners = [p for n, (h, p) in advertised.items() if h == "localhost"]
    if not host_listeners or not any(published.get(p) == p for p in host_listeners):
        problems.append("kafka: no listener advertised as localhost:<port> with that port published")
    redis_cmd = " ".join(argv(services["redis"].get("command")))
    if "--appendonly yes" not in redis_cmd:
        problems.append("redis: AOF persistence is off (need --appendonly yes)")
    for name, target in (("kafka", "/var/lib/kafka/data"), ("redis", "/data"),
                         ("postgres", "/var/lib/postgresql/data")):
        named = [s for s, t in mounts(services[name]) if t == target and not is_bind(s)]
        if not named or not all(s in (c.get("volumes") or {}) for s in named):
            problems.append(f"{name}: its data at {target} is not on a declared named volume")
    if (env.get("KAFKA_LOG_DIRS") or "/var/lib/kafka/data") != "/var/lib/kafka/data":
        problems.append("kafka: KAFKA_LOG_DIRS is not the mounted data volume")
    return problems


def image_problems(c: dict) -> list[str]:
    problems = []
    for name, service in c["services"].items():
        if "build" not in service:
            continue
        build = service["build"]
        context = (DOCKER / (build if isinstance(build, str) else build.get("context", "."))).resolve()
        if not context.is_dir():
            problems.append(f"{name}: build context {context} does not exist")
        elif not dockerfile_path(c, name).is_file():
            problems.append(f"{name}: Dockerfile {dockerfile_path(c, name)} does not exist")
        elif context == ROOT and not (ROOT / ".dockerignore").is_file():
            problems.append("the build context is the repository but it has no .dockerignore")
    for name in ("spark-master", "spark-worker", "sqe"):
        if "build" not in c["services"][name]:
            problems.append(f"{name}: not the project's image (Spark and sqe versions must match)")
    if problems:
        return problems
    facts = project_image(c)
    if not (facts["base"] or "").startswith("python:3.11"):
        problems.append(f"Dockerfile: base image {facts['base']}, expected python:3.11")
    if "openjdk-17-jre" not in facts["text"]:
        problems.append("Dockerfile: no Java 17 JRE")
    source = re.search(r"^COPY\s+\.\s+(\S+)", facts["text"], re.M)
    if not source or not re.search(rf'pip install "?{re.escape(source.group(1))}(\[[^\]]*\])?"?\s',
                                   facts["text"]):
        problems.append("Dockerfile: the repository is not pip-installed (COPY . DIR, pip install DIR)")
    if facts["submit"] is None:
        problems.append("Dockerfile: no link to the script `python -m sqe.cli.submit --path` names")
    for name in ("spark-master", "spark-worker"):
        if argv(c["services"][name].get("command"))[:1] != ["spark-class"]:
            problems.append(f"{name}: not started with spark-class")
    worker = argv(c["services"]["spark-worker"].get("command"))
    if master_url(c) not in worker:
        problems.append(f"spark-worker: does not register with {master_url(c)}")
    return problems


def dockerignore_problems() -> list[str]:
    """Files the image needs must not be excluded from the build context."""
    patterns = [p.strip().rstrip("/") for p in (ROOT / ".dockerignore").read_text().splitlines()
                if p.strip() and not p.startswith("#")]
    needed = ["pyproject.toml", "README.md", "sqe/cli/submit.py", "sqe/ledger/hwm.py",
              "partitioners/__init__.py", "topologies/enrich.yaml", CONF]
    return [f".dockerignore excludes {f}" for f in needed
            if any(fnmatch.fnmatch(f, p) or f.startswith(p + "/") or fnmatch.fnmatch(f, p + "/*")
                   for p in patterns)]


def submit_commands(c: dict) -> dict[str, list[str]]:
    return {n: argv(s.get("command")) for n, s in c["services"].items()
            if argv(s.get("command"))[:1] == ["spark-submit"]}


def submit_problems(c: dict, where: str, args: list[str]) -> list[str]:
    """A spark-submit of a topology: the master, the script, the files it names."""
    facts = project_image(c)
    s = parse_submit(args)
    problems = []
    if s["options"].get("--master") != [master_url(c)]:
        problems.append(f"{where}: --master {s['options'].get('--master')}, expected {master_url(c)}")
    if s["resource"] != facts["submit"]:
        problems.append(f"{where}: runs {s['resource']}, not {facts['submit']} (sqe/cli/submit.py)")
    for path in [s["topology"], *s["configs"]]:
        if path is None or Path(path).is_absolute() or not (ROOT / path).is_file():
            problems.append(f"{where}: {path} is not a file of the repository")
    if not s["configs"]:
        problems.append(f"{where}: no --config")
    return problems


def driver_problems(c: dict) -> list[str]:
    """What a service mounts exists; what a driver names exists in the repository and sits
    where its command expects it; the worker shares the checkpoint volume at the same path."""
    facts = project_image(c)
    workdir = facts["workdir"]
    problems = []
    drivers = {"sqe", *submit_commands(c)}
    if not submit_commands(c):
        problems.append("no service runs spark-submit on a topology")
    for name, args in submit_commands(c).items():
        problems += submit_problems(c, name, args)
    worker_mounts = set(mounts(c["services"]["spark-worker"]))
    for name, service in sorted(c["services"].items()):
        for source, target in mounts(service):
            if is_bind(source):
                local = (DOCKER / source).resolve()
                if not local.exists():
                    problems.append(f"{name}: mounts {source}, which does not exist")
                elif name in drivers and workdir and target.startswith(workdir + "/") and (
                        not local.is_relative_to(ROOT)
                        or Path(target).relative_to(workdir) != local.relative_to(ROOT)):
                    problems.append(f"{name}: {source} is mounted at {target}, not at its "
                                    f"repository path under {workdir}")
            elif source not in (c.get("volumes") or {}):
                problems.append(f"{name}: volume {source} is not declared")
            elif name in drivers and "checkpoint" in target and (source, target) not in worker_mounts:
                problems.append(f"{name}: spark-worker does not mount {source} at {target}")
    for name in sorted(drivers):
        needs = c["services"][name].get("depends_on") or {}
        for dep, cond in (("kafka", "service_healthy"), ("redis", "service_healthy"),
                          ("spark-worker", "service_healthy"),
                          ("topics", "service_completed_successfully")):
            if not isinstance(needs, dict) or (needs.get(dep) or {}).get("condition") != cond:
                problems.append(f"{name}: does not wait for {dep} ({cond})")
    return problems


def dependency_problems(c: dict) -> list[str]:
    services = c["services"]
    problems = []
    for name, service in services.items():
        needs = service.get("depends_on") or {}
        for dep in needs:
            if dep not in services:
                problems.append(f"{name}: depends on {dep}, which is not a service")
                continue
            cond = needs[dep].get("condition") if isinstance(needs, dict) else "service_started"
            if cond == "service_healthy" and not (services[dep].get("healthcheck") or {}).get("test"):
                problems.append(f"{name}: waits for {dep} to be healthy, which has no healthcheck")
            if cond == "service_completed_successfully" and services[dep].get("restart") in (
                    "always", "unless-stopped"):
                problems.append(f"{name}: waits for {dep} to complete, which always restarts")
    if (services["spark-worker"].get("depends_on") or {}).get("spark-master", {}).get(
            "condition") != "service_healthy":
        problems.append("spark-worker: does not wait for a healthy spark-master")
    for name in ("kafka", "redis", "postgres", "spark-master", "spark-worker"):
        if not (services[name].get("healthcheck") or {}).get("test"):
            problems.append(f"{name}: no healthcheck")
    # no cycles: start order exists
    order: list[str] = []
    pending = dict.fromkeys(services)
    while pending:
        ready = [n for n in pending if all(d in order for d in (services[n].get("depends_on") or {})
                                           if d in services)]
        if not ready:
            problems.append(f"depends_on has a cycle among {sorted(pending)}")
            break
        for n in ready:
            order.append(n)
            del pending[n]
    return problems


def port_problems(c: dict) -> list[str]:
    seen: dict[str, str] = {}
    problems = []
    for name, service in c["services"].items():
        for published, _ in host_ports(service):
            if not published:
                continue
            if published in seen:
                problems.append(f"host port {published}: {seen[published]} and {name}")
            seen.setdefault(published, name)
    return problems


def conf_problems(c: dict) -> list[str]:
    """docker/conf.yaml points at the compose services, as seen from inside the network."""
    conf = yaml.safe_load((ROOT / CONF).read_text(encoding="utf-8"))
    problems = []
    if set(conf) != {"SQE", "Spark"}:
        problems.append(f"{CONF}: sections {sorted(conf)}, expected SQE and Spark")
        return problems
    sqe = conf["SQE"]
    kafka = internal_kafka(c)
    for key in ("jw.sqe.spout.kafka.brokers", "jw.sqe.state.kafka.brokers"):
        if sqe.get(key) not in ([kafka], kafka):
            problems.append(f"{CONF}: {key} is {sqe.get(key)}, expected {kafka}")
    hosts = set(c["services"]) | {s.get("hostname") for s in c["services"].values()}
    url = re.match(r"redis://([^:/]+):(\d+)/", str(sqe.get("jw.sqe.spout.kafka.filterReplays.redis.url")))
    if not url or url.group(1) not in hosts:
        problems.append(f"{CONF}: the HWM store is not a compose service")
    elif (sqe.get("jw.sqe.state.redis.host"), str(sqe.get("jw.sqe.state.redis.port"))) != url.groups():
        problems.append(f"{CONF}: the Redis state is not the HWM store's server (no atomic commit)")
    dsn = sqe.get("jw.sqe.state.postgres.dsn")
    if dsn is not None:
        m = re.match(r"postgres(?:ql)?://([^:@]+):([^@]+)@([^:/]+):(\d+)/(\w+)", dsn)
        env = c["services"]["postgres"].get("environment") or {}
        if not m or m.group(3) not in hosts or (m.group(1), m.group(2), m.group(5)) != (
                env.get("POSTGRES_USER", "postgres"), env.get("POSTGRES_PASSWORD"),
                env.get("POSTGRES_DB", env.get("POSTGRES_USER", "postgres"))):
            problems.append(f"{CONF}: jw.sqe.state.postgres.dsn does not match the postgres service")
    if "spark.master" in conf["Spark"]:
        problems.append(f"{CONF}: spark.master belongs on the spark-submit line")
    return problems


def readme_problems(c: dict) -> list[str]:
    """The section's commands name this compose file, its services, the master URL and the
    submit script of the image, and files of the repository."""
    import pyspark

    problems = []
    commands = readme_commands()
    subs = {compose_invocation(a)["sub"] for a in commands}
    problems += [f"docs/deploy.md: no `docker compose {sub}` command" for sub in ("up", "run", "exec")
                 if sub not in subs]
    if not re.search(r"`docker compose -f docker/compose\.yaml[^`]*\bdown`", readme_section()):
        problems.append("docs/deploy.md: does not say how to stop the stack (docker compose ... down)")
    submits = 0
    for args in commands:
        inv = compose_invocation(args)
        line = " ".join(args)
        if [(ROOT / f).resolve() for f in inv["files"]] != [COMPOSE_FILE]:
            problems.append(f"docs/deploy.md: {line!r} does not use -f docker/compose.yaml")
        if inv["sub"] in ("run", "exec", "logs") and inv["service"] not in c["services"]:
            problems.append(f"docs/deploy.md: {line!r} names no service of the compose file")
        for profile in inv["profiles"]:
            if not any(profile in (s.get("profiles") or []) for s in c["services"].values()):
                problems.append(f"docs/deploy.md: profile {profile} is not in the compose file")
        cmd = inv["command"]
        if cmd[:1] == ["spark-submit"]:
            submits += 1
            problems += submit_problems(c, f"docs/deploy.md: spark-submit of {parse_submit(cmd)['topology']}",
                                        cmd)
            for package in parse_submit(cmd)["options"].get("--packages", []):
                m = re.fullmatch(r"org\.apache\.spark:spark-sql-kafka-0-10_2\.13:(\S+)", package)
                if not m or m.group(1) != pyspark.__version__:
                    problems.append(f"docs/deploy.md: --packages {package}, expected "
                                    f"spark-sql-kafka-0-10_2.13:{pyspark.__version__}")
        if "--brokers" in cmd and cmd[cmd.index("--brokers") + 1] != internal_kafka(c):
            problems.append(f"docs/deploy.md: {line!r} does not use Kafka at {internal_kafka(c)}")
        if "--redis" in cmd:
            host = re.match(r"redis://([^:/]+)", cmd[cmd.index("--redis") + 1])
            if not host or host.group(1) not in c["services"]:
                problems.append(f"docs/deploy.md: {line!r} does not use the redis service")
    if submits < 2:
        problems.append("docs/deploy.md: expected spark-submit lines for enrich.yaml and load.yaml")
    for path in set(re.findall(r"\b((?:topologies|docker|conf)/[\w./-]+\.(?:yaml|json))\b",
                               readme_section())):
        if not (ROOT / path).is_file():
            problems.append(f"docs/deploy.md: {path} does not exist")
    return problems


def readme_validations() -> list[list[str]]:
    """`sqe validate` arguments for every spark-submit of the docs section."""
    out = []
    for args in readme_commands():
        cmd = compose_invocation(args)["command"]
        if cmd[:1] != ["spark-submit"]:
            continue
        s = parse_submit(cmd)
        conf = [f"--conf={v[len('spark.'):]}" for v in s["options"].get("--conf", [])
                if v.startswith("spark.jw.sqe.")]
        out.append([str(ROOT / s["topology"]),
                    *[f"--config={ROOT / f}" for f in s["configs"]], *conf])
    return out


# -- the tests ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def compose() -> dict:
    return load_compose()


def test_stack_has_kafka_kraft_redis_aof_postgres_and_spark(compose):
    assert structure_problems(compose) == []


def test_one_project_image_for_master_worker_and_driver(compose):
    assert image_problems(compose) == []
    assert dockerignore_problems() == []


def test_spark_submit_services_name_the_master_and_existing_files(compose):
    assert driver_problems(compose) == []


def test_depends_on_and_healthchecks_give_a_start_order(compose):
    assert dependency_problems(compose) == []


def test_published_host_ports_do_not_collide(compose):
    assert port_problems(compose) == []


def test_docker_conf_points_at_the_compose_services(compose):
    assert conf_problems(compose) == []


def test_sqe_validate_accepts_the_topologies_with_docker_conf(compose, capsys):
    files = [str(ROOT / a) for a in {parse_submit(cmd)["topology"]
                                     for cmd in submit_commands(compose).values()}]
    assert len(files) == 2
    assert main(["validate", *sorted(files), "--config", str(ROOT / CONF)]) == 0
    assert capsys.readouterr().out.count("OK ") == 2


def test_readme_section_commands_match_the_stack(compose):
    assert readme_problems(compose) == []


def test_sqe_validate_accepts_every_spark_submit_of_the_readme(capsys):
    runs = readme_validations()
    assert {Path(r[0]).name for r in runs} == {"enrich.yaml", "load.yaml"}
    assert any("--conf=jw.sqe.spout.kafka.format=native" in r for r in runs)
    for run in runs:
        assert main(["validate", *run]) == 0, run
    assert "error" not in capsys.readouterr().err


# -- the checks catch what they are for ------------------------------------------------------

def _drop_appendonly(c: dict) -> None:
    c["services"]["redis"]["command"] = ["redis-server"]


def _zookeeper_mode(c: dict) -> None:
    c["services"]["kafka"]["environment"]["KAFKA_PROCESS_ROLES"] = "broker"


def _missing_topology(c: dict) -> None:
    c["services"]["enrich"]["command"][-3] = "topologies/missing.yaml"


def _wrong_master(c: dict) -> None:
    args = c["services"]["load"]["command"]
    args[args.index("--master") + 1] = "spark://localhost:7077"


def _unknown_dependency(c: dict) -> None:
    c["services"]["sqe"]["depends_on"]["zookeeper"] = {"condition": "service_started"}


def _port_collision(c: dict) -> None:
    c["services"]["postgres"]["ports"] = ["6379:5432"]


def _missing_mount(c: dict) -> None:
    c["services"]["redis"]["volumes"] = ["../no-such-dir:/data"]


def _mounted_elsewhere(c: dict) -> None:
    c["services"]["sqe"]["volumes"][0] = "../topologies:/opt/sqe/flows:ro"


def _healthy_without_healthcheck(c: dict) -> None:
    del c["services"]["redis"]["healthcheck"]


def _missing_build_context(c: dict) -> None:
    c["services"]["spark-worker"]["build"] = {"context": "../nowhere", "dockerfile": "Dockerfile"}


def _no_shared_checkpoints(c: dict) -> None:
    c["services"]["spark-worker"]["volumes"] = []


@pytest.mark.parametrize("breakage, check, expected", [
    (_drop_appendonly, structure_problems, "redis: AOF persistence is off"),
    (_zookeeper_mode, structure_problems, "not a single KRaft node"),
    (_missing_topology, driver_problems, "topologies/missing.yaml is not a file"),
    (_wrong_master, driver_problems, "expected spark://spark-master:7077"),
    (_unknown_dependency, dependency_problems, "depends on zookeeper, which is not a service"),
    (_port_collision, port_problems, "host port 6379"),
    (_missing_mount, driver_problems, "redis: mounts ../no-such-dir, which does not exist"),
    (_mounted_elsewhere, driver_problems, "not at its repository path under /opt/sqe"),
    (_healthy_without_healthcheck, dependency_problems,
     "waits for redis to be healthy, which has no healthcheck"),
    (_missing_build_context, image_problems, "does not exist"),
    (_no_shared_checkpoints, driver_problems, "spark-worker does not mount checkpoints"),
])
def test_a_broken_compose_file_is_noticed(compose, breakage, check, expected):
    broken = copy.deepcopy(compose)
    breakage(broken)
    found = check(broken)
    assert any(expected in p for p in found), found
