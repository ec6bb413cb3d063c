"""Compile, per message version, the code that pulls the tables' facts out of a decoded message.

The tables find topic-partitions and error codes by the names the specs give them (DESIGN.md "The
schema set"): topics hold `name`/`topic`/`topic_id`, partitions `partition_index`/`partition`/
`index`/`partition_id`, errors are fields ending in `error_code`. A decoded message's shape is fixed
by its (api key, version, direction), so instead of walking every dict of every message looking for
those names, the field tree is walked once, here, and straight-line Python is written that visits
exactly the lists that can hold partitions or errors and reads exactly the fields the tables keep
(the way protocol/compiler.py writes the decoders). What is still decided per message is what only
the values can tell: empty or null lists and strings, the all-zero topic id, inherited context.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kwsniff.codecache import compile_module

# Field names by convention across the specs.
TOPIC_NAME_KEYS = ("topic", "topic_name", "name")
PARTITION_KEYS = ("partition_index", "partition", "index", "partition_id")
PARTITION_LISTS = ("partition_indexes", "partitions")
# Lists that name partitions the exchange does not act on: a fetch session's removals (KIP-227).
SKIPPED_LISTS = frozenset({"forgotten_topics_data", "aborted_transactions", "record_errors"})
# Lists below this depth are not partitions of the exchange (topics > partitions, under groups).
MAX_DEPTH = 3
_INT_KINDS = frozenset({"int8", "int16", "int32", "int64", "uint16", "uint32"})


def _name(field: Any) -> str:
    return str(field[0])


class _Source:
    def __init__(self) -> None:
        self.functions: list[str] = []
        self.counter = 0

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"


# ------------------------------------------------------------------------------------- partitions


class _PartitionWriter(_Source):
    """Writes `walk(msg, out, options)`: every (context, partition) the message names into ``out``,
    keyed (group or transaction, topic id or name, partition), facts under column names."""

    def __init__(self, fields_map: dict[str, str | None], list_offsets: bool) -> None:
        super().__init__()
        self.fields_map = fields_map
        self.list_offsets = list_offsets

    def walker(self, fields: tuple[Any, ...], depth: int) -> str | None:
        """A function visiting a struct's lists of structs at ``depth``; None when none can matter."""
        if depth > MAX_DEPTH:
            return None
        lists = [f for f in fields if f[1] == "[]struct" and _name(f) not in SKIPPED_LISTS]
        body: list[str] = []
        for field in lists:
            item_lines = self.item(field[6], depth)
            if not item_lines:
                continue
            body.append(f"    lst = node[{_name(field)!r}]")
            body.append("    if lst:")
            body.append("        for item in lst:")
            body += ["            " + line for line in item_lines]
        if not body:
            return None
        name = self.name("_w")
        self.functions.append("\n".join([f"def {name}(node, ctx, out, options):", *body]) + "\n")
        return name

    def item(self, fields: tuple[Any, ...], depth: int) -> list[str]:
        """Statements for one list item (`item`, under context `ctx`), in a loop body."""
        by_name = {_name(f): f for f in fields}
        lines = self.context(by_name)
        changes_context = bool(lines)
        if not lines:
            lines = ["sub = ctx"]
        pkey = next((k for k in PARTITION_KEYS if k in by_name and by_name[k][1] in _INT_KINDS), None)
        numbers = [k for k in PARTITION_LISTS if k in by_name and by_name[k][1].startswith("[]")]
        if pkey is not None or numbers:
            lines.append("if 'topic' in sub or 'topic_id' in sub:")
            if pkey is not None:
                lines += ["    " + line for line in self.partition_facts(by_name, pkey)]
                lines.append("    continue")
            else:
                first = "None"
                for k in reversed(numbers):
                    first = f"(item[{k!r}] if type(item[{k!r}]) is list else {first})"
                lines.append(f"    numbers = {first}")
                lines.append("    if numbers and type(numbers[0]) is int:")
                lines.append("        for p in numbers:")
                lines.append("            facts = dict(sub)")
                lines.append("            facts['partition'] = p")
                lines += ["            " + line for line in _KEEP]
                lines.append("        continue")
        # Below a top-level list the walk always goes on (groups, transactions, topics); deeper only
        # through an item that names a topic, group or transaction, so that lists inside a partition
        # (replicas, epochs...) are never taken for partitions.
        child = self.walker(fields, depth + 1) if depth == 0 or changes_context else None
        if child is not None:
            if depth == 0:
                lines.append(f"{child}(item, sub, out, options)")
            elif changes_context:
                lines.append("if sub is not ctx:")
                lines.append(f"    {child}(item, sub, out, options)")
        if child is None and pkey is None and not numbers:
            return []
        return lines

    def context(self, by_name: dict[str, Any]) -> list[str]:
        """`sub`: ctx plus the topic, topic id, group or transaction the item names (ctx if none)."""
        names = [k for k in TOPIC_NAME_KEYS if k in by_name and by_name[k][1] == "string"]
        has_id = "topic_id" in by_name
        scopes = [k for k in ("group_id", "transactional_id") if k in by_name and by_name[k][1] == "string"]
        if not names and not has_id and not scopes:
            return []
        lines = ["o = None"]
        keyword = "if"
        for k in names:
            lines.append(f"{keyword} type(v := item[{k!r}]) is str and v:")
            lines.append("    o = {**ctx, 'topic': v}")
            keyword = "elif"
        if has_id:
            # The all-zero uuid means "no topic id" (KIP-516): names are the key then.
            lines.append("tid = item['topic_id']")
            lines.append("if tid is not None and getattr(tid, 'int', 1) != 0:")
            lines.append("    o = {**(o or ctx), 'topic_id': str(tid)}")
        for k in scopes:
            lines.append(f"if type(v := item[{k!r}]) is str:")
            group = ", 'group_id': v" if k == "group_id" else ""
            lines.append(f"    o = {{**(o or ctx), 'scope': v{group}}}")
        lines.append("sub = ctx if o is None else o")
        return lines

    def partition_facts(self, by_name: dict[str, Any], pkey: str) -> list[str]:
        lines = ["facts = dict(sub)", f"facts['partition'] = item[{pkey!r}]"]
        for src, dst in self.fields_map.items():
            if dst is None or src not in by_name:
                continue
            kind = by_name[src][1]
            if kind in _INT_KINDS or kind == "bool":
                lines.append(f"facts[{dst!r}] = item[{src!r}]")
            elif kind == "[]int32":  # broker ids (AlterPartition's ISR): "1,2,3" as listed
                lines.append(f"if (v := item[{src!r}]) is not None:")
                lines.append(f"    facts[{dst!r}] = ','.join(map(str, v))")
            elif kind == "[]struct" and "broker_id" in {_name(f) for f in by_name[src][6]}:
                # AlterPartition v3+ NewIsrWithEpochs (KIP-903): the brokers' ids, as listed.
                lines.append(f"if (v := item[{src!r}]) is not None:")
                lines.append(f"    facts[{dst!r}] = ','.join(str(b['broker_id']) for b in v)")
            elif kind == "struct":
                # Fetch v12+ current_leader (KIP-595): the leader and epoch the responding replica
                # knows, when it names one (a tagged field; -1 when it names none).
                lines.append(f"if (v := item[{src!r}]) is not None and v['leader_id'] >= 0:")
                lines.append("    facts['leader_id'] = v['leader_id']")
                lines.append("    facts['leader_epoch'] = v['leader_epoch']")
        if "records" in by_name:
            lines.append("_record_facts(facts, item['records'], _API_KEY, options)")
        elif self.list_offsets and "old_style_offsets" in by_name:
            lines.append("if item['old_style_offsets']:")
            lines.append("    facts['offset'] = item['old_style_offsets'][0]  # v0: a list, newest first")
        return lines + _KEEP


# Merge one partition's facts into `out` under its key (a partition may be named twice).
_KEEP = [
    "key = (sub.get('scope'), sub.get('topic_id') or sub.get('topic'), facts['partition'])",
    "facts.pop('scope', None)",
    "if (had := out.get(key)) is None:",
    "    out[key] = facts",
    "else:",
    "    had.update(facts)",
]


def compile_partition_walker(
    fields: tuple[Any, ...],
    fields_map: dict[str, str | None],
    list_offsets: bool,
    record_facts: Callable[..., None],
    api_key: int,
    label: str,
) -> Callable[[dict[str, Any], dict[Any, Any], Any], None] | None:
    """`walk(msg, out, options)` for one message version, or None if it names no partitions.

    ``fields_map`` maps spec field names to columns (None drops one); ``record_facts(facts, data,
    api_key, options)`` adds the facts of a records field."""
    writer = _PartitionWriter(fields_map, list_offsets)
    root = writer.walker(fields, 0)
    if root is None:
        return None
    source = "\n".join(writer.functions)
    source += f"\ndef walk(msg, out, options):\n    {root}(msg, {{}}, out, options)\n"
    namespace: dict[str, Any] = {"_record_facts": record_facts, "_API_KEY": api_key}
    exec(compile_module(source, f"<kwsniff partitions {label}>"), namespace)
    walk: Callable[[dict[str, Any], dict[Any, Any], Any], None] = namespace["walk"]
    return walk


# ----------------------------------------------------------------------------------------- errors


class _ErrorWriter(_Source):
    """Writes `errors(msg, out)`: (chain of dicts from the root to the holder, path, field, code)
    for every non-zero error code, in the order of the message's fields."""

    def struct(self, fields: tuple[Any, ...], path: str) -> str | None:
        body: list[str] = []
        for field in fields:
            name, kind = _name(field), field[1]
            if name.endswith("error_code") and (kind in _INT_KINDS or kind == "bool"):
                body.append(f"    if v := node[{name!r}]:")
                body.append(f"        out.append((chain + (node,), {path + name!r}, {name!r}, v))")
            elif kind == "struct":
                child = self.struct(field[6], f"{path}{name}.")
                if child is not None:
                    body.append(f"    if (v := node[{name!r}]) is not None:")
                    body.append(f"        {child}(v, chain + (node,), out)")
            elif kind == "[]struct":
                child = self.struct(field[6], f"{path}{name}[].")
                if child is not None:
                    body.append(f"    if v := node[{name!r}]:")
                    body.append("        inner = chain + (node,)")
                    body.append("        for item in v:")
                    body.append(f"            {child}(item, inner, out)")
        if not body:
            return None
        name = self.name("_e")
        self.functions.append("\n".join([f"def {name}(node, chain, out):", *body]) + "\n")
        return name


def compile_error_finder(
    fields: tuple[Any, ...], label: str
) -> Callable[[dict[str, Any], list[Any]], None] | None:
    """`errors(msg, out)` for one message version, or None if it has no error code field."""
    writer = _ErrorWriter()
    root = writer.struct(fields, "")
    if root is None:
        return None
    source = "\n".join(writer.functions) + f"\ndef errors(msg, out):\n    {root}(msg, (), out)\n"
    namespace: dict[str, Any] = {}
    exec(compile_module(source, f"<kwsniff errors {label}>"), namespace)
    errors: Callable[[dict[str, Any], list[Any]], None] = namespace["errors"]
    return errors
