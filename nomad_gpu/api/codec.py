"""Frozen dataclasses <-> JSON, and their JSON Schema, driven by the type hints alone.

The API's payloads (`nomad_gpu.api.payloads`) are plain frozen dataclasses, the project's kind of value;
this module turns them into JSON the service sends, back into values where the CLI reads them, and into
the schemas the OpenAPI document shows, so the three can never disagree about a field. A field typed
with :class:`Unset` may be left out of an answer (`eta` where it was not asked for), which no
stock dataclass dumper expresses; everything else is what the hints say.

Reading is lenient where the wire may be older or newer than the reader: unknown keys are ignored and a
missing field takes its default, so a CLI can talk to the service of another release. A value of the
wrong type is an :class:`~nomad_gpu.domain.errors.UnreadableReply` that names its path.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from functools import cache
from typing import Any, TypeVar, Union

from nomad_gpu.domain.errors import UnreadableReply

__all__ = ["UNSET", "Unset", "doc", "from_json", "json_schema", "schema_name", "to_json"]

T = TypeVar("T")
JSON = dict[str, Any]
_Codec = tuple[Callable[[Any], Any], Callable[[Any, str], Any]]


def _same(v: Any) -> Any:
    """The encoder of a value that is its own JSON (a scalar, null, Any): recognised and skipped."""
    return v


class Unset:
    """The value of a field left out of an answer (not the same as null, which the answer states)."""

    _one: Unset | None = None

    def __new__(cls) -> Unset:
        if cls._one is None:
            cls._one = super().__new__(cls)
        return cls._one

    def __repr__(self) -> str:
        return "UNSET"

    def __bool__(self) -> bool:
        return False


UNSET = Unset()


def doc(text: str, **kwargs: Any) -> Any:
    """A field with a description for the schema: ``eta: float | None = doc("...", default=None)``."""
    return dataclasses.field(metadata={"doc": text}, **kwargs)


def schema_name(cls: type) -> str:
    """A payload's component name: its ``SCHEMA_NAME`` if it has one, else its class name."""
    return str(getattr(cls, "SCHEMA_NAME", cls.__name__))


def to_json(value: Any) -> Any:
    """A payload (or a list of them) as JSON data; fields left UNSET are left out."""
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    kind: Any = type(value)
    return _codec(kind)[0](value)


def from_json(cls: type[T], data: Any) -> T:
    """``data`` read as a ``cls``; UnreadableReply, naming the path, where it does not fit."""
    kind: Any = cls
    return typing.cast(T, _codec(kind)[1](data, schema_name(cls)))


def _fail(path: str, what: str, data: Any) -> UnreadableReply:
    shown = repr(data)
    return UnreadableReply(f"{path}: expected {what}, got {shown[:60]}{'...' if len(shown) > 60 else ''}")


def _union_args(tp: Any) -> tuple[Any, ...] | None:
    if typing.get_origin(tp) in (Union, types.UnionType):
        return typing.get_args(tp)
    return None


@cache
def _codec(tp: Any) -> _Codec:
    """(encode, decode) for one type, built once per type."""
    if tp is Any:
        return _same, (lambda d, path: d)
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_codec(tp)
    if (args := _union_args(tp)) is not None:
        return _union_codec(args)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, tuple):
        item_enc, item_dec = _codec(args[0])
        make: Callable[[Any], Any] = tuple if origin is tuple else list

        def dec_seq(d: Any, path: str) -> Any:
            if not isinstance(d, list | tuple):
                raise _fail(path, "a list", d)
            return make(item_dec(v, f"{path}[{i}]") for i, v in enumerate(d))

        if item_enc is _same:
            return list, dec_seq
        return (lambda v: [item_enc(x) for x in v]), dec_seq
    if origin is dict:
        val_enc, val_dec = _codec(args[1])

        def dec_map(d: Any, path: str) -> Any:
            if not isinstance(d, dict):
                raise _fail(path, "an object", d)
            return {str(k): val_dec(v, f"{path}.{k}") for k, v in d.items()}

        if val_enc is _same:
            return dict, dec_map
        return (lambda v: {str(k): val_enc(x) for k, x in v.items()}), dec_map
    if tp in (str, bool, int, float):
        return _same, _scalar(tp)
    raise TypeError(f"no JSON codec for {tp!r}")


def _scalar(tp: type) -> Callable[[Any, str], Any]:
    def dec(d: Any, path: str) -> Any:
        if tp is float and isinstance(d, int | float) and not isinstance(d, bool):
            return float(d)
        if isinstance(d, tp) and (tp is bool or not isinstance(d, bool)):
            return d
        raise _fail(path, tp.__name__, d)

    return dec


def _union_codec(args: tuple[Any, ...]) -> _Codec:
    nullable = type(None) in args
    rest = [a for a in args if a not in (type(None), Unset)]
    codecs = [_codec(a) for a in rest]
    if all(e is _same for e, _ in codecs):
        return _same, _union_decoder(codecs, nullable)

    def enc(v: Any) -> Any:
        if v is None:
            return None
        for tp, (e, _) in zip(rest, codecs, strict=True):
            if tp is Any or _is_instance(v, tp):
                return e(v)
        return codecs[0][0](v)

    return enc, _union_decoder(codecs, nullable)


def _union_decoder(codecs: list[_Codec], nullable: bool) -> Callable[[Any, str], Any]:
    def dec(d: Any, path: str) -> Any:
        if d is None and nullable:
            return None
        last: UnreadableReply | None = None
        for _, decode in codecs:
            try:
                return decode(d, path)
            except UnreadableReply as exc:
                last = exc
        raise last or _fail(path, "null", d)

    return dec


def _is_instance(v: Any, tp: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    return isinstance(v, origin) if isinstance(origin, type) else True


def _dataclass_codec(cls: type) -> _Codec:
    hints = typing.get_type_hints(cls)
    fields = [f for f in dataclasses.fields(cls) if f.init]
    plan = [(f.name, *_codec(hints[f.name]), _has_default(f)) for f in fields]
    nested = [(name, e) for name, e, _, _ in plan if e is not _same]
    may_be_unset = [f.name for f in fields if Unset in (_union_args(hints[f.name]) or ())]
    plain = "__slots__" not in vars(cls) and len(fields) == len(dataclasses.fields(cls))  # __dict__ is the fields

    def enc(v: Any) -> Any:
        # An API list may hold thousands of entries: copy the instance's fields at C speed, then encode
        # only the nested ones and drop what is left out.
        out: JSON = dict(v.__dict__) if plain else {f.name: getattr(v, f.name) for f in fields}
        for name in may_be_unset:
            if out[name] is UNSET:
                del out[name]
        for name, e in nested:
            if name in out and out[name] is not None:
                out[name] = e(out[name])
        return out

    def dec(d: Any, path: str) -> Any:
        if not isinstance(d, dict):
            raise _fail(path, "an object", d)
        kwargs: JSON = {}
        for name, _, decode, optional in plan:
            if name in d:
                kwargs[name] = decode(d[name], f"{path}.{name}")
            elif not optional:
                raise UnreadableReply(f"{path}: no {name!r}")
        return cls(**kwargs)

    return enc, dec


def _has_default(f: dataclasses.Field[Any]) -> bool:
    return f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


# ---- JSON Schema ----------------------------------------------------------------------------------

_PRIMITIVE = {str: "string", int: "integer", float: "number", bool: "boolean"}


def json_schema(cls: type, components: JSON, ref: str = "#/components/schemas/") -> JSON:
    """Add ``cls`` and every payload it holds to ``components``; the schema that refers to ``cls``."""
    return _schema(cls, components, ref)


def _schema(tp: Any, components: JSON, ref: str) -> JSON:
    if tp is Any:
        return {}
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        name = schema_name(tp)
        if name not in components:
            components[name] = {}  # a placeholder first: a payload that holds itself terminates
            components[name] = _object_schema(tp, components, ref)
        return {"$ref": ref + name}
    if (args := _union_args(tp)) is not None:
        rest = [a for a in args if a not in (type(None), Unset)]
        nullable = type(None) in args
        if len(rest) == 1 and rest[0] in _PRIMITIVE:
            kind = _PRIMITIVE[rest[0]]
            return {"type": [kind, "null"] if nullable else kind}
        parts = [_schema(a, components, ref) for a in rest] + ([{"type": "null"}] if nullable else [])
        return parts[0] if len(parts) == 1 else {"anyOf": parts}
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (list, tuple):
        return {"type": "array", "items": _schema(args[0], components, ref)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(args[1], components, ref)}
    if tp in _PRIMITIVE:
        return {"type": _PRIMITIVE[tp]}
    raise TypeError(f"no JSON schema for {tp!r}")


def _object_schema(cls: type, components: JSON, ref: str) -> JSON:
    hints = typing.get_type_hints(cls)
    props: JSON = {}
    required: list[str] = []
    for f in dataclasses.fields(cls):
        prop = _schema(hints[f.name], components, ref)
        if text := f.metadata.get("doc"):
            prop = {**prop, "description": text}
        if extra := f.metadata.get("schema"):
            prop = {**prop, **extra}
        props[f.name] = prop
        args = _union_args(hints[f.name]) or ()
        if Unset not in args:  # always sent (a reader still takes a default when it is missing)
            required.append(f.name)
    out: JSON = {"type": "object"}
    if cls.__doc__ and not cls.__doc__.startswith(f"{cls.__name__}("):
        out["description"] = " ".join(cls.__doc__.split())
    out["properties"] = props
    if required:
        out["required"] = required
    return out


# ---- the base of every payload -------------------------------------------------------------------
P = TypeVar("P", bound="Payload")


class Payload:
    """What every payload can do: become JSON, and be read back from it."""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = to_json(self)
        return out

    @classmethod
    def from_json(cls: type[P], data: Any) -> P:
        return from_json(cls, data)


def read(cls: type[P], data: Any) -> P:
    """``cls.from_json(data)``, for callers that hold the class in a variable."""
    return cls.from_json(data)
