"""deploy/kubernetes/ renders, validates against Kubernetes' API schema (strict, for the
oldest Kubernetes docs/kubernetes.md supports) and says only true things: real settings,
real commands and options, the package's version, alerts.yml's rules."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
import yaml
from kubernetes_validate import utils as kv

import fivetran_events
from fivetran_events import acl
from fivetran_events.settings import SECRETS_DIR_VARIABLE, LogSettings, Settings
from webhook_app.cli import main as cli

from .kube import (
    IMAGE_ARGS,
    IMAGE_FILES,
    KUSTOMIZATIONS,
    OVERLAYS,
    ROOT,
    Container,
    containers,
    kustomize,
    named,
    ours,
    render,
)

#: The oldest Kubernetes docs/kubernetes.md supports, and the newest the schemas know.
OLDEST_KUBERNETES = "1.25"
CUSTOM_KINDS = {"ServiceMonitor", "PrometheusRule"}
SECRETS_DIR = "/run/secrets/fivetran-events"
WITH_WORKLOADS = sorted(set(KUSTOMIZATIONS) - {"prometheus-operator"})


class TestRender:
    @pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
    def test_kubectl_kustomize_renders_it(self, name: str) -> None:
        assert render(name)

    def test_an_overlay_lives_outside_its_base(self) -> None:
        """Kustomize refuses a base that contains its overlay (a cycle)."""
        assert not (KUSTOMIZATIONS["base"] / "overlays").exists()
        assert {p.name for p in OVERLAYS.iterdir()} == {
            "managed-redis",
            "prometheus-operator",
            "sentinel",
        }

    def test_a_broken_reference_fails_the_render(self, tmp_path: Path) -> None:
        (tmp_path / "kustomization.yaml").write_text("resources:\n  - missing.yaml\n")
        assert kustomize(tmp_path).returncode != 0


class TestSchema:
    @pytest.mark.parametrize("version", [OLDEST_KUBERNETES, kv.latest_version()])
    @pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
    def test_every_core_object_validates_strictly(self, name: str, version: str) -> None:
        checked = []
        for obj in render(name):
            if obj["kind"] in CUSTOM_KINDS:
                continue
            kv.validate(obj, version, strict=True)
            checked.append(obj["kind"])
        assert checked or name == "prometheus-operator"

    def test_strict_validation_refuses_an_unknown_field(self) -> None:
        web = named(render("base"), "Deployment", "fivetran-events-web")
        typo = yaml.safe_load(yaml.safe_dump(web))
        typo["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
        with pytest.raises(kv.ValidationError):
            kv.validate(typo, OLDEST_KUBERNETES, strict=True)

    def test_the_docs_secrets_are_the_ones_mounted(self) -> None:
        """docs/kubernetes.md's table of Secrets names what the manifests read, key for
        key (Secret volumes, secretKeyRef, the ServiceMonitor's credentials)."""
        read: set[tuple[str, str]] = set()
        for name in KUSTOMIZATIONS:
            for c in containers(render(name)):
                for mount, volume in c.mounts().items():
                    if "secret" in volume or "projected" in volume:
                        read |= set(c.secret_files(mount).values())
                        if "secret" in volume and "items" not in volume["secret"]:
                            read.add((volume["secret"]["secretName"], "*"))
                for value in c.env(render(name)).values():
                    if value.startswith("secret:"):
                        secret, key = value[len("secret:") :].split("/")
                        read.add((secret, key))
        for monitor in render("prometheus-operator"):
            for endpoint in monitor.get("spec", {}).get("endpoints", []):
                ref = endpoint.get("authorization", {}).get("credentials")
                if ref:
                    read.add((ref["name"], ref["key"]))
        documented = set()
        for line in (ROOT / "docs" / "kubernetes.md").read_text().splitlines():
            cells = line.split("|")
            if len(cells) == 5 and cells[1].strip().startswith("`fivetran-events"):
                secret = cells[1].split("`")[1]
                documented |= {(secret, key) for key in cells[2].split("`")[1::2]}
        whole = {secret for secret, key in read if key == "*"}
        assert documented == {(s, k) for s, k in read if k != "*"} | {
            (s, k) for s, k in documented if s in whole
        }

    def test_the_docs_overlay_of_your_own_renders(self, tmp_path: Path) -> None:
        """docs/kubernetes.md's folder of your own, beside this repository: its image,
        host and setting reach the rendered objects."""
        docs = (ROOT / "docs" / "kubernetes.md").read_text()
        (tmp_path / "fivetran-events").symlink_to(ROOT)  # the checkout beside it
        mine = tmp_path / "my-fivetran-events"
        mine.mkdir()
        for block in docs.split("```yaml\n")[1:]:
            text = block.split("```")[0]
            header = text.splitlines()[0]
            if header.startswith("# my-fivetran-events/"):
                (mine / header.split("/", 1)[1]).write_text(text)
        out = kustomize(mine)
        assert out.returncode == 0, out.stderr
        objects = tuple(yaml.safe_load_all(out.stdout))
        assert {o["metadata"].get("namespace") for o in objects} == {"fivetran-events"}
        ingress = named(objects, "Ingress", "fivetran-events")
        assert ingress["spec"]["rules"][0]["host"] == "events.example.com"
        [web_] = [c for c in containers(objects) if c.name == "fivetran-events-web/web"]
        assert (
            web_.spec["image"]
            == f"registry.example.com/fivetran-events:{fivetran_events.__version__}"
        )
        env = web_.env(objects)
        assert env["FIVETRAN_EVENTS_PUBLIC_URL"] == "https://events.example.com"
        assert env["FIVETRAN_EVENTS_REDIS_WAIT_REPLICAS"] == "1"

    def test_the_oldest_supported_kubernetes_is_the_docs(self) -> None:
        docs = (ROOT / "docs" / "kubernetes.md").read_text()
        assert f"Kubernetes {OLDEST_KUBERNETES} or newer" in docs


class TestPrometheusRule:
    def test_holds_alerts_yml_rules(self) -> None:
        """The PrometheusRule's groups are deploy/prometheus/alerts.yml's, rule for rule;
        the file's header says how to write it again."""
        alerts = yaml.safe_load((ROOT / "deploy" / "prometheus" / "alerts.yml").read_text())
        written = yaml.safe_load(
            (OVERLAYS / "prometheus-operator" / "prometheusrule.yaml").read_text()
        )
        assert written["spec"]["groups"] == alerts["groups"]
        # kustomize re-folds a folded expression with an extra line break (PromQL ignores
        # it): what is applied holds the same rules up to whitespace.
        rule = named(render("prometheus-operator"), "PrometheusRule", "fivetran-events")
        assert squeezed(rule["spec"]["groups"]) == squeezed(alerts["groups"])

    def test_web_is_scraped_with_a_read_api_token(self) -> None:
        """Without one, /metrics leaves out the per-connector series the alerts use."""
        monitor = named(render("prometheus-operator"), "ServiceMonitor", "fivetran-events-web")
        [endpoint] = monitor["spec"]["endpoints"]
        assert endpoint["authorization"]["type"] == "Bearer"
        assert endpoint["authorization"]["credentials"]["name"] == "fivetran-events-prometheus"

    def test_monitors_select_the_services(self) -> None:
        services = {o["metadata"]["name"]: o for o in render("base") if o["kind"] == "Service"}
        for monitor in render("prometheus-operator"):
            if monitor["kind"] != "ServiceMonitor":
                continue
            service = services[monitor["metadata"]["name"]]
            labels = monitor["spec"]["selector"]["matchLabels"]
            assert labels.items() <= service["metadata"]["labels"].items()
            ports = {p["name"] for p in service["spec"]["ports"]}
            assert {e["port"] for e in monitor["spec"]["endpoints"]} <= ports


def squeezed(value: object) -> object:
    """``value`` with every run of whitespace in its strings made one space."""
    if isinstance(value, dict):
        return {k: squeezed(v) for k, v in value.items()}
    if isinstance(value, list):
        return [squeezed(v) for v in value]
    return " ".join(value.split()) if isinstance(value, str) else value


def setting_names() -> set[str]:
    """Every FIVETRAN_EVENTS_* variable something reads: the settings' fields, the
    secrets folder, and the CLI's options that read a variable."""
    names = {SECRETS_DIR_VARIABLE, acl.APP_PASSWORD_VARIABLE, acl.AIRFLOW_PASSWORD_VARIABLE}
    for model in (Settings, LogSettings):
        names |= {f"FIVETRAN_EVENTS_{field.upper()}" for field in model.model_fields}

    def walk(ctx: click.Context) -> None:
        for param in ctx.command.params:
            envvars = param.envvar if isinstance(param.envvar, list | tuple) else [param.envvar]
            names.update(str(e) for e in envvars if e)
        if isinstance(ctx.command, click.Group):  # its commands load when asked for
            for name in ctx.command.list_commands(ctx):
                sub = ctx.command.get_command(ctx, name)
                if sub is not None:
                    walk(click.Context(sub, parent=ctx, info_name=name))

    walk(click.Context(cli, info_name="fivetran-events"))
    return names


class TestWhatTheManifestsSay:
    @pytest.mark.parametrize("name", WITH_WORKLOADS)
    def test_every_fivetran_events_name_is_a_setting(self, name: str) -> None:
        """Variables (ConfigMaps, env) and secret files (named like the variables)."""
        known = setting_names()
        used: set[str] = set()
        for obj in render(name):
            if obj["kind"] == "ConfigMap":
                used |= set(obj.get("data", {}))
        for c in containers(render(name)):
            used |= {var["name"] for var in c.spec.get("env", [])}
            if SECRETS_DIR in c.mounts():
                used |= {f.upper() for f in c.secret_files(SECRETS_DIR)}
        ours_ = {n for n in used if n.startswith("FIVETRAN_EVENTS_")}
        assert ours_, "no FIVETRAN_EVENTS_* name found"
        assert not ours_ - known, f"not settings: {sorted(ours_ - known)}"

    def test_a_renamed_setting_is_caught(self) -> None:
        assert "FIVETRAN_EVENTS_AIRFLOW_USERNAME" in setting_names()
        assert "FIVETRAN_EVENTS_AIRFLOW_USER" not in setting_names()

    @pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
    def test_commands_are_real_commands_with_real_options(self, name: str) -> None:
        """click parses each container's command line as the CLI would run it."""
        for c in ours(name):
            argv = [IMAGE_ARGS.get(a, a) for a in c.argv()]
            assert argv[0] == "fivetran-events", c.name
            parse(argv[1:])

    def test_a_renamed_option_is_caught(self) -> None:
        with pytest.raises(click.UsageError, match="--metrics-hots"):
            parse(["worker", "--metrics-hots", "0.0.0.0"])

    def test_the_dockerfile_puts_the_files_where_the_commands_look(self) -> None:
        dockerfile = (ROOT / "deploy" / "Dockerfile").read_text()
        for image_path, local in IMAGE_FILES.items():
            assert f"COPY {local.relative_to(ROOT)} {image_path}" in dockerfile

    @pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
    def test_images_are_the_package_version(self, name: str) -> None:
        for c in ours(name):
            assert c.spec["image"] == f"fivetran-events:{fivetran_events.__version__}", c.name


def parse(args: list[str]) -> None:
    """Resolve ``fivetran-events ARGS`` to its command and parse the options, as click does
    before it runs anything."""
    with cli.make_context("fivetran-events", list(args), resilient_parsing=True) as ctx:
        name, command, rest = cli.resolve_command(ctx, list(args))
        assert command is not None, f"no command {args[0]}"
        with command.make_context(name, rest, parent=ctx):
            pass


def web() -> Container:
    [c] = [c for c in ours("base") if c.name == "fivetran-events-web/web"]
    return c


def worker() -> Container:
    [c] = [c for c in ours("base") if c.name == "fivetran-events-worker/worker"]
    return c


class TestWorkloads:
    def test_web_scales_with_probes_and_a_budget(self) -> None:
        objects = render("base")
        deployment = web().workload
        assert deployment["spec"]["replicas"] >= 2
        assert web().spec["readinessProbe"]["httpGet"]["path"] == "/readyz"
        assert web().spec["livenessProbe"]["httpGet"]["path"] == "/healthz"
        budget = named(objects, "PodDisruptionBudget", "fivetran-events-web")
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert budget["spec"]["selector"]["matchLabels"].items() <= labels.items()
        assert budget["spec"]["maxUnavailable"] == 1

    def test_worker_declares_its_metrics_port(self) -> None:
        argv = worker().argv()
        port = worker().port("metrics")
        assert argv[argv.index("--metrics-port") + 1] == str(port)
        assert argv[argv.index("--metrics-host") + 1] == "0.0.0.0"

    @pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
    def test_every_container_is_locked_down(self, name: str) -> None:
        for c in containers(render(name)):
            pod, sc = c.pod.get("securityContext", {}), c.spec["securityContext"]
            assert sc["runAsNonRoot"] or pod["runAsNonRoot"], c.name
            assert sc["allowPrivilegeEscalation"] is False, c.name
            assert sc["readOnlyRootFilesystem"] is True, c.name
            assert sc["capabilities"]["drop"] == ["ALL"], c.name
            assert {"cpu", "memory"} <= set(c.spec["resources"]["requests"]), c.name
            assert {"cpu", "memory"} <= set(c.spec["resources"]["limits"]), c.name
            assert c.pod["automountServiceAccountToken"] is False, c.name

    def test_what_our_containers_write_is_an_empty_dir(self) -> None:
        for c in (web(), worker()):
            env = c.env(render("base"))
            for path in ("/tmp", env["PROMETHEUS_MULTIPROC_DIR"]):
                assert "emptyDir" in c.mounts()[path], (c.name, path)


class TestSecrets:
    SECRET_WORDS = re.compile(r"password|secret|token|key|redis_url", re.I)

    @pytest.mark.parametrize("name", sorted(KUSTOMIZATIONS))
    def test_nothing_secret_in_a_config_map_or_an_env_value(self, name: str) -> None:
        objects = render(name)
        assert not [o for o in objects if o["kind"] == "Secret"], "Secrets are created apart"
        for obj in objects:
            if obj["kind"] == "ConfigMap" and not obj["metadata"]["name"].startswith(
                "fivetran-events-redis-scripts"
            ):
                secret = [
                    k
                    for k in obj["data"]
                    if self.SECRET_WORDS.search(k) and k != SECRETS_DIR_VARIABLE
                ]
                assert not secret, secret
        for c in containers(objects):
            for var in c.spec.get("env", []):
                if self.SECRET_WORDS.search(var["name"]) or var["name"] == "REDISCLI_AUTH":
                    assert "secretKeyRef" in var.get("valueFrom", {}), (c.name, var["name"])

    def test_settings_secrets_are_files_of_the_secrets_dir(self) -> None:
        assert web().env(render("base"))[SECRETS_DIR_VARIABLE] == SECRETS_DIR
        assert set(web().secret_files(SECRETS_DIR)) == {
            "fivetran_events_redis_url",
            "fivetran_events_webhook_secrets",
            "fivetran_events_api_tokens",
        }
        assert set(worker().secret_files(SECRETS_DIR)) == {
            "fivetran_events_redis_url",
            "fivetran_events_airflow_password",
            "airflow_token",  # a managed Airflow's, for FIVETRAN_EVENTS_AIRFLOW_TOKEN_FILE
            "fivetran_events_fivetran_api_key",
            "fivetran_events_fivetran_api_secret",
        }

    def test_the_two_redis_users_are_wired_in(self) -> None:
        """Redis gets both users from `fivetran-events redis acl` (the passwords from the
        Secret); the sentinels admit the same users for discovery only."""
        [init] = [c for c in ours("sentinel") if c.init]
        assert init.argv()[:3] == ["fivetran-events", "redis", "acl"]
        assert init.env(render("sentinel"))[SECRETS_DIR_VARIABLE] == SECRETS_DIR
        files = init.secret_files(SECRETS_DIR)
        for variable in (acl.APP_PASSWORD_VARIABLE, acl.AIRFLOW_PASSWORD_VARIABLE):
            assert files[variable.lower()] == ("fivetran-events-redis-acl", variable.lower())
        [sentinel] = [c for c in containers(render("sentinel")) if c.spec["name"] == "sentinel"]
        names = sentinel.env(render("sentinel"))
        assert (names["APP_USER"], names["AIRFLOW_USER"]) == (acl.APP_USER, acl.AIRFLOW_USER)


class TestNetwork:
    def test_ingress_exposes_the_webhook_and_the_schemas_only(self) -> None:
        ingress = named(render("base"), "Ingress", "fivetran-events")
        paths = {
            (p["path"], p["pathType"])
            for rule in ingress["spec"]["rules"]
            for p in rule["http"]["paths"]
        }
        assert paths == {("/webhooks/fivetran", "Exact"), ("/schemas/", "Prefix")}

    def test_only_the_ingress_controller_reaches_the_web_port(self) -> None:
        policy = named(render("base"), "NetworkPolicy", "fivetran-events-web")
        [rule] = policy["spec"]["ingress"]
        [peer] = rule["from"]
        assert peer["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "ingress-nginx"
        }
        assert [p["port"] for p in rule["ports"]] == ["http"]
        assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}

    def test_workers_reach_redis_airflow_fivetran_and_dns_only(self) -> None:
        policy = named(render("base"), "NetworkPolicy", "fivetran-events-worker")
        assert "ingress" not in policy["spec"], "nothing reaches a worker in the base"
        ports = sorted(p["port"] for rule in policy["spec"]["egress"] for p in rule["ports"])
        assert ports == [53, 53, 443, 6379, 8080, 26379]
