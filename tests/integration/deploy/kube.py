"""deploy/kubernetes/ rendered by ``kubectl kustomize``, and read as the cluster reads it:
the objects of each overlay, their containers, and what those containers are given."""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[3]
KUBERNETES = ROOT / "deploy" / "kubernetes"
BASE = KUBERNETES / "base"
OVERLAYS = KUBERNETES / "overlays"
#: What `kubectl kustomize` renders: the base and every overlay.
KUSTOMIZATIONS = {"base": BASE, **{p.name: p for p in sorted(OVERLAYS.iterdir()) if p.is_dir()}}
#: Files the image holds (deploy/Dockerfile's COPY), as they lie in this repository.
IMAGE_FILES = {"/etc/fivetran-events/gunicorn.conf.py": ROOT / "deploy" / "gunicorn.conf.py"}
#: The same, as the text a command line holds.
IMAGE_ARGS = {image: str(here) for image, here in IMAGE_FILES.items()}
WORKLOADS = ("Deployment", "StatefulSet")

Obj = dict[str, Any]


def kubectl() -> str:
    found = shutil.which("kubectl")
    assert found, "kubectl is missing: `make install` installs Debian's kubernetes-client"
    return found


def kustomize(folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [kubectl(), "kustomize", str(folder)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@functools.cache
def render(name: str) -> tuple[Obj, ...]:
    """The objects ``kubectl kustomize`` renders for the base or an overlay."""
    out = kustomize(KUSTOMIZATIONS[name])
    assert out.returncode == 0, out.stderr
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


def named(objects: tuple[Obj, ...], kind: str, name: str) -> Obj:
    found = [o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


@dataclass(frozen=True)
class Container:
    """One container of a workload, with the pod spec it runs in."""

    workload: Obj
    spec: Obj
    init: bool

    @property
    def pod(self) -> Obj:
        return dict(self.workload["spec"]["template"]["spec"])

    @property
    def name(self) -> str:
        return f"{self.workload['metadata']['name']}/{self.spec['name']}"

    @property
    def ours(self) -> bool:
        """Runs this project's image."""
        return str(self.spec["image"]).split(":")[0].endswith("fivetran-events")

    def argv(self) -> list[str]:
        """The ``fivetran-events`` command line, also inside ``sh -c "exec ... > file"``."""
        command = [*self.spec.get("command", []), *self.spec.get("args", [])]
        if command[:2] == ["sh", "-c"]:
            words = command[2].split()
            words = words[1:] if words[0] == "exec" else words
            command = words[: words.index(">")] if ">" in words else words
        return command

    def env(self, objects: tuple[Obj, ...]) -> dict[str, str]:
        """Its environment as Kubernetes builds it: ConfigMaps (envFrom), then ``env``
        values; ``secretKeyRef`` variables as ``secret:NAME/KEY``, the downward API's as
        ``field:PATH``."""
        out: dict[str, str] = {}
        for source in self.spec.get("envFrom", []):
            ref = source["configMapRef"]["name"]
            out.update(named(objects, "ConfigMap", ref)["data"])
        for var in self.spec.get("env", []):
            if "value" in var:
                out[var["name"]] = str(var["value"])
            elif "fieldRef" in var["valueFrom"]:
                out[var["name"]] = f"field:{var['valueFrom']['fieldRef']['fieldPath']}"
            else:
                ref = var["valueFrom"]["secretKeyRef"]
                out[var["name"]] = f"secret:{ref['name']}/{ref['key']}"
        return out

    def mounts(self) -> dict[str, Obj]:
        """mountPath -> the pod's volume (a StatefulSet's claim: ``persistentVolumeClaim``)."""
        volumes = {v["name"]: v for v in self.pod.get("volumes", [])}
        claim: Obj = {"persistentVolumeClaim": {}}
        return {
            m["mountPath"]: volumes.get(m["name"], claim) for m in self.spec.get("volumeMounts", [])
        }

    def secret_files(self, folder: str) -> dict[str, tuple[str, str]]:
        """File name -> (Secret, key) of the Secret volume (projected or not) mounted at
        ``folder``; a Secret without ``items`` lists none."""
        volume = self.mounts()[folder]
        if "secret" in volume:
            sources = [{"secret": {**volume["secret"], "name": volume["secret"]["secretName"]}}]
        else:
            sources = volume["projected"]["sources"]
        files: dict[str, tuple[str, str]] = {}
        for source in sources:
            secret = source["secret"]
            for item in secret.get("items", []):
                files[item["path"]] = (secret["name"], item["key"])
        return files

    def port(self, ref: str | int) -> int:
        """A probe's port (a name or a number) as the container's port number."""
        for port in self.spec.get("ports", []):
            if ref in (port.get("name"), port["containerPort"]):
                return int(port["containerPort"])
        raise AssertionError(f"{self.name}: no port {ref!r}")


def containers(objects: tuple[Obj, ...]) -> Iterator[Container]:
    for workload in objects:
        if workload["kind"] in WORKLOADS:
            pod = workload["spec"]["template"]["spec"]
            for spec in pod.get("initContainers", []):
                yield Container(workload, spec, init=True)
            for spec in pod["containers"]:
                yield Container(workload, spec, init=False)


def ours(name: str) -> list[Container]:
    return [c for c in containers(render(name)) if c.ours]


def localizer(paths: dict[str, Path], ports: dict[int, int]) -> Callable[[str], str]:
    """Rewrite a container's text (an argument, a variable, a script) for a process here:
    each mount or image path to its local folder or file, in one pass (a local folder
    may itself start like a mount path, e.g. under /tmp), each container port to its
    free port here, and 0.0.0.0 to 127.0.0.1."""
    by_path = {k: str(v) for k, v in paths.items()}
    path_re = re.compile(
        "|".join(re.escape(p) for p in sorted(by_path, key=len, reverse=True)) + r"(?=/|\b|$)"
    )
    port_re = re.compile(r"(?<!\d)(" + "|".join(map(str, ports)) + r")(?!\d)")

    def local(text: str) -> str:
        if by_path:
            text = path_re.sub(lambda m: by_path[m.group(0)], text)
        if ports:
            text = port_re.sub(lambda m: str(ports[int(m.group(0))]), text)
        return text.replace("0.0.0.0", "127.0.0.1")

    return local


def kubelet_secret_folder(folder: Path, files: dict[str, str]) -> None:
    """Write ``files`` as the kubelet writes a Secret volume: the data in a timestamped
    folder, ``..data`` linking to it, and each file a link through ``..data``."""
    data = folder / "..2026_01_01_00_00_00.000000000"
    data.mkdir(parents=True)
    for name, text in files.items():
        (data / name).write_text(text + "\n")
        os.chmod(data / name, 0o440)
        (folder / name).symlink_to(Path("..data") / name)
    (folder / "..data").symlink_to(data.name)
