"""Dataset (Asset) URIs per connector, for DAG authors and the forwarder alike.

Both sides build them from the same settings: a template, or a mapping file (TOML, JSON,
or YAML with PyYAML) naming URIs per connector, the template for the others::

    # fivetran-datasets.toml
    [connectors]
    assimilate_seem = ["postgres://warehouse/public/orders", "fivetran://connector/{connector_id}"]
    other_connector = "s3://lake/raw/other"

Templates and mapped URIs may use {connector_id}, {connector_name}, {connector_type}, {group_id}.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .exceptions import ConfigurationError
from .settings import DEFAULT_URI_TEMPLATE, Settings, check_template, load_settings

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser as a backport (a core dependency there)
    import tomli as tomllib

__all__ = ["DEFAULT_URI_TEMPLATE", "UriMap", "dataset_uri", "dataset_uris", "load_uri_map"]


@dataclass(frozen=True)
class UriMap:
    template: str = DEFAULT_URI_TEMPLATE
    mapping: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def uris(
        self,
        connector_id: str,
        connector_name: str | None = None,
        connector_type: str | None = None,
        group_id: str | None = None,
    ) -> list[str]:
        """Return the URIs a successful sync of ``connector_id`` updates, without duplicates."""
        names = dict(
            connector_name=connector_name, connector_type=connector_type, group_id=group_id
        )
        fill = {k: v or "" for k, v in names.items()}
        templates = self.mapping.get(connector_id, (self.template,))
        return list(dict.fromkeys(t.format(connector_id=connector_id, **fill) for t in templates))

    def mapped_connectors(self) -> list[str]:
        return sorted(self.mapping)

    @classmethod
    def from_settings(cls, settings: Settings) -> UriMap:
        return load_uri_map(settings.dataset_uri_template, settings.dataset_mapping_file)


def load_uri_map(
    template: str = DEFAULT_URI_TEMPLATE, mapping_file: str | Path | None = None
) -> UriMap:
    """Load the mapping file (if any); raise ConfigurationError saying what to fix."""
    try:
        check_template(template)
    except ValueError as exc:
        raise ConfigurationError(f"FIVETRAN_EVENTS_DATASET_URI_TEMPLATE: {exc}") from None
    if not mapping_file:
        return UriMap(template=template)
    path = Path(mapping_file)
    data = read_mapping(path)
    return UriMap(template=template, mapping=_parse_mapping(data, path))


def read_mapping(path: Path, variable: str = "FIVETRAN_EVENTS_DATASET_MAPPING_FILE") -> Any:
    """A mapping file's data, TOML, YAML or JSON by its suffix."""
    where = f"{variable} ({path})"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigurationError(f"{where}: cannot read it: {exc.strerror}") from None
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            return tomllib.loads(text)
        if suffix in (".yaml", ".yml"):
            try:
                import yaml
            except ImportError:
                raise ConfigurationError(
                    f"{where}: reading YAML needs PyYAML (pip install pyyaml), or use TOML"
                ) from None
            return yaml.safe_load(text)
        if suffix == ".json":
            return json.loads(text)
    except ConfigurationError:
        raise
    except Exception as exc:  # each parser has its own error class; all mean "bad syntax"
        raise ConfigurationError(f"{where}: not valid {suffix[1:].upper()}: {exc}") from None
    raise ConfigurationError(f"{where}: name it .toml, .yaml, .yml or .json")


def _parse_mapping(data: Any, path: Path) -> dict[str, tuple[str, ...]]:
    where = f"FIVETRAN_EVENTS_DATASET_MAPPING_FILE ({path})"
    if not isinstance(data, dict) or not isinstance(data.get("connectors"), dict):
        raise ConfigurationError(
            f"{where}: expected a 'connectors' table mapping connector "
            "ids to a URI or a list of URIs"
        )
    out: dict[str, tuple[str, ...]] = {}
    for cid, value in data["connectors"].items():
        uris = [value] if isinstance(value, str) else value
        if (
            not isinstance(uris, list)
            or not uris
            or not all(isinstance(u, str) and u for u in uris)
        ):
            raise ConfigurationError(
                f"{where}: connector '{cid}' must map to a URI or a non-empty list of URIs"
            )
        for u in uris:
            try:
                check_template(u)
            except ValueError as exc:
                raise ConfigurationError(f"{where}: connector '{cid}': {exc}") from None
        out[str(cid)] = tuple(uris)
    return out


def dataset_uris(
    connector_id: str,
    connector_name: str | None = None,
    connector_type: str | None = None,
    group_id: str | None = None,
    *,
    template: str | None = None,
    mapping_file: str | Path | None = None,
    uri_map: UriMap | None = None,
) -> list[str]:
    """Return ``connector_id``'s dataset URIs exactly as the forwarding worker reads them."""
    if uri_map is None:
        if template is None and mapping_file is None:
            uri_map = UriMap.from_settings(load_settings())
        else:
            uri_map = load_uri_map(template or DEFAULT_URI_TEMPLATE, mapping_file)
    return uri_map.uris(connector_id, connector_name, connector_type, group_id)


def dataset_uri(connector_id: str, **kwargs: Any) -> str:
    """Return the one URI of ``connector_id``; raise ConfigurationError if it maps to several."""
    uris = dataset_uris(connector_id, **kwargs)
    if len(uris) != 1:
        raise ConfigurationError(
            f"connector '{connector_id}' maps to {len(uris)} dataset URIs "
            f"({', '.join(uris)}): use dataset_uris()"
        )
    return uris[0]
