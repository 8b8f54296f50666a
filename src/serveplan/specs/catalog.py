"""Bundled models, hardware, efficiency profiles and offloading hosts, and loading of user files.

Each bundled entry is one YAML file under ``specs/data/<kind>/<id>.yaml`` with a ``source``. A
name that is a path to an existing file is loaded from that file instead (``config.json`` for
models, YAML for hardware and profiles).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from serveplan.errors import SpecError, unknown_name
from serveplan.specs.engine import EngineSpec, engine_from_dict
from serveplan.specs.hardware import DeviceSpec, hardware_from_dict
from serveplan.specs.host import HostSpec, parse_host
from serveplan.specs.model import ModelSpec, load_model_file, model_from_hf_config
from serveplan.specs.profile import EfficiencyProfile, profile_from_dict

T = TypeVar("T")

#: Profile used for hardware without a dedicated one.
DEFAULT_PROFILE = "default-gpu"


#: libyaml's loader when PyYAML was built with it (same documents, several times faster: every
#: command reads the bundled catalog), else the pure-Python one.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _data_dir(kind: str) -> Any:
    return resources.files("serveplan.specs").joinpath("data").joinpath(kind)


@cache
def _entries(kind: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    d = _data_dir(kind)
    for f in d.iterdir():
        if f.name.endswith(".yaml"):
            raw = yaml.load(f.read_text(), Loader=_YAML_LOADER)
            out[f.name[: -len(".yaml")]] = raw
    return out


def _looks_like_path(name: str) -> bool:
    return name.endswith((".json", ".yaml", ".yml")) or "/" in name or "\\" in name


def _read_yaml_file(path: str, kind: str) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise SpecError(f"{kind} file {path!r} does not exist")
    try:
        raw = yaml.load(p.read_text(), Loader=_YAML_LOADER)  # noqa: S506 (a safe loader)
    except UnicodeDecodeError:
        raise SpecError(f"{kind} file {path!r} is not text (binary content); expected a UTF-8 YAML file") from None
    except OSError as exc:
        raise SpecError(f"{kind} file {path!r} cannot be read: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise SpecError(f"{kind} file {path!r} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(raw, dict):
        raise SpecError(f"{kind} file {path!r} must hold a mapping of fields")
    return raw


def _load(kind: str, what: str, name: str, build: Callable[..., T]) -> T:
    """``build(raw, name=...)`` of a YAML file when ``name`` is a path, else of the bundled entry
    ``name`` of ``kind`` (a did-you-mean :class:`SpecError` when there is none)."""
    if _looks_like_path(name):
        raw = _read_yaml_file(name, what)
        return build(raw, name=str(raw.get("name", Path(name).stem)))
    entries = _entries(kind)
    if name not in entries:
        raise unknown_name(what, name, entries)
    return build(entries[name], name=name)


def list_models() -> list[str]:
    return sorted(_entries("models"))


def list_hardware() -> list[str]:
    return sorted(_entries("hardware"))


def list_profiles() -> list[str]:
    return sorted(_entries("profiles"))


def list_engines() -> list[str]:
    """Engine families (``vllm``) and versioned ids (``vllm-0.11``) that :func:`get_engine` takes."""
    entries = _entries("engines")
    return sorted(set(entries) | {str(raw.get("engine", k)) for k, raw in entries.items()})


def list_datasets() -> list[str]:
    """Bundled request-length distributions (``specs/data/datasets``)."""
    return sorted(_entries("datasets"))


def get_dataset(name: str) -> dict[str, Any]:
    """The raw quantile tables of a bundled dataset (built by ``benchmarks/build_datasets.py``)."""
    entries = _entries("datasets")
    if name not in entries:
        raise unknown_name("dataset", name, entries)
    return entries[name]


@lru_cache(maxsize=64)
def get_engine(name: str) -> EngineSpec:
    """An engine by family (``"vllm"``: its version marked ``default: true``), by versioned id
    (``"vllm-0.11"``) or a path to an engine YAML file."""
    if _looks_like_path(name):
        raw = _read_yaml_file(name, "engine")
        return engine_from_dict(raw, name=str(raw.get("name", Path(name).stem)))
    entries = _entries("engines")
    key = name.strip().lower()
    if key not in entries:
        family = sorted(k for k, raw in entries.items() if str(raw.get("engine")) == key and raw.get("default"))
        if not family:
            raise unknown_name("engine", name, list_engines())
        key = family[0]
    return engine_from_dict(entries[key], name=key)


@lru_cache(maxsize=256)
def get_model(name: str) -> ModelSpec:
    """A bundled model by id (``"llama-2-7b"``) or a path to a HF ``config.json``."""
    if _looks_like_path(name):
        return load_model_file(name)
    entries = _entries("models")
    if name not in entries:
        raise unknown_name("model", name, entries)
    raw = entries[name]
    return model_from_hf_config(raw, name=name, source=str(raw.get("source", "")))


@lru_cache(maxsize=256)
def get_hardware(name: str) -> DeviceSpec:
    """A bundled accelerator by id (``"h100-sxm"``) or a path to a hardware YAML file."""
    return _load("hardware", "hardware", name, hardware_from_dict)


@lru_cache(maxsize=256)
def get_profile(name: str | None = None, hardware: str | None = None) -> EfficiencyProfile:
    """An efficiency profile by id or YAML path.

    With ``name=None`` the profile bundled for ``hardware`` is used when one says
    ``hardware: <id>`` (e.g. ``bestserve-910b3`` for ``ascend-910b3``), else ``default-gpu``.
    """
    entries = _entries("profiles")
    if name is None:
        for pid, raw in sorted(entries.items()):
            if hardware and raw.get("hardware") == hardware and raw.get("default_for_hardware", False):
                name = pid
                break
        else:
            name = DEFAULT_PROFILE
    return _load("profiles", "profile", name, profile_from_dict)


def list_hosts() -> list[str]:
    """Ids of the bundled offloading hosts."""
    return sorted(_entries("hosts"))


def host_from_dict(raw: Any, *, name: str | None = None) -> HostSpec:
    """A :class:`HostSpec` from the YAML schema of ``specs/data/hosts/*.yaml`` (GPU ids resolved
    in this catalog)."""
    return parse_host(raw, name=name, hardware=get_hardware)


@lru_cache(maxsize=64)
def get_host(name: str) -> HostSpec:
    """A bundled host by id (``"flexgen-t4"``) or a path to a host YAML file.

    Raises
    ------
    SpecError
        Unknown id (with a did-you-mean hint) or a malformed file.
    """
    return _load("hosts", "host", name, host_from_dict)


def list_session_datasets() -> list[str]:
    """Bundled multi-turn session datasets (``specs/data/sessions``)."""
    return sorted(_entries("sessions"))


def get_session_dataset(name: str) -> dict[str, Any]:
    """The raw tables of a bundled session dataset (built by ``benchmarks/build_sessions.py``)."""
    entries = _entries("sessions")
    if name not in entries:
        raise unknown_name("session dataset", name, entries)
    return entries[name]
