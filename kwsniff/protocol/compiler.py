"""Compile one (api key, version, direction) of the schema into a specialised Python decode function.

The field tree is walked once, here, to write straight-line Python source (one function per struct
type, consecutive fixed-size fields read with one precompiled struct unpack), which is then exec'd.
Decoding a message therefore runs no interpreter over the schema.

Generated functions have the shape `(buf: memoryview, pos: int) -> (value, new_pos)` like kio's
readers. Every length and count is checked against the bytes left before anything is allocated.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable
from typing import Any

from kwsniff.codecache import compile_module
from kwsniff.protocol import wire
from kwsniff.protocol.decode_error import DecodeError

# Schema field tuple: (name, type, versions, nullable_versions, tag, default, children).
Field = tuple[
    str, str, tuple[int, int], "tuple[int, int] | None", "int | None", Any, "tuple[Any, ...] | None"
]

FIXED: dict[str, tuple[str, int]] = {
    "int8": ("b", 1),
    "int16": ("h", 2),
    "int32": ("i", 4),
    "int64": ("q", 8),
    "uint16": ("H", 2),
    "uint32": ("I", 4),
    "float64": ("d", 8),
    "bool": ("?", 1),  # Kafka reads a bool as "byte != 0", and so does struct's "?"
    "uuid": ("16s", 16),
}


def _in(rng: tuple[int, int] | None, version: int) -> bool:
    return rng is not None and rng[0] <= version <= rng[1]


class _Writer:
    """Accumulates the generated functions and the constants they refer to for one compile."""

    def __init__(self, version: int, flexible: bool, records_view: bool = False) -> None:
        self.records_view = records_view
        self.version = version
        self.flexible = flexible
        self.functions: list[str] = []
        self.constants: dict[str, Any] = {}
        self.counter = 0

    def name(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def constant(self, prefix: str, value: Any) -> str:
        name = self.name(prefix)
        self.constants[name] = value
        return name

    def fields_at(self, fields: tuple[Any, ...]) -> list[Any]:
        return [field for field in fields if _in(field[2], self.version)]

    # ------------------------------------------------------------ sizes and defaults

    def min_size(self, kind: str, nullable: bool, children: tuple[Any, ...] | None) -> int:
        """Fewest bytes one value can take; bounds array counts before allocating."""
        if kind in FIXED:
            return FIXED[kind][1]
        if kind in ("string",):
            return 1 if self.flexible else 2
        if kind in ("bytes", "records") or kind.startswith("[]"):
            return 1 if self.flexible else 4
        if kind == "struct":
            if nullable:
                return 1
            assert children is not None
            size = 1 if self.flexible else 0
            for _name, ckind, _v, cnull, tag, _d, grand in self.fields_at(children):
                if tag is None or not self.flexible:
                    size += self.min_size(ckind, _in(cnull, self.version), grand)
            return size
        raise ValueError(f"unknown type {kind}")

    def default_expr(self, kind: str, default: Any, children: tuple[Any, ...] | None) -> str:
        if default is None:
            return "None"
        if kind.startswith("[]"):
            return "[]"
        if kind == "struct":
            assert children is not None
            return f"{self.default_struct(children)}()"
        if kind == "uuid":
            return self.constant("_U", uuid.UUID(default))
        return repr(default)

    def default_struct(self, children: tuple[Any, ...]) -> str:
        name = self.name("_d")
        items = ", ".join(
            f"{cname!r}: {self.default_expr(ckind, cdefault, grand)}"
            for cname, ckind, _v, _n, _t, cdefault, grand in self.fields_at(children)
        )
        self.functions.append(f"def {name}():\n    return {{{items}}}\n")
        return name

    # ------------------------------------------------------------ reads

    def read_length(self, out: list[str], ind: str, var: str, int32: bool) -> None:
        """Length/count prefix into var: classic int16/int32, or compact uvarint minus one (KIP-482)."""
        if self.flexible:
            out.append(f"{ind}{var} = buf[pos]")
            out.append(f"{ind}if {var} < 128:")
            out.append(f"{ind}    pos += 1")
            out.append(f"{ind}else:")
            out.append(f"{ind}    {var}, pos = _uvarint(buf, pos)")
            out.append(f"{ind}{var} -= 1")
        elif int32:
            out.append(f"{ind}({var},) = _I32(buf, pos)")
            out.append(f"{ind}pos += 4")
        else:
            out.append(f"{ind}({var},) = _I16(buf, pos)")
            out.append(f"{ind}pos += 2")

    def read_null_check(self, out: list[str], ind: str, var: str, target: str, nullable: bool) -> str:
        """Handle a negative length (null, as Kafka's generated readers do); returns the indent to go on."""
        out.append(f"{ind}if {var} < 0:")
        if nullable:
            out.append(f"{ind}    {target} = None")
        else:
            out.append(f"{ind}    raise _Fail(pos, 'null in non-nullable field')")
        out.append(f"{ind}else:")
        return ind + "    "

    def read_value(
        self,
        out: list[str],
        ind: str,
        target: str,
        kind: str,
        nullable: bool,
        children: tuple[Any, ...] | None,
    ) -> None:
        """Emit statements reading one value of `kind` at pos into `target`, advancing pos."""
        if kind in FIXED:
            fmt, size = FIXED[kind]
            unpack = self.constant("_S", struct.Struct(">" + fmt).unpack_from)
            out.append(f"{ind}({target},) = {unpack}(buf, pos)")
            out.append(f"{ind}pos += {size}")
            if kind == "uuid":
                out.append(f"{ind}{target} = _uuid({target})")
            return
        if kind in ("string", "bytes", "records"):
            n = self.name("n")
            self.read_length(out, ind, n, int32=kind != "string")
            body = self.read_null_check(out, ind, n, target, nullable)
            out.append(f"{body}if {n} > len(buf) - pos:")
            out.append(f"{body}    raise _Fail(pos, 'length {{}} exceeds body'.format({n}))")
            if kind == "string":
                # Like Java's new String(bytes, UTF_8): undecodable bytes become U+FFFD.
                out.append(f"{body}{target} = str(buf[pos:pos + {n}], 'utf-8', 'replace')")
            elif kind == "records" and self.records_view:
                # Record data is most of a Produce or Fetch; the tables read only batch headers from
                # it, so the pipeline takes a view instead of a copy (DESIGN.md "Performance shape").
                out.append(f"{body}{target} = buf[pos:pos + {n}]")
            else:
                out.append(f"{body}{target} = bytes(buf[pos:pos + {n}])")
            out.append(f"{body}pos += {n}")
            return
        if kind == "struct":
            assert children is not None
            function = self.struct_function(children)
            if nullable:
                # Nullable structs carry an int8 presence marker: -1 null, 1 present.
                marker = self.name("m")
                out.append(f"{ind}({marker},) = _I8(buf, pos)")
                out.append(f"{ind}pos += 1")
                out.append(f"{ind}if {marker} < 0:")
                out.append(f"{ind}    {target} = None")
                out.append(f"{ind}else:")
                out.append(f"{ind}    {target}, pos = {function}(buf, pos)")
            else:
                out.append(f"{ind}{target}, pos = {function}(buf, pos)")
            return
        if kind.startswith("[]"):
            self.read_array(out, ind, target, kind[2:], nullable, children)
            return
        raise ValueError(f"unknown type {kind}")

    def read_array(
        self,
        out: list[str],
        ind: str,
        target: str,
        element: str,
        nullable: bool,
        children: tuple[Any, ...] | None,
    ) -> None:
        n = self.name("n")
        self.read_length(out, ind, n, int32=True)
        body = self.read_null_check(out, ind, n, target, nullable)
        per_item = max(1, self.min_size(element, False, children))
        out.append(f"{body}if {n} * {per_item} > len(buf) - pos:")
        out.append(f"{body}    raise _Fail(pos, 'array count {{}} exceeds body'.format({n}))")
        if element == "uuid":
            out.append(
                f"{body}{target} = [_uuid(bytes(buf[p:p + 16])) for p in range(pos, pos + 16 * {n}, 16)]"
            )
            out.append(f"{body}pos += {n} * 16")
            return
        if element in FIXED:
            fmt, size = FIXED[element]
            out.append(f"{body}{target} = _unpack_array({fmt!r}, {n}, buf, pos)")
            out.append(f"{body}pos += {n} * {size}")
            return
        i, item = self.name("i"), self.name("e")
        out.append(f"{body}{target} = []")
        out.append(f"{body}for {i} in range({n}):")
        if element == "struct":
            assert children is not None
            function = self.struct_function(children)
            out.append(f"{body}    try:")
            out.append(f"{body}        {item}, pos = {function}(buf, pos)")
            out.append(f"{body}    except _Fail as x:")
            out.append(f"{body}        x.path.append('[{{}}]'.format({i}))")
            out.append(f"{body}        raise")
        else:
            self.read_value(out, body + "    ", item, element, False, None)
        out.append(f"{body}    {target}.append({item})")

    # ------------------------------------------------------------ functions

    def struct_function(self, fields: tuple[Any, ...]) -> str:
        """Emit a function decoding one struct at this version; returns its name."""
        name = self.name("_s")
        present = self.fields_at(fields)
        flexible = self.flexible
        body: list[str] = []
        ind = "        "
        keys: list[tuple[str, str]] = []
        tagged: list[tuple[Any, str]] = []
        group: list[tuple[str, str, str]] = []  # (field name, kind, variable) of pending fixed reads

        def flush() -> None:
            if not group:
                return
            fmt = ">" + "".join(FIXED[kind][0] for _n, kind, _v in group)
            unpack = self.constant("_S", struct.Struct(fmt).unpack_from)
            where = self.constant("_g", tuple((fname, FIXED[kind][1]) for fname, kind, _v in group))
            variables = ", ".join(var for _n, _k, var in group)
            body.append(f"{ind}f = {where}")
            body.append(f"{ind}({variables},) = {unpack}(buf, pos)")
            body.append(f"{ind}pos += {struct.calcsize(fmt)}")
            for _n, kind, var in group:
                if kind == "uuid":
                    body.append(f"{ind}{var} = _uuid({var})")
            group.clear()

        for fname, kind, _versions, nullable_versions, tag, default, children in present:
            var = self.name("v")
            keys.append((fname, var))
            nullable = _in(nullable_versions, self.version)
            if tag is not None and flexible:
                tagged.append(((fname, kind, nullable, tag, default, children), var))
                continue
            if kind in FIXED:
                group.append((fname, kind, var))
                continue
            flush()
            body.append(f"{ind}f = {fname!r}")
            self.read_value(body, ind, var, kind, nullable, children)
        flush()
        if flexible:
            self.tagged_section(body, ind, tagged)
        lines = [f"def {name}(buf, pos):", "    f = ''", "    try:"]
        lines += body or [f"{ind}pass"]
        lines += [
            "    except _Fail as x:",
            "        x.path.append(f)",
            "        raise",
            "    except Exception as x:",
            "        raise _located(x, f, pos, buf) from None",
        ]
        items = ", ".join(f"{fname!r}: {var}" for fname, var in keys)
        if flexible:
            lines.append(f"    d = {{{items}}}")
            lines.append("    if unknown is not None:")
            lines.append("        d['_unknown_tags'] = unknown")
            lines.append("    return d, pos")
        else:
            lines.append(f"    return {{{items}}}, pos")
        self.functions.append("\n".join(lines) + "\n")
        return name

    def tagged_section(self, body: list[str], ind: str, tagged: list[tuple[Any, str]]) -> None:
        """Tagged fields (KIP-482): uvarint count, then per field uvarint tag, uvarint size, data.

        A known tag is decoded from a slice bounded by its size and must consume exactly that size;
        unknown tags are kept raw. Duplicate or out-of-order tags are accepted, the last one wins.
        """
        for (_fname, kind, _nullable, _tag, default, children), var in tagged:
            body.append(f"{ind}{var} = {self.default_expr(kind, default, children)}")
        body.append(f"{ind}unknown = None")
        body.append(f"{ind}f = '_tagged_fields'")
        body.append(f"{ind}count = buf[pos]")
        body.append(f"{ind}if count < 128:")
        body.append(f"{ind}    pos += 1")
        body.append(f"{ind}else:")
        body.append(f"{ind}    count, pos = _uvarint(buf, pos)")
        body.append(f"{ind}if count:")
        inner = ind + "        "
        body.append(f"{ind}    if count * 2 > len(buf) - pos:")
        body.append(f"{ind}        raise _Fail(pos, 'tagged field count {{}} exceeds body'.format(count))")
        body.append(f"{ind}    for _ in range(count):")
        body.append(f"{inner}f = '_tagged_fields'")
        body.append(f"{inner}tag, pos = _uvarint(buf, pos)")
        body.append(f"{inner}size, pos = _uvarint(buf, pos)")
        body.append(f"{inner}if size > len(buf) - pos:")
        body.append(f"{inner}    raise _Fail(pos, 'tagged field size {{}} exceeds body'.format(size))")
        keyword = "if"
        for (fname, kind, nullable, tag, _default, children), var in tagged:
            reader = self.tag_function(kind, nullable, children)
            body.append(f"{inner}{keyword} tag == {tag}:")
            body.append(f"{inner}    f = {fname!r}")
            body.append(f"{inner}    try:")
            body.append(f"{inner}        {var}, used = {reader}(buf[pos:pos + size], 0)")
            body.append(f"{inner}    except _Fail as x:")
            body.append(f"{inner}        x.offset += pos")
            body.append(f"{inner}        raise")
            body.append(f"{inner}    if used != size:")
            body.append(f"{inner}        raise _Fail(pos + used, 'tagged field not fully consumed')")
            keyword = "elif"
        if tagged:
            body.append(f"{inner}else:")
            unknown_ind = inner + "    "
        else:
            unknown_ind = inner
        body.append(f"{unknown_ind}if unknown is None:")
        body.append(f"{unknown_ind}    unknown = {{}}")
        body.append(f"{unknown_ind}unknown[tag] = bytes(buf[pos:pos + size])")
        body.append(f"{inner}pos += size")

    def tag_function(self, kind: str, nullable: bool, children: tuple[Any, ...] | None) -> str:
        """A function reading one tagged field's value from its own bounded slice."""
        name = self.name("_t")
        body: list[str] = []
        self.read_value(body, "        ", "value", kind, nullable, children)
        lines = [f"def {name}(buf, pos):", "    try:"] + body
        lines += [
            "    except _Fail:",
            "        raise",
            "    except Exception as x:",
            "        raise _located(x, '', pos, buf) from None",
            "    return value, pos",
        ]
        self.functions.append("\n".join(lines) + "\n")
        return name


_RUNTIME: dict[str, Any] = {
    "_Fail": wire.Fail,
    "_located": wire.located,
    "_uvarint": wire.read_uvarint,
    "_uuid": wire.make_uuid,
    "_unpack_array": wire.unpack_array,
    "_I8": struct.Struct(">b").unpack_from,
    "_I16": struct.Struct(">h").unpack_from,
    "_I32": struct.Struct(">i").unpack_from,
    "DecodeError": DecodeError,
}

_TOP = """
def decode(body):
    buf = body if type(body) is memoryview else memoryview(body)
    try:
        d, pos = {root}(buf, 0)
    except _Fail as x:
        raise x.to_error() from None
    if pos != len(buf):
        raise DecodeError(pos, '', 'trailing bytes')
    return d
"""


def message_source(
    fields: tuple[Any, ...], version: int, flexible: bool, records_view: bool = False
) -> tuple[str, dict[str, Any]]:
    """Python source of a `decode(body) -> dict` function for one message version, and its constants."""
    writer = _Writer(version, flexible, records_view)
    root = writer.struct_function(fields)
    source = "\n".join(writer.functions) + _TOP.format(root=root)
    return source, writer.constants


def compile_message(
    fields: tuple[Any, ...], version: int, flexible: bool, label: str, records_view: bool = False
) -> Callable[[bytes | memoryview], dict[str, Any]]:
    source, constants = message_source(fields, version, flexible, records_view)
    namespace: dict[str, Any] = dict(_RUNTIME)
    namespace.update(constants)
    exec(compile_module(source, f"<kwsniff decoder {label}>"), namespace)
    decode: Callable[[bytes | memoryview], dict[str, Any]] = namespace["decode"]
    return decode
