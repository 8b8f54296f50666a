"""Command options: one frozen value per command, whose fields are the command's options.

Each field carries its flags and help (:func:`opt`), so one definition serves every front end:
the CLI builds its Typer command from the fields (:func:`serveplan.cli.options_command`), the web
page its form and its request parser (:meth:`CommandOptions.parse`), and a result records the
command line that reproduces it (:meth:`CommandOptions.argv`). Values are validated once, in the
options value's ``__post_init__``, whichever door they came in by (httpx's CLI over its client is
the model: options value in, result out).

Field types are the values a user types: ``str``, ``int``, ``float``, ``bool``, ``Path`` or any of
them ``| None``; lists are comma-separated text (``--tp 1,2,4``), parsed by the command with an
error naming the flag.
"""

from __future__ import annotations

import dataclasses
import shlex
import typing
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, TypeVar

from serveplan.errors import SpecError

T = TypeVar("T", bound="CommandOptions")

_TRUE = ("on", "true", "1", "yes")
_FALSE = ("off", "false", "0", "no")


@dataclass(frozen=True, slots=True)
class Opt:
    """How a field appears on the command line: its flags (the first long one names it), help
    text, the flag that turns a switch off (``--no-progress``), whether the page shows it and
    whether the command line takes it as a positional argument (``serveplan sweep FILE``; its
    flag then only names it)."""

    flags: tuple[str, ...]
    help: str
    off_flag: str | None = None
    page: bool = True
    argument: bool = False

    @property
    def name(self) -> str:
        """The option's name: its first long flag without the dashes (``slo-ttft``)."""
        return next(f for f in self.flags if f.startswith("--"))[2:]


def opt(default: Any, *flags: str, help: str, off_flag: str | None = None, page: bool = True,
        argument: bool = False) -> Any:
    """A field of a :class:`CommandOptions` with its flags and help (``opt(8, "--devices",
    help="Device budget.")``)."""
    return dataclasses.field(default=default, metadata={"opt": Opt(tuple(flags), help, off_flag, page, argument)})


@dataclass(frozen=True, slots=True)
class Field:
    """One option of a command: its field name, type, default and :class:`Opt`."""

    name: str
    kind: type
    optional: bool
    default: Any
    opt: Opt

    @property
    def is_switch(self) -> bool:
        return self.kind is bool


class CommandOptions:
    """Base of the commands' options values (frozen dataclasses of :func:`opt` fields)."""

    @classmethod
    def fields(cls) -> tuple[Field, ...]:
        """The options, in definition order."""
        return _fields(cls)  # type: ignore[arg-type]  # classes are hashable

    @classmethod
    def field(cls, name: str) -> Field:
        """The option named ``name`` (its flag name, ``slo-ttft``, or field name, ``slo_ttft``)."""
        key = name.removeprefix("--")
        for f in cls.fields():
            if key in (f.opt.name, f.name):
                return f
        raise SpecError(f"unknown option {name!r}; expected one of: {', '.join(f.opt.name for f in cls.fields())}")

    @classmethod
    def parse(cls: type[T], values: Mapping[str, Any], *, blank_is_default: bool = True) -> T:
        """An options value from ``values`` (option or field name -> text or typed value; text as a
        user types it). Empty text is the option's default on a form (``blank_is_default``); on a
        command line an empty value is refused. Unknown names and text that does not convert raise
        :class:`SpecError` naming the option, the value and what was expected."""
        kw: dict[str, Any] = {}
        for key, raw in values.items():
            f = cls.field(key)
            if not blank_is_default and isinstance(raw, str) and not raw.strip():
                raise SpecError(f"{f.opt.name}={raw!r} is empty; give a value or leave the option out")
            kw[f.name] = convert(f, raw)
        return cls(**kw)

    def argv(self) -> list[str]:
        """The command-line arguments that give this value (options left at their default omitted)."""
        out: list[str] = []
        for f in self.fields():
            v = getattr(self, f.name)
            if v == f.default:
                continue
            if f.opt.argument:
                out.append(str(v))
                continue
            flag = f"--{f.opt.name}"
            if f.is_switch:
                if v:
                    out.append(flag)
                elif f.opt.off_flag:
                    out.append(f.opt.off_flag)
            elif v is not None:
                out += [flag, str(v)]
        return out

    def command_line(self, command: str) -> str:
        """``serveplan COMMAND ...`` reproducing this value."""
        return shlex.join(["serveplan", command, *self.argv()])

    def changed(self) -> dict[str, Any]:
        """Option name -> value of the options not at their default."""
        return {f.opt.name: getattr(self, f.name) for f in self.fields() if getattr(self, f.name) != f.default}


@cache
def _fields(cls: type) -> tuple[Field, ...]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        meta = f.metadata.get("opt")
        if meta is None:
            continue
        kind, optional = _base_type(hints[f.name])
        out.append(Field(name=f.name, kind=kind, optional=optional, default=f.default, opt=meta))
    return tuple(out)


def _base_type(hint: Any) -> tuple[type, bool]:
    """``(type, optional)`` of a field hint such as ``int | None``."""
    args = typing.get_args(hint)
    if args:
        inner = [a for a in args if a is not type(None)]
        if len(inner) != 1:  # pragma: no cover - options are one type or None
            raise TypeError(f"unsupported option type {hint!r}")
        return inner[0], type(None) in args
    return hint, False


def convert(f: Field, raw: Any) -> Any:
    """``raw`` (text or a typed value) as option ``f``'s type; empty text is the default."""
    name = f.opt.name
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return None if f.optional else f.default
    if not isinstance(raw, str):
        if f.kind is float and isinstance(raw, int) and not isinstance(raw, bool):
            return float(raw)
        if f.kind is Path and isinstance(raw, str | Path):
            return Path(raw)
        if f.kind is str and isinstance(raw, int) and not isinstance(raw, bool):
            return str(raw)   # a text option that may hold a number (--devices 8, or TYPE=N per type)
        if isinstance(raw, f.kind) and not (f.kind is int and isinstance(raw, bool)):
            return raw
        raise SpecError(f"{name}={raw!r} must be {_what(f)}")
    text = raw.strip()
    if f.kind is bool:
        if text.lower() in _TRUE:
            return True
        if text.lower() in _FALSE:
            return False
        raise SpecError(f"{name}={text!r}; expected one of: on, off (or empty for the default)")
    try:
        if f.kind is int:
            return int(text)
        if f.kind is float:
            return float(text)
    except ValueError:
        raise SpecError(f"{name}={text!r} must be {_what(f)}") from None
    if f.kind is Path:
        return Path(text)
    return text


def _what(f: Field) -> str:
    return {int: "an integer", float: "a number", bool: "on or off", Path: "a path"}.get(f.kind, "text")
