"""Griffe extension for the API reference: kinds under their base, reST roles as code.

``Force.UniformGravity``, ``MobilizedBody.Pin``, ``Constraint.Ball``, ... are classes
declared beside their base and assigned to it at the end of the module, and declared on the
base as ``Name: ClassVar[type[Kind]]``. Read statically, that is an attribute; this
extension makes each such attribute an alias of the class it names, so the reference shows
every kind under its base, as users write it.

The docstrings are read as Markdown; the reST roles some of them use (``:func:`x```,
``:class:`~a.B```) are shown as the code they name, and a paragraph ending in ``::`` (reST's
literal block) ends in ``:``, its indented block being Markdown's code block already.
Classes derived from ``equinox.Module`` are dataclasses (their fields are the signature).
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|exc|obj):`~?([^`]+)`")
_LITERAL = re.compile(r"::$", re.M)
_KIND = re.compile(r"^type\[(\w+)\]$")  # griffe keeps ClassVar[...] as a label


class KindsAsMembers(griffe.Extension):
    """Turn ``Name: ClassVar[type[Kind]]`` attributes of a class into aliases of ``Kind``,
    and reST roles and literal-block markers in docstrings into Markdown."""

    def on_class(self, *, cls: griffe.Class, **kwargs: Any) -> None:
        """Give subclasses of ``equinox.Module`` without an ``__init__`` the one equinox
        makes: their fields, in order, as its parameters."""
        equinox = any(str(b) in ("eqx.Module", "equinox.Module") for b in cls.bases)
        if "__init__" in cls.members or not equinox:
            return
        fields = [m for m in cls.members.values() if not m.is_alias and m.is_attribute and m.annotation]
        params = [
            griffe.Parameter(
                f.name,
                annotation=f.annotation,
                kind=griffe.ParameterKind.positional_or_keyword,
                default=_field_default(f.value),
            )
            for f in sorted(fields, key=lambda f: f.lineno or 0)
            if "class-attribute" not in f.labels or "instance-attribute" in f.labels
        ]
        init = griffe.Function("__init__", parent=cls, parameters=griffe.Parameters(*params), returns="None")
        cls.set_member("__init__", init)
        cls.labels.add("dataclass")

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Rewrite the kinds' attributes of every class of the package, and the docstrings."""
        for module in _modules(pkg):
            _markdown(module)
            for cls in [m for m in module.members.values() if not m.is_alias and m.is_class]:
                for name, member in list(cls.members.items()):
                    if member.is_alias or not member.is_attribute or member.annotation is None:
                        continue
                    found = _KIND.match(str(member.annotation))
                    if found and found.group(1) in module.members and module.members[found.group(1)].is_class:
                        target = module.members[found.group(1)]
                        cls.set_member(name, griffe.Alias(name, target, parent=cls))


def _modules(module: griffe.Module) -> list[griffe.Module]:
    out = [module]
    for sub in module.modules.values():
        if not sub.is_alias:
            out.extend(_modules(sub))
    return out


def _markdown(obj: griffe.Object) -> None:
    if obj.docstring is not None:
        text = _ROLE.sub(lambda m: f"``{m.group(1)}``", obj.docstring.value)
        obj.docstring.value = _LITERAL.sub(":", text)
    for member in obj.members.values():
        if not member.is_alias and not member.is_module:
            _markdown(member)


def _field_default(value: Any) -> Any:
    """A field's default: ``eqx.field(default=x)`` gives ``x``, a plain value itself."""
    if isinstance(value, griffe.ExprCall) and str(value.function).endswith("field"):
        for arg in value.arguments:
            if isinstance(arg, griffe.ExprKeyword) and arg.name == "default":
                return arg.value
        return None
    return value
