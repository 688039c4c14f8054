"""The strict YAML reader of spec text: aliases, anchors, nesting deeper than `MAX_DEPTH` and a key
written twice in one mapping are refused, on libyaml's fast path where it can and on PyYAML's pure-Python
loader where the message must be its own.

It exists apart from `loading.py` (which turns decoded data into a model, or one located error) because
this is where hostile text stops, before any data is built: nested aliases expand exponentially, so no
byte limit bounds what they build, and a bad spec must cost one parse, not two.
"""

from __future__ import annotations

from typing import Any, cast

import yaml

from nomad_gpu.render.textrules import shown

MAX_DEPTH = 32
"""Deepest nesting of mappings and lists a spec may use (a real one needs about 6)."""


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses aliases, anchors, deep nesting and a key written twice in one mapping."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        event = self.peek_event()  # type: ignore[no-untyped-call]  # PyYAML's parser API is unannotated
        if isinstance(event, yaml.AliasEvent):
            raise _refused(f"aliases (*{event.anchor}) are not allowed in a spec", event)
        if isinstance(event, yaml.NodeEvent) and event.anchor is not None:
            raise _refused(f"anchors (&{event.anchor}) are not allowed in a spec", event)
        collection = isinstance(event, yaml.CollectionStartEvent)
        if collection:
            self._depth += 1
            if self._depth > MAX_DEPTH:
                raise _refused(f"nested deeper than {MAX_DEPTH} levels", event)
        try:
            return super().compose_node(parent, index)
        finally:
            if collection:
                self._depth -= 1

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        _refuse_duplicates(node)
        return super().construct_mapping(node, deep=deep)


def _refuse_duplicates(node: yaml.MappingNode) -> None:
    seen: set[object] = set()
    for key_node, _ in node.value:
        if isinstance(key_node, yaml.ScalarNode) and key_node.tag != "tag:yaml.org,2002:merge":
            key = key_node.value
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {shown(key)}", key_node.start_mark)
            seen.add(key)


_CLoader: type[Any] | None = getattr(yaml, "CSafeLoader", None)


if _CLoader is not None:
    class _FastStrictLoader(_CLoader):  # type: ignore[misc,valid-type]
        """libyaml's parser and composer (a fifth of the pure-Python loader's CPU) with the same
        duplicate-key rule; aliases, anchors and depth are checked on libyaml's events first."""

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            _refuse_duplicates(node)
            return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]


SLOW_PATH_CHARS = 32 << 10
"""Text up to this long that libyaml refuses is parsed again by the pure-Python loader, for its message.
Longer text is refused on libyaml's own error: the second parse of a 949 KB spec cost ~9 s of CPU."""


def fast_compose(text: str) -> tuple[yaml.Node | None, Any] | None:
    """The document through libyaml, or None when the strict pure-Python loader must decide: libyaml is
    missing, or it refused a short text (so the message is the pure-Python loader's). Aliases, anchors and
    too deep a nesting are refused here with the pure-Python loader's words; a long text libyaml refuses is
    refused with libyaml's error (a yaml.YAMLError; ValueError or RecursionError as the slow loader's)."""
    if _CLoader is None:
        return None
    try:
        depth = 0
        for event in yaml.parse(text, Loader=_CLoader):
            if isinstance(event, yaml.AliasEvent):
                raise _refused(f"aliases (*{event.anchor}) are not allowed in a spec", event)
            if isinstance(event, yaml.NodeEvent) and event.anchor is not None:
                raise _refused(f"anchors (&{event.anchor}) are not allowed in a spec", event)
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _refused(f"nested deeper than {MAX_DEPTH} levels", event)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
        loader = _FastStrictLoader(text)
        try:
            node = loader.get_single_node()
            return node, loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.composer.ComposerError as exc:
        if str(exc.problem or "").endswith(("are not allowed in a spec", "levels")):
            raise
        if len(text) > SLOW_PATH_CHARS:
            raise
        return None
    except (yaml.YAMLError, ValueError, RecursionError):
        if len(text) > SLOW_PATH_CHARS:
            raise
        return None


def _refused(problem: str, event: yaml.Event) -> yaml.composer.ComposerError:
    return yaml.composer.ComposerError(None, None, problem, cast(yaml.error.Mark, event.start_mark))
