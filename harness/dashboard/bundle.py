"""plotly.js for the page: the smallest bundle that draws its figures, inline or in one shared file.

The ``plotly`` Python package ships only the full plotly.js (4.8 MB, every trace
type down to maps and 3-D).  The dashboard draws scatter and bar traces only, so
it uses plotly.js's own *basic* partial bundle (scatter, bar, pie: 1.2 MB),
vendored unchanged under ``vendor/`` (see its README).  :func:`bundle_for` falls
back to the full bundle whenever the basic one might not draw the page: a trace
type outside it, the vendored file missing (a wheel built without package
data), or a plotly.js major version other than the one the installed ``plotly``
writes figures for.

Either bundle goes into the page in one of two ways (:data:`BUNDLE_MODES`):

* ``inline`` (the default): one ``<script>`` in the page, which is then a single
  self-contained file that opens offline.
* ``shared``: one file beside the page (``plotly-basic-4.1.1.min.js``), named by
  its version so pages built by another plotly never pick up the wrong one, and
  referenced by a relative ``<script src>``: a folder of nightly pages holds the
  bundle once.  Still offline (no CDN); the page reports a missing file in its
  error box rather than showing empty plots silently.

Texts are read from disk once per process (:func:`functools.cache`), so the live
dashboard's rewrite every few seconds costs no re-read of megabytes.
"""

from __future__ import annotations

import functools
import html
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from poolfuzz.harness.dashboard.writing import write_atomically

VENDOR = Path(__file__).with_name("vendor")
BASIC_FILE = VENDOR / "plotly-basic.min.js"
BASIC_TRACES = frozenset({"scatter", "bar", "pie"})
"""The trace types of plotly.js's basic bundle (``lib/index-basic.js`` of plotly.js)."""
BUNDLE_MODES = ("inline", "shared")


@dataclass(frozen=True)
class Bundle:
    """One plotly.js build: ``basic`` or ``full``, its version, and its text."""

    kind: str
    version: str
    text: str

    @property
    def file_name(self) -> str:
        """The shared file's name: the kind and version, so two builds never share a name."""
        prefix = "plotly-basic" if self.kind == "basic" else "plotly"
        return f"{prefix}-{self.version}.min.js"


def _major(version: str) -> str:
    return version.split(".", 1)[0]


@functools.cache
def full_bundle() -> Bundle:
    """The installed ``plotly`` package's full plotly.js (imports plotly: call only when plotly is needed)."""
    from plotly.offline import get_plotlyjs

    return Bundle("full", full_bundle_version(), str(get_plotlyjs()))


@functools.cache
def basic_bundle() -> Bundle | None:
    """The vendored basic bundle, or ``None`` when it is missing or cannot draw this plotly's figures."""
    try:
        text = BASIC_FILE.read_text(encoding="utf-8")
    except OSError:
        return None
    found = re.search(r"plotly\.js \(basic - minified\) v(\d+\.\d+\.\d+)", text[:400])
    if found is None or _major(found.group(1)) != _major(full_bundle_version()):
        return None
    return Bundle("basic", found.group(1), text)


@functools.cache
def full_bundle_version() -> str:
    """The version of the installed ``plotly``'s plotly.js: the one its figures are written for."""
    from plotly.offline import get_plotlyjs_version

    return str(get_plotlyjs_version())


def bundle_for(trace_types: Iterable[str]) -> Bundle:
    """The smallest bundle that draws every trace type in ``trace_types``."""
    basic = basic_bundle()
    if basic is not None and set(trace_types) <= BASIC_TRACES:
        return basic
    return full_bundle()


#: What a page calls when the shared bundle's file did not load (``onerror`` of its ``<script>``).
MISSING_SHARED = (
    "window.poolfuzzRecordError && window.poolfuzzRecordError("
    "'plotly.js did not load: {name} is not beside this page (copy it along with the page)')"
)


def script_tag(bundle: Bundle, mode: str) -> str:
    """The page's ``<script>`` for ``bundle``: the text inline, or a relative reference to the shared file."""
    if mode == "inline":
        return f"<script>{bundle.text}</script>"
    if mode == "shared":
        name = html.escape(bundle.file_name, quote=True)
        return f'<script src="{name}" onerror="{html.escape(MISSING_SHARED.format(name=name), quote=True)}"></script>'
    raise ValueError(f"unknown bundle mode {mode!r} (one of {', '.join(BUNDLE_MODES)})")


def write_shared(bundle: Bundle, folder: Path) -> Path:
    """Put ``bundle`` beside the pages in ``folder`` unless the same bytes are there already; returns its path.

    A file of that name with other bytes (a torn copy) is replaced, atomically,
    so a page being opened meanwhile reads the old file or the new one.
    """
    path = folder / bundle.file_name
    encoded = bundle.text.encode("utf-8")
    try:
        if path.read_bytes() == encoded:
            return path
    except OSError:
        pass
    write_atomically(path, encoded)
    return path
