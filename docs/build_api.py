"""Build the HTML API reference from the docstrings into ``docs/api/`` (``make docs``).

Every public module of the package is documented (private ``_`` modules are not), so a
module added later shows up without editing this file. Docstrings are reStructuredText.
"""

from __future__ import annotations

import pkgutil
import re
import sys
from pathlib import Path

import pdoc
import pdoc.docstrings
import pdoc.render

import liftbridge_nats

OUT = Path(__file__).resolve().parent / "api"

# pdoc's reStructuredText support has no Sphinx roles; show :class:`~a.b.C` as ``C``.
_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|attr|mod|data|exc|obj|const):`(~?)([^`]+)`")
_plain_rst = pdoc.docstrings.rst


def _rst_with_roles(contents: str, source_file: Path | None) -> str:
    def literal(match: re.Match[str]) -> str:
        target = match.group(2)
        return f"``{target.rsplit('.', 1)[-1] if match.group(1) else target}``"

    return _plain_rst(_ROLE.sub(literal, contents), source_file)


pdoc.docstrings.rst = _rst_with_roles


def public_modules() -> list[str]:
    """Names of the package's public modules, the package itself first."""
    names = ["liftbridge_nats"]
    for info in pkgutil.walk_packages(liftbridge_nats.__path__, "liftbridge_nats."):
        if not any(part.startswith("_") for part in info.name.split(".")):
            names.append(info.name)
    return names


def main() -> int:
    """Render every public module into ``docs/api`` and print where the index is."""
    pdoc.render.configure(
        docformat="restructuredtext",
        footer_text=f"liftbridge-nats {liftbridge_nats.__version__}",
        search=True,
        show_source=True,
    )
    pdoc.pdoc(*public_modules(), output_directory=OUT)
    print(f"API reference: {OUT / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
