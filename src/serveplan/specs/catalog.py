"""Bundled models, hardware, efficiency profiles and offloading hosts, and loading of user files.

Each bundled entry is one YAML file under ``specs/data/<kind>/<id>.yaml`` with a ``source``. A
name that is a path to an existing file is loaded from that file instead (``config.json`` for
models, YAML for hardware and profiles).

How a name is resolved (:func:`resolve_name`, docs/names.md):

* catalog ids are case-insensitive (``H100-SXM``, ``Llama-3.1-70B``);
* an entry's ``aliases:`` list (in its data file, the only place aliases are written) gives short
  names that point at it unambiguously (``h100`` -> ``h100-sxm``); a test keeps them unique;
* a model may be named by its Hugging Face repository (``meta-llama/Llama-3.1-70B-Instruct``): the
  bundled model whose ``source`` is that repository, or its base model when the name differs only
  by a variant word (``-Instruct``, ``-Base``, ``-hf``, a ``-2507`` date, ...: the same shapes),
  which a note on the ``serveplan.specs.catalog`` logger names;
* a model may be a local ``config.json`` (or YAML) file, or a snapshot folder holding one;
* anything else is an error listing the closest names first (:func:`~serveplan.errors.suggest_names`).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar

import yaml

from serveplan.errors import SpecError, suggest_names, unknown_name
from serveplan.specs.engine import EngineSpec, engine_from_dict
from serveplan.specs.hardware import DeviceSpec, hardware_from_dict
from serveplan.specs.hf_config import load_model_file, model_from_hf_config
from serveplan.specs.host import HostSpec, parse_host
from serveplan.specs.model import ModelSpec
from serveplan.specs.profile import EfficiencyProfile, profile_from_dict

T = TypeVar("T")

#: Profile used for hardware without a dedicated one.
DEFAULT_PROFILE = "default-gpu"

#: Notes on how a name was read when it was not an exact id (a Hugging Face variant read as its
#: base model); the CLI prints them on stderr as ``note: ...``.
log = logging.getLogger(__name__)

#: The command that lists each kind, named by errors that fold a long list of names.
LISTING = {"models": "serveplan models", "hardware": "serveplan hardware", "profiles": "serveplan hardware",
           "hosts": "serveplan hosts", "engines": "serveplan engines"}


#: libyaml's loader when PyYAML was built with it (same documents, several times faster: every
#: command reads the bundled catalog), else the pure-Python one.
_YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _data_dir(kind: str) -> Any:
    return resources.files("serveplan.specs").joinpath("data").joinpath(kind)


class _Entries(Mapping[str, dict[str, Any]]):
    """The bundled entries of one kind: id -> the mapping of its YAML file, each file parsed when its
    entry is first read. The measured profiles' kernel tables take about 15 ms each to parse, and a
    command needs one of them; :meth:`having` finds the entries that may hold a key from the text
    alone (a key a file does not spell anywhere it cannot hold), so looking up aliases or a
    device's default profile parses only the candidates."""

    def __init__(self, texts: dict[str, str]) -> None:
        self._texts = texts
        self._parsed: dict[str, dict[str, Any]] = {}

    def __getitem__(self, key: str) -> dict[str, Any]:
        raw = self._parsed.get(key)
        if raw is None:
            raw = self._parsed[key] = yaml.load(self._texts[key], Loader=_YAML_LOADER)  # noqa: S506 (a safe loader)
        return raw

    def __iter__(self) -> Iterator[str]:
        return iter(self._texts)

    def __len__(self) -> int:
        return len(self._texts)

    def having(self, key: str, *words: str) -> dict[str, dict[str, Any]]:
        """The entries whose mapping has ``key``, among those whose text spells ``key`` and each of
        ``words`` (a value the caller will require): only those files are parsed."""
        return {k: self[k] for k, text in self._texts.items()
                if all(w in text for w in (key, *words)) and key in self[k]}


@cache
def _entries(kind: str) -> _Entries:
    d = _data_dir(kind)
    return _Entries({f.name[: -len(".yaml")]: f.read_text() for f in sorted(d.iterdir(), key=lambda f: f.name)
                     if f.name.endswith(".yaml")})


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


@cache
def _ids(kind: str) -> dict[str, str]:
    """Lower-cased ids of ``kind`` -> the id."""
    return {k.lower(): k for k in _entries(kind)}


def _lookup(kind: str, name: str) -> str | None:
    """The id that ``name`` names (an id in any case, else an alias), or ``None``: ids first, so a
    command naming ids reads no other entry's file."""
    key = name.strip().lower()
    return _ids(kind).get(key) or _index(kind).get(key)


@cache
def _index(kind: str) -> dict[str, str]:
    """Lower-cased ids and aliases of ``kind`` -> the id they name.

    Raises
    ------
    SpecError
        An alias that is also an id or the alias of another entry (a broken data file).
    """
    out = dict(_ids(kind))
    for k, raw in sorted(_entries(kind).having("aliases").items()):
        for alias in raw.get("aliases") or ():
            key = str(alias).strip().lower()
            if out.get(key, k) != k:
                raise SpecError(f"{kind} alias {alias!r} of {k!r} is already the name of {out[key]!r}; "
                                "expected aliases that name one entry")
            out[key] = k
    return out


def aliases(kind: str) -> dict[str, list[str]]:
    """Each entry of ``kind`` (``"models"``, ``"hardware"``) -> its aliases, as its data file lists them."""
    return {k: [str(a) for a in raw.get("aliases") or ()] for k, raw in sorted(_entries(kind).items())}


def resolve_name(kind: str, what: str, name: str) -> str:
    """The id of the bundled entry of ``kind`` that ``name`` names: the id itself in any case, or an alias.

    Raises
    ------
    SpecError
        No such id or alias: the closest names first, a long list folded (``N more: serveplan models``).
    """
    found = _lookup(kind, name)
    if found is not None:
        return found
    raise unknown_name(what, name, _entries(kind), listing=LISTING.get(kind))


def _load(kind: str, what: str, name: str, build: Callable[..., T]) -> T:
    """``build(raw, name=...)`` of a YAML file when ``name`` is a path, else of the bundled entry
    ``name`` of ``kind`` (a did-you-mean :class:`SpecError` when there is none)."""
    if _looks_like_path(name) and _lookup(kind, name) is None:
        raw = _read_yaml_file(name, what)
        return build(raw, name=str(raw.get("name", Path(name).stem)))
    key = resolve_name(kind, what, name)
    return build(_entries(kind)[key], name=key)


# ------------------------------------------------------------------------------------ Hugging Face ids
#: A Hugging Face repository id: ``owner/name``, letters, digits, ``-``, ``_`` and ``.``
_HF_REPO = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
#: The repository of a bundled model's ``source`` (``https://huggingface.co/<owner>/<name>/...``).
_HF_SOURCE = re.compile(r"huggingface\.co/([^/\s]+/[^/\s]+)")
#: Words of a repository name that mark a variant with its base model's shapes: fine-tunes
#: (``Instruct``, ``chat``, ``it``, ``Thinking``), the pretrained base (``Base``, ``pt``) and the
#: transformers conversion (``hf``); four-digit release dates (``2507``, ``0324``) too.
VARIANT_WORDS = ("instruct", "chat", "it", "pt", "base", "hf", "thinking")


def _hf_key(repo: str) -> str:
    """``owner/name`` lower-cased without its variant words: ``meta-llama/Llama-3.1-70B-Instruct`` and
    ``meta-llama/Llama-3.1-70B`` share ``meta-llama/llama-3.1-70b``."""
    owner, _, repo_name = repo.lower().partition("/")
    words = [w for w in repo_name.split("-") if w not in VARIANT_WORDS and not re.fullmatch(r"\d{4}", w)]
    return f"{owner}/{'-'.join(words)}"


@cache
def _hf_repos() -> dict[str, tuple[str, str]]:
    """Lower-cased Hugging Face repository of every bundled model (its ``source``, and aliases
    that are repository ids) -> (the model's id, the repository as written)."""
    out: dict[str, tuple[str, str]] = {}
    for k, raw in sorted(_entries("models").items()):
        m = _HF_SOURCE.search(str(raw.get("source", "")))
        repos = [m.group(1)] if m else []
        repos += [str(a) for a in raw.get("aliases") or () if "/" in str(a)]
        for repo in repos:
            out.setdefault(repo.lower(), (k, repo))
    return out


def _model_from_hf_repo(repo: str) -> str:
    """The bundled model of Hugging Face repository ``repo``: its exact ``source``, else the one
    whose repository differs only by variant words (a note says which it took).

    Raises
    ------
    SpecError
        No bundled model comes from that repository or its base, or several do.
    """
    repos = _hf_repos()
    if repo.lower() in repos:
        return repos[repo.lower()][0]
    key = _hf_key(repo)
    hits = {k: written for r, (k, written) in sorted(repos.items(), reverse=True) if _hf_key(r) == key}
    if len(hits) == 1:
        [(model, base)] = hits.items()
        log.info("model %r read as the bundled %r (from %s): a variant of the same repository shares its "
                 "base model's shapes", repo, model, base)
        return model
    if hits:
        raise SpecError(f"model {repo!r} matches several bundled models ({', '.join(sorted(hits))}); expected one: "
                        "give the catalog id")
    known = _entries("models")
    close = suggest_names(repo.partition("/")[2], known)
    listed = f"closest: {', '.join(close)}; {len(known) - len(close)} more" if close else "the bundled models"
    raise SpecError(f"unknown model {repo!r}: no file or folder of that name here, and no bundled model comes from "
                    f"that Hugging Face repository or its base; {listed}: {LISTING['models']}; or give the path "
                    "of the repository's config.json (or of its snapshot folder)")


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


def _raw_entry(folder: str, what: str, name: str) -> dict[str, Any]:
    """The raw YAML of bundled entry ``name`` under ``specs/data/<folder>``, or an error naming the options."""
    entries = _entries(folder)
    if name not in entries:
        raise unknown_name(what, name, entries)
    return entries[name]


def list_traffic() -> list[str]:
    """Bundled arrival processes (``specs/data/traffic``: requests per interval of public traces)."""
    return sorted(_entries("traffic"))


def get_traffic(name: str) -> dict[str, Any]:
    """The raw counts of a bundled arrival process (built by ``benchmarks/build_traffic.py``)."""
    return _raw_entry("traffic", "traffic", name)


def get_dataset(name: str) -> dict[str, Any]:
    """The raw quantile tables of a bundled dataset (built by ``benchmarks/build_datasets.py``)."""
    return _raw_entry("datasets", "dataset", name)


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
            raise unknown_name("engine", name, list_engines(), listing=LISTING["engines"])
        key = family[0]
    return engine_from_dict(entries[key], name=key)


def resolve_model(name: str) -> str:
    """The catalog id or path that model ``name`` stands for (see the module docstring): a
    bundled id or alias in any case, an existing file or folder, or a Hugging Face repository id
    read as the bundled model that comes from it.

    Raises
    ------
    SpecError
        Nothing of that name (the closest names first), or a path that does not exist.
    """
    found = _lookup("models", name)
    if found is not None:
        return found
    if Path(name).exists():
        return name
    if _HF_REPO.match(name.strip()) and not name.strip().endswith((".json", ".yaml", ".yml")):
        return _model_from_hf_repo(name.strip())
    if _looks_like_path(name):
        raise SpecError(f"model file {name!r} does not exist; expected a config.json (or YAML) file, a folder "
                        "holding a config.json, a catalog id (serveplan models) or a Hugging Face repository id")
    raise unknown_name("model", name, _entries("models"), listing=LISTING["models"])


@lru_cache(maxsize=256)
def get_model(name: str) -> ModelSpec:
    """A bundled model by id or alias (``"llama-2-7b"``, ``"Llama-2-7B"``), a Hugging Face
    repository id of a bundled model (``"meta-llama/Llama-3.1-70B-Instruct"``), or a path to a HF
    ``config.json`` or to a folder holding one (a local snapshot).

    Raises
    ------
    SpecError
        Unknown name (the closest names first) or a malformed file.
    """
    key = resolve_model(name)
    entries = _entries("models")
    if key not in entries:
        return load_model_file(key)
    raw = entries[key]
    return model_from_hf_config(raw, name=key, source=str(raw.get("source", "")))


@lru_cache(maxsize=256)
def get_hardware(name: str) -> DeviceSpec:
    """A bundled accelerator by id (``"h100-sxm"``) or a path to a hardware YAML file."""
    return _load("hardware", "hardware", name, hardware_from_dict)


@lru_cache(maxsize=256)
def get_profile(name: str | None = None, hardware: str | None = None) -> EfficiencyProfile:
    """An efficiency profile by id or YAML path.

    With ``name=None`` the profile a bundled device's data file names (``profile: {id, ...}``:
    the H800 takes the H100 SXM's measured profile, :func:`hardware_profile_note` says why) is
    used; else the profile bundled for ``hardware`` when one says ``hardware: <id>`` and
    ``default_for_hardware: true`` (e.g. ``bestserve-910b3`` for ``ascend-910b3``); else
    ``default-gpu``.
    """
    entries = _entries("profiles")
    if hardware is not None:
        hardware = _lookup("hardware", hardware) or hardware
    if name is None and hardware is not None and _hardware_profile_entry(hardware):
        return _borrowed_profile(hardware)
    if name is None:
        for pid, raw in sorted(entries.having("default_for_hardware", *([hardware] if hardware else [])).items()):
            if hardware and raw.get("hardware") == hardware and raw.get("default_for_hardware", False):
                name = pid
                break
        else:
            name = DEFAULT_PROFILE
    return _load("profiles", "profile", name, profile_from_dict)


def _hardware_profile_entry(hardware: str) -> dict[str, Any]:
    """The ``profile:`` mapping of a bundled device's data file (empty when it names none)."""
    raw = _entries("hardware").get(hardware) or {}
    entry = raw.get("profile")
    if entry is None:
        return {}
    if not isinstance(entry, dict) or "id" not in entry:
        raise SpecError(f"hardware {hardware!r}: profile={entry!r} must be a mapping with id (a profile id), "
                        "collectives (true/false) and why (one line)")
    return entry


def _borrowed_profile(hardware: str) -> EfficiencyProfile:
    """The profile another device's data file names, without its NCCL curves when it says
    ``collectives: false`` (they were measured over that other device's link)."""
    entry = _hardware_profile_entry(hardware)
    pr = get_profile(str(entry["id"]))
    if entry.get("collectives", True) is False and pr.kernels is not None and pr.kernels.collectives:
        pr = pr.with_(kernels=dataclasses.replace(pr.kernels, collectives={}),
                      measured_from=f"{pr.measured_from}; NCCL curves left out on {hardware} (another link)")
    return pr


def hardware_profile_note(hardware: str) -> str:
    """Why a bundled device uses another device's profile (its data file's ``profile.why``), or ``""``."""
    key = _lookup("hardware", hardware) or hardware
    return str(_hardware_profile_entry(key).get("why", ""))


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
    return _raw_entry("sessions", "session dataset", name)
