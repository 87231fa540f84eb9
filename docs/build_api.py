"""Build the HTML API reference from the docstrings into ``docs/api/`` (``make docs``).

Every public module of the package is documented (private ``_`` modules are not), so a
module added later shows up without editing this file. Docstrings are reStructuredText.
Any warning pdoc raises (an annotation it cannot resolve, a docstring it cannot parse)
fails the build, listed on stderr, so the reference stays complete; a test runs it.
"""

from __future__ import annotations

import argparse
import pkgutil
import re
import sys
import warnings
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


def _unclaim() -> None:
    """Give the root's names back their implementing modules for this process.

    The package shows its public classes and functions as ``liftbridge_nats.X``
    (``__module__``, as httpx does), but their source and the names their annotations
    use live in the private modules: pdoc reads both through ``__module__``. Listed in
    the root's ``__all__``, they are documented on the root's page all the same.
    """
    for name in liftbridge_nats.__all__:
        getattr(liftbridge_nats, name)  # the lazy ones are claimed on first access
    for name, module in liftbridge_nats._IMPLEMENTED_IN.items():
        getattr(liftbridge_nats, name).__module__ = module


def main(argv: list[str] | None = None) -> int:
    """Render every public module and print where the index is; 1 on any warning."""
    parser = argparse.ArgumentParser(description="Build the API reference.")
    parser.add_argument("--output", type=Path, default=OUT, help=f"folder (default {OUT})")
    out = parser.parse_args(argv).output
    _unclaim()
    pdoc.render.configure(
        docformat="restructuredtext",
        footer_text=f"liftbridge-nats {liftbridge_nats.__version__}",
        search=True,
        show_source=True,
    )
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*public_modules(), output_directory=out)
    if caught:
        for warning in caught:
            print(f"warning: {warning.message}", file=sys.stderr)
        print(f"API reference: {len(caught)} warning(s); fix them", file=sys.stderr)
        return 1
    print(f"API reference: {out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
