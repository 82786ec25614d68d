"""XML parsing with element line numbers, for error messages that name the file and line."""

from __future__ import annotations

import os
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any
from xml.parsers import expat

import numpy as np

from ._loaded import ModelFileError


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
        data = src.read()
        name = getattr(src, "name", None)
        name = name if isinstance(name, str) else TEXT_NAME
        return name, data.encode() if isinstance(data, str) else bytes(data)
    if isinstance(src, bytes):
        return TEXT_NAME, src
    if isinstance(src, str) and src.lstrip().startswith("<") and not os.path.exists(src):
        return TEXT_NAME, src.encode()
    if not isinstance(src, (str, os.PathLike)):
        raise TypeError(
            f"{what}: give a file's path, the XML text, or an open file; got {type(src).__name__}"
        )
    path = check_model_path(src, what)
    with open(path, "rb") as fh:
        return path, fh.read()


class XmlDoc:
    """A parsed file: the root element plus the line each element starts on."""

    def __init__(self, path: str | os.PathLike[str], text: str | bytes | None = None, what: str = "model"):
        self.path = os.fspath(path)
        self.name = os.path.basename(self.path)
        self._lines: dict[int, int] = {}
        if text is None:
            check_model_path(self.path, what)
            with open(self.path, "rb") as fh:
                data = fh.read()
        else:
            data = text if isinstance(text, bytes) else text.encode()
        lines = self._lines
        builder = ET.TreeBuilder()
        p = expat.ParserCreate()
        p.buffer_text = True

        def start(tag: str, attrs: dict[str, str]) -> None:
            el = builder.start(tag, attrs)
            lines[id(el)] = p.CurrentLineNumber

        p.StartElementHandler = start
        p.EndElementHandler = builder.end
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
    file:line:column, with ``hint`` after the fix."""
    if data is None:
        with open(path, "rb") as fh:
            data = fh.read()
    parser = expat.ParserCreate()
    stack: list[Any] = []
    roots: list[Any] = []

    def start(tag: str, attrib: dict[str, str]) -> None:
        el = make(tag, attrib, parser.CurrentLineNumber)
        (stack[-1].children if stack else roots).append(el)
        stack.append(el)

    def end(tag: str) -> None:
        stack.pop()

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    try:
        parser.Parse(data, True)
    except expat.ExpatError as e:
        raise ModelFileError(
            f"{path}:{e.lineno}:{e.offset + 1}: malformed XML ({expat.ErrorString(e.code)}); "
            f"fix the file ({hint})"
        ) from None
    return roots[0]
