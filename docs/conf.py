"""Sphinx configuration of the liftbridge-nats documentation.

``make docs`` builds the site into ``docs/_build/html`` with warnings as errors, and so
does the test suite (tests/integration/test_docs.py). The guides are MyST Markdown,
readable on GitHub as they stand; the API reference is reStructuredText, the language
of the docstrings, rendered by autodoc.
"""

from __future__ import annotations

import importlib
import pkgutil
import tomllib
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

from docutils import nodes
from sphinx import addnodes
from sphinx.application import Sphinx
from sphinx.environment import BuildEnvironment
from sphinx.pycode import ModuleAnalyzer
from sphinx.transforms import SphinxTransform
from sphinx.util import logging

import liftbridge_nats

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
_PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
REPOSITORY = _PYPROJECT["project"]["urls"]["Repository"]
BRANCH = "main"

project = "liftbridge-nats"
author = "liftbridge-nats developers"
copyright = "liftbridge-nats developers"
release = version = liftbridge_nats.__version__

extensions = ["myst_parser", "sphinx.ext.autodoc"]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]

html_theme = "furo"
html_title = f"liftbridge-nats {release}"
html_theme_options = {
    "source_repository": REPOSITORY,
    "source_branch": BRANCH,
    "source_directory": "docs/",
}

# GitHub computes the same anchors for headings, so `page.md#a-heading` works on both.
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "undoc-members": True}
# Publisher and Client take many keyword arguments: one per line reads better.
python_maximum_signature_line_length = 88

_log = logging.getLogger(__name__)


def public_modules() -> list[ModuleType]:
    """The package and its public modules (no part of the name starts with ``_``)."""
    found = [liftbridge_nats]
    for info in pkgutil.walk_packages(liftbridge_nats.__path__, "liftbridge_nats."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            found.append(importlib.import_module(info.name))
    return found


def documented_name(module: ModuleType, name: str) -> str:
    """Where the reference documents ``module.name``: under the public module its
    ``__module__`` names (``liftbridge_nats.Publisher``, ``liftbridge_nats.envelope.Envelope``
    although the root exports it too), else under ``module`` itself."""
    value = getattr(module, name)
    home = getattr(value, "__module__", None) if isinstance(value, type | FunctionType) else None
    if not home or any(part.startswith("_") for part in home.split(".")):
        home = module.__name__
    return f"{home}.{name}"


def _read_sources_where_implemented(app: Sphinx) -> None:
    """Let autodoc find the attribute docstrings of names a package re-exports.

    autodoc reads attribute docstrings (dataclass fields, enum members, constants) from
    the source of the module that an object's ``__module__`` names, or, for a constant,
    of the module it is documented in. The root's public classes claim
    ``__module__ = "liftbridge_nats"`` (as httpx's do), so that they are documented where
    users import them from, and the constants of the root and of ``testing`` are
    defined in private modules: the packages' ``__init__.py`` hold none of those
    docstrings. Here each public package's source analysis gets them from the private
    modules beside it that implement its names.
    """
    for package in public_modules():
        if not hasattr(package, "__path__") or not hasattr(package, "__all__"):
            continue
        public = set(package.__all__)
        claimed = liftbridge_nats._IMPLEMENTED_IN if package is liftbridge_nats else {}
        target = ModuleAnalyzer.for_module(package.__name__)
        target.analyze()
        prefix = package.__name__ + "."
        for info in pkgutil.iter_modules(package.__path__, prefix):
            short = info.name[len(prefix) :]
            # Analysing a module imports it: never a package's __main__.
            if not short.startswith("_") or short == "__main__" or info.ispkg:
                continue
            source = ModuleAnalyzer.for_module(info.name)
            source.analyze()
            for (scope, attr), doc in source.attr_docs.items():
                owner = scope.split(".", 1)[0]
                mine = claimed.get(owner) == info.name if owner else attr in public
                if mine and (scope, attr) not in target.attr_docs:
                    target.attr_docs[scope, attr] = doc
            for dotted, order in source.tagorder.items():
                if claimed.get(dotted.split(".", 1)[0]) == info.name:
                    target.tagorder[dotted] = order


def _check_every_public_name(app: Sphinx, env: BuildEnvironment) -> None:
    """Warn (an error under ``-W``) for a public module or name the reference lacks."""
    objects = env.domains.python_domain.objects
    for module in public_modules():
        if module.__name__ not in objects:
            _log.warning("the API reference does not document module %s", module.__name__)
        for name in module.__all__ if hasattr(module, "__all__") else ():
            target = documented_name(module, name)
            if target not in objects:
                _log.warning("the API reference does not document %s", target)


class RepositoryLinks(SphinxTransform):
    """Point links to repository files outside docs/ at the repository.

    A guide links ``../bench/RESULTS.md`` or ``../examples/publish.py`` as GitHub shows
    the page; on the site those files are not pages, so the link goes to the file on
    GitHub instead.
    """

    default_priority = 500

    def apply(self, **kwargs: Any) -> None:
        doc_dir = Path(self.env.doc2path(self.env.docname)).parent
        for node in list(self.document.findall(nodes.Element)):
            if not _myst_link(node):
                continue
            target = str(node["reftarget"])
            if node.get("refdomain") == "doc" and Path(target).is_absolute():
                # MyST made a page name of a Markdown file outside the source folder.
                candidates = [Path(target + suffix) for suffix in source_suffix]
            else:
                candidates = [doc_dir / target.split("#", 1)[0]]
            found = [p.resolve() for p in candidates if p.exists()]
            if not found or not found[0].is_relative_to(ROOT) or found[0].is_relative_to(DOCS):
                continue
            path = found[0]
            kind = "tree" if path.is_dir() else "blob"
            uri = f"{REPOSITORY}/{kind}/{BRANCH}/{path.relative_to(ROOT).as_posix()}"
            link = nodes.reference("", "", *node.children, refuri=uri, internal=False)
            node.replace_self(link)


def _myst_link(node: nodes.Element) -> bool:
    return (
        isinstance(node, addnodes.pending_xref | addnodes.download_reference)
        and node.get("reftype") == "myst"
    )


def setup(app: Sphinx) -> dict[str, Any]:
    app.connect("builder-inited", _read_sources_where_implemented)
    app.connect("env-check-consistency", _check_every_public_name)
    app.add_transform(RepositoryLinks)
    return {"parallel_read_safe": True}
