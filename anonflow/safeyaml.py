"""The safe YAML loader of workflow files (and of the files they name, such as gradings):
``yaml.SafeLoader`` that refuses a key given twice and alias bombs, and records where each
key and list item is (:class:`Marks`) for one-line errors."""

from __future__ import annotations

from typing import Any, Iterable

import yaml


class Marks:
    """Where each key and list item of a parsed YAML file is (1-based lines), by the identity of
    the mapping or list that holds it (:func:`load_yaml_marked` records them)."""

    def __init__(self) -> None:
        self._by: dict[int, tuple[Any, Any, int]] = {}

    def add(self, container: Any, lines: Any, line: int) -> None:
        self._by[id(container)] = (container, lines, line)

    def line(self, data: Any, path: Iterable[Any]) -> int | None:
        """The line of the key (or item) at ``path`` in ``data``, or of the nearest enclosing one."""
        found = None
        node = data
        for key in path:
            entry = self._by.get(id(node))
            if entry is None or entry[0] is not node:
                break
            _, lines, own = entry
            found = found or own
            if isinstance(node, dict) and key in node:
                found = lines.get(key, found)
                node = node[key]
            elif isinstance(node, list) and isinstance(key, int) and 0 <= key < len(node):
                found = lines[key]
                node = node[key]
            else:
                break
        else:
            entry = self._by.get(id(node))
            if found is None and entry is not None and entry[0] is node:
                found = entry[2]
        return found



class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a mapping key given twice (PyYAML keeps the last one
    silently: a step written twice, or ``k: 5`` then ``k: 2``, would run the wrong workflow)."""


def _construct_unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    loader.flatten_mapping(node)
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: let PyYAML report it
            continue
        if first is not None:
            raise DuplicateKeyError(key, first, key_node.start_mark)
        seen[key] = key_node.start_mark
    data = loader.construct_mapping(node, deep=deep)
    marks = getattr(loader, "anonflow_marks", None)
    if marks is not None:  # where each key is, for the schema's one-line errors
        lines: dict[Any, int] = {}
        for key_node, _ in node.value:
            try:
                lines.setdefault(loader.construct_object(key_node, deep=deep), key_node.start_mark.line + 1)
            except TypeError:
                pass
        marks.add(data, lines, node.start_mark.line + 1)
    return data


def _construct_marked_sequence(loader: yaml.SafeLoader, node: yaml.SequenceNode) -> Any:
    data: list[Any] = []
    marks = getattr(loader, "anonflow_marks", None)
    if marks is not None:
        marks.add(data, [item.start_mark.line + 1 for item in node.value], node.start_mark.line + 1)
    yield data
    data.extend(loader.construct_sequence(node))


class DuplicateKeyError(yaml.YAMLError):
    def __init__(self, key: Any, first: Any, mark: Any) -> None:
        super().__init__(f"key {key!r} appears twice (first at line {first.line + 1})")
        self.key, self.first, self.mark = key, first, mark


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)
_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _construct_marked_sequence)


#: the most values a workflow file may hold once its aliases are expanded (a YAML "billion
#: laughs" file is a few lines that expand to billions of values)
MAX_VALUES = 1_000_000


class TooLargeError(yaml.YAMLError):
    pass


#: the deepest nesting of lists and mappings a workflow value may have
MAX_DEPTH = 64


def _expanded_size(data: Any, budget: int) -> int:
    """Count the values of ``data`` as if every alias were written out, stopping past ``budget``
    values or :data:`MAX_DEPTH` levels of nesting."""
    count, stack = 0, [(data, 0)]
    while stack:
        item, depth = stack.pop()
        count += 1
        if count > budget:
            raise TooLargeError(f"it expands to more than {budget:,} values (aliases of aliases); write the values out")
        if depth > MAX_DEPTH:
            raise TooLargeError(f"it nests lists or mappings more than {MAX_DEPTH} deep")
        if isinstance(item, dict):
            stack.extend((k, depth + 1) for k in item.keys())
            stack.extend((v, depth + 1) for v in item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend((v, depth + 1) for v in item)
    return count


def load_yaml(text: str) -> Any:
    """Parse YAML text, refusing duplicate keys and alias bombs (raises ``yaml.YAMLError``)."""
    return load_yaml_marked(text)[0]


def load_yaml_marked(text: str) -> tuple[Any, Marks]:
    """:func:`load_yaml`, and where each key and list item of the file is (:class:`Marks`)."""
    marks = Marks()
    loader = _UniqueKeyLoader(text)
    loader.anonflow_marks = marks  # type: ignore[attr-defined]
    try:
        data = loader.get_single_data()
    finally:
        loader.dispose()
    _expanded_size(data, MAX_VALUES)
    return data, marks
