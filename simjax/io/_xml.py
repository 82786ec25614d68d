"""XML parsing with element line numbers, for error messages that name the file and line."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any
from xml.parsers import expat

import numpy as np

from ._loaded import ModelFileError

#: The deepest element nesting a model file may have (a body in a body in ... is one level
#: each): deeper files are refused with a ModelFileError, not a RecursionError.
MAX_DEPTH = 500
#: The largest XML file (bytes) a loader reads, and the most bytes a model's ``<include>``s
#: may add up to.
MAX_BYTES = 256 * 2**20
#: The most ``<include>`` elements an MJCF model may expand (a file included twice counts twice).
MAX_INCLUDES = 1000


def _size(n: int) -> str:
    return f"{n / 2**20:.0f} MB" if n >= 2**20 else f"{n} bytes"


def _too_big(name: str, size: int) -> ModelFileError:
    return ModelFileError(
        f"{name}: the file is {_size(size)}; simjax reads XML model files of at most "
        f"{_size(MAX_BYTES)} (simjax.io._xml.MAX_BYTES)"
    )


def read_bounded(path: str) -> bytes:
    """The bytes of the file at ``path``, or a ModelFileError when it is over ``MAX_BYTES``."""
    size = os.path.getsize(path)
    if size > MAX_BYTES:
        raise _too_big(path, size)
    with open(path, "rb") as fh:
        return fh.read()


def check_model_path(path: str | os.PathLike[str], what: str) -> str:
    """``path`` as a string, or a FileNotFoundError that says what was given: a loader's
    argument is a file's path, and XML text passed in its place is named as such."""
    path = os.fspath(path)
    if not os.path.exists(path):
        if path.lstrip().startswith("<"):
            raise FileNotFoundError(
                f"{what}: the loader takes a file's path, and this looks like XML text "
                f"({path.strip()[:40]!r}...); write it to a file first, e.g. "
                "pathlib.Path('model.xml').write_text(text), and load that path"
            )
        where = "" if os.path.isabs(path) else f" (relative to {os.getcwd()!r})"
        raise FileNotFoundError(f"{what} file not found: {path!r}{where}")
    return path


# The name a model given as XML text (not a file) goes by in messages; relative paths in
# it (MJCF <include>s) are taken from the working directory, as MuJoCo's from_xml_string.
TEXT_NAME = "<string>"


def read_model_source(src: Any, what: str) -> tuple[str, bytes]:
    """``(name, data)`` of a loader's model argument: a file's path, the XML text itself
    (a ``str`` that starts with ``<``), or an open file (anything with ``read()``). The
    name is the path, the file object's ``name``, or ``TEXT_NAME``."""
    if hasattr(src, "read"):
        data = src.read(MAX_BYTES + 1)
        name = getattr(src, "name", None)
        name = name if isinstance(name, str) else TEXT_NAME
        data = data.encode() if isinstance(data, str) else bytes(data)
    elif isinstance(src, bytes):
        name, data = TEXT_NAME, src
    elif isinstance(src, str) and src.lstrip().startswith("<") and not os.path.exists(src):
        name, data = TEXT_NAME, src.encode()
    elif not isinstance(src, (str, os.PathLike)):
        raise TypeError(
            f"{what}: give a file's path, the XML text, or an open file; got {type(src).__name__}"
        )
    else:
        path = check_model_path(src, what)
        return path, read_bounded(path)
    if len(data) > MAX_BYTES:
        raise _too_big(name, len(data))
    return name, data


def model_folder(name: str) -> str:
    """The folder of the model file ``name`` (a path, or ``TEXT_NAME`` for XML text or an
    open file with no path): the file's folder, else the working directory."""
    return os.path.dirname(os.path.abspath(name)) if os.path.isfile(name) else os.getcwd()


def safe_parser(name: str, start: Callable[[str, dict[str, str]], Any], end: Callable[[str], Any]) -> Any:
    """An expat parser that calls ``start(tag, attrib)`` and ``end(tag)`` and refuses, with a
    ModelFileError naming ``name`` and the line, what a model file has no use for and what
    could read other files or blow up: a ``<!DOCTYPE>`` with declarations or an external
    DTD, entity declarations (billion laughs, external entities), and elements nested more
    than ``MAX_DEPTH`` deep. This does not depend on the linked expat's own limits."""
    p = expat.ParserCreate()
    p.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
    depth = [0]

    def refuse(what: str) -> ModelFileError:
        return ModelFileError(
            f"{name}:{p.CurrentLineNumber}: {what}; simjax reads model files without DTDs or "
            "entities (they can read other files or expand without bound): write the values out "
            "and remove the <!DOCTYPE ...> declarations"
        )

    def doctype(root: str, system_id: str | None, public_id: str | None, internal: int) -> None:
        if system_id or public_id:
            raise refuse(f"<!DOCTYPE {root}> names an external DTD ({system_id or public_id!r})")
        if internal:
            raise refuse(f"<!DOCTYPE {root} [...]> declares entities or other markup")

    def entity(entity_name: str, *args: Any) -> None:
        raise refuse(f"the file declares the XML entity {entity_name!r} (<!ENTITY ...>)")

    def external(context: str | None, base: str | None, system_id: str | None, *args: Any) -> int:
        raise refuse(f"the file refers to an external entity ({system_id!r})")

    def start_el(tag: str, attrib: dict[str, str]) -> None:
        depth[0] += 1
        if depth[0] > MAX_DEPTH:
            raise ModelFileError(
                f"{name}:{p.CurrentLineNumber}: <{tag}> is nested {depth[0]} elements deep; simjax reads "
                f"models at most {MAX_DEPTH} levels deep (simjax.io._xml.MAX_DEPTH)"
            )
        start(tag, attrib)

    def end_el(tag: str) -> None:
        depth[0] -= 1
        end(tag)

    p.StartDoctypeDeclHandler = doctype
    p.EntityDeclHandler = entity
    p.UnparsedEntityDeclHandler = entity
    p.ExternalEntityRefHandler = external
    p.StartElementHandler = start_el
    p.EndElementHandler = end_el
    return p


def parse_tree(data: bytes, name: str) -> ET.Element:
    """``data`` parsed into an ElementTree element by :func:`safe_parser` (expat errors
    raise ``expat.ExpatError``, as ``ET.fromstring`` raises ``ET.ParseError``)."""
    if len(data) > MAX_BYTES:
        raise _too_big(name, len(data))
    builder = ET.TreeBuilder()
    p = safe_parser(name, builder.start, builder.end)
    p.buffer_text = True
    p.CharacterDataHandler = builder.data
    p.Parse(data, True)
    return builder.close()


class XmlDoc:
    """A parsed file: the root element plus the line each element starts on."""

    def __init__(self, path: str | os.PathLike[str], text: str | bytes | None = None, what: str = "model"):
        self.path = os.fspath(path)
        self.name = os.path.basename(self.path)
        self._lines: dict[int, int] = {}
        if text is None:
            check_model_path(self.path, what)
            data = read_bounded(self.path)
        else:
            data = text if isinstance(text, bytes) else text.encode()
            if len(data) > MAX_BYTES:
                raise _too_big(self.name, len(data))
        lines = self._lines
        builder = ET.TreeBuilder()

        def start(tag: str, attrs: dict[str, str]) -> None:
            el = builder.start(tag, attrs)
            lines[id(el)] = p.CurrentLineNumber

        p = safe_parser(self.name, start, builder.end)
        p.buffer_text = True
        p.CharacterDataHandler = builder.data
        try:
            p.Parse(data, True)
            self.root = builder.close()
        except expat.ExpatError as e:
            raise ModelFileError(
                f"{self.name}:{e.lineno}:{e.offset}: malformed XML "
                f"({expat.errors.messages[e.code]}); fix the file"
            ) from None
        except AssertionError:
            raise ModelFileError(f"{self.name}: malformed XML (no root element); fix the file") from None

    def line(self, el: ET.Element) -> int:
        """Line the element starts on (0 if unknown)."""
        return self._lines.get(id(el), 0)

    def where(self, el: ET.Element) -> str:
        """``file:line <Tag name="...">`` for messages."""
        nm = el.get("name")
        tag = f'<{el.tag} name="{nm}">' if nm is not None else f"<{el.tag}>"
        return f"{self.name}:{self.line(el)} {tag}"

    def error(self, el: ET.Element, msg: str) -> ModelFileError:
        return ModelFileError(f"{self.where(el)}: {msg}")

    # ------------------------------------------------------------------ values
    def text(self, el: ET.Element, tag: str, default: str | None = None) -> str | None:
        c = el.find(tag)
        if c is None or c.text is None:
            return default
        return c.text.strip()

    def floats(self, el: ET.Element, tag: str, n: int | None = None, default: Any = None) -> np.ndarray:
        c = el.find(tag)
        if c is None or c.text is None or not c.text.strip():
            if default is None:
                raise self.error(el, f"missing <{tag}>")
            return np.asarray(default, dtype=float)
        try:
            v = np.array([float(x) for x in c.text.replace(",", " ").split()])
        except ValueError:
            raise self.error(c, f"<{tag}> must hold numbers, found {c.text.strip()[:60]!r}") from None
        if n is not None and v.size != n:
            raise self.error(c, f"<{tag}> needs {n} numbers, found {v.size}")
        return v

    def float(self, el: ET.Element, tag: str, default: float | None = None) -> float:
        return float(self.floats(el, tag, 1, None if default is None else [default])[0])

    def bool(self, el: ET.Element, tag: str, default: bool = False) -> bool:
        t = self.text(el, tag)
        if t is None or t == "":
            return default
        t = t.lower()
        if t in ("true", "1", "yes"):
            return True
        if t in ("false", "0", "no"):
            return False
        raise self.error(el, f"<{tag}> must be true or false, found {t!r}")


def parse_with_lines(
    path: str, make: Callable[[str, dict[str, str], int], Any], hint: str, data: bytes | None = None
) -> Any:
    """Parse ``path`` (or ``data``, the file's bytes, named ``path`` in messages) into a tree
    of the caller's element objects: ``make(tag, attrib, line)`` builds one (it must have a
    ``children`` list); returns the root. Malformed XML becomes a ``ModelFileError`` naming
    file:line:column, with ``hint`` after the fix; so do the documents ``safe_parser``
    refuses."""
    if data is None:
        data = read_bounded(path)
    elif len(data) > MAX_BYTES:
        raise _too_big(path, len(data))
    stack: list[Any] = []
    roots: list[Any] = []

    def start(tag: str, attrib: dict[str, str]) -> None:
        el = make(tag, attrib, parser.CurrentLineNumber)
        (stack[-1].children if stack else roots).append(el)
        stack.append(el)

    def end(tag: str) -> None:
        stack.pop()

    parser = safe_parser(path, start, end)
    try:
        parser.Parse(data, True)
    except expat.ExpatError as e:
        raise ModelFileError(
            f"{path}:{e.lineno}:{e.offset + 1}: malformed XML ({expat.ErrorString(e.code)}); "
            f"fix the file ({hint})"
        ) from None
    return roots[0]
