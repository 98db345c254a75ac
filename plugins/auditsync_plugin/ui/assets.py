"""The browser assets Great Expectations' Data Docs load from public CDNs, served by the plugin.

GX 1.24.1's page templates (``great_expectations/render/view/templates/*.j2``) link bootstrap,
jQuery, popper, bootstrap-table, bootstrap-datepicker, a dark theme, vega and font-awesome from
CDNs, and the navbar logo from an S3 bucket; on an air-gapped site the pages render unstyled
with a broken logo. Every one of those files is in an npm package: :data:`PACKAGES` names the
exact versions (the version a CDN URL pins; for vega's ``@5``-style ranges, the newest release
of that major when this was written), :data:`CDN` maps each URL to the file the plugin serves,
and :func:`rewrite` swaps them in a page as it is served. The logo comes from the GX package
itself (its ``static/images``), served under ``gx/``.

Run as a script (``python plugins/auditsync_plugin/ui/assets.py [DIR]``) it fetches whatever is
missing with ``npm pack`` into DIR (default: ``static/vendor`` beside this file, git-ignored).
This module imports nothing of the plugin, so the Makefile runs it without Airflow.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path

DEFAULT_DIR = Path(__file__).resolve().parent / "static" / "vendor"
GX_IMAGES_PREFIX = "gx/"  # served from the GX package's own static/images
GX_ASSETS_HOST = "https://great-expectations-web-assets.s3.us-east-2.amazonaws.com/"

# package@version -> what to keep of its tarball (files, or folders ending in "/").
PACKAGES: Mapping[str, tuple[str, ...]] = {
    "bootstrap@4.3.1": ("dist/css/bootstrap.min.css", "dist/js/bootstrap.min.js"),
    "bootstrap-table@1.19.1": (
        "dist/bootstrap-table.min.css",
        "dist/bootstrap-table.min.js",
        "dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
    ),
    "bootstrap-table@1.19.0": (
        "dist/extensions/filter-control/bootstrap-table-filter-control.css",
        "dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
    ),
    "bootstrap-datepicker@1.9.0": (
        "dist/css/bootstrap-datepicker.min.css",
        "dist/js/bootstrap-datepicker.min.js",
    ),
    "@forevolve/bootstrap-dark@1.1.0": ("dist/css/bootstrap-prefers-dark.css",),
    "jquery@3.7.1": ("dist/jquery.min.js",),
    "popper.js@1.12.9": ("dist/umd/popper.min.js",),
    "@fortawesome/fontawesome-free@6.6.0": ("css/all.min.css", "webfonts/"),
    "vega@5.33.1": ("build/vega.min.js",),
    "vega-lite@5.23.0": ("build/vega-lite.min.js",),
    "vega-embed@6.29.0": ("build/vega-embed.min.js",),
}

# Every CDN URL GX 1.24.1's templates load -> package@version/path under the vendor folder.
CDN: Mapping[str, str] = {
    "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css": (
        "bootstrap@4.3.1/dist/css/bootstrap.min.css"
    ),
    "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js": (
        "bootstrap@4.3.1/dist/js/bootstrap.min.js"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.css": (
        "bootstrap-table@1.19.1/dist/bootstrap-table.min.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/bootstrap-table.min.js": (
        "bootstrap-table@1.19.1/dist/bootstrap-table.min.js"
    ),
    "https://unpkg.com/bootstrap-table@1.19.1/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.min.js": (
        "bootstrap-table@1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js"
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.css": (
        "bootstrap-table@1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css"
    ),
    "https://unpkg.com/bootstrap-table@1.19.0/dist/extensions/filter-control/"
    "bootstrap-table-filter-control.min.css": (
        "bootstrap-table@1.19.0/dist/extensions/filter-control/"
        "bootstrap-table-filter-control.min.css"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/"
    "bootstrap-datepicker.min.css": (
        "bootstrap-datepicker@1.9.0/dist/css/bootstrap-datepicker.min.css"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/"
    "bootstrap-datepicker.min.js": (
        "bootstrap-datepicker@1.9.0/dist/js/bootstrap-datepicker.min.js"
    ),
    "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/"
    "bootstrap-prefers-dark.css": (
        "@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css"
    ),
    "https://code.jquery.com/jquery-3.7.1.min.js": "jquery@3.7.1/dist/jquery.min.js",
    "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js": (
        "popper.js@1.12.9/dist/umd/popper.min.js"
    ),
    "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css": (
        "@fortawesome/fontawesome-free@6.6.0/css/all.min.css"
    ),
    "https://cdn.jsdelivr.net/npm/vega@5": "vega@5.33.1/build/vega.min.js",
    "https://cdn.jsdelivr.net/npm/vega-lite@5": "vega-lite@5.23.0/build/vega-lite.min.js",
    "https://cdn.jsdelivr.net/npm/vega-embed@6": "vega-embed@6.29.0/build/vega-embed.min.js",
}

# src="…" / href="…" whose value is an absolute http(s) URL.
_ATTR = re.compile(r'\b(src|href)="(https?://[^"]+)"')


def local_url(url: str, base: str) -> str | None:
    """Where the plugin serves what ``url`` loads (``base`` + vendor path), or None."""
    if url in CDN:
        return base + CDN[url]
    if url.startswith(GX_ASSETS_HOST):
        name = url[len(GX_ASSETS_HOST) :].split("?", 1)[0]
        return base + GX_IMAGES_PREFIX + name
    return None


def rewrite(page: str, base: str) -> str:
    """``page`` with every CDN asset URL of :data:`CDN` (and the GX logo) pointing under
    ``base``; other absolute links (plain ``<a href>`` to greatexpectations.io) are kept."""

    def swap(match: re.Match[str]) -> str:
        local = local_url(match.group(2), base)
        return match.group(0) if local is None else f'{match.group(1)}="{local}"'

    return _ATTR.sub(swap, page)


def missing(vendor: Path) -> list[str]:
    """The packages of :data:`PACKAGES` not (completely) unpacked under ``vendor``."""
    return [
        spec
        for spec, keep in PACKAGES.items()
        if not all((vendor / spec / path).exists() for path in keep)
    ]


def _unpack(tarball: Path, dest: Path, keep: tuple[str, ...]) -> None:
    """Copy the kept files of an npm tarball (rooted at ``package/``) to ``dest``."""
    with tarfile.open(tarball) as tar:
        for member in tar.getmembers():
            rel = member.name.split("/", 1)[-1]
            wanted = any(rel == k or (k.endswith("/") and rel.startswith(k)) for k in keep)
            if not member.isfile() or not wanted:
                continue
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            source = tar.extractfile(member)
            assert source is not None
            with source, open(target, "wb") as out:
                shutil.copyfileobj(source, out)


def fetch(vendor: Path = DEFAULT_DIR, npm: str = "npm") -> list[str]:
    """``npm pack`` every missing package into ``vendor``; returns what it fetched."""
    todo = missing(vendor)
    if todo and shutil.which(npm) is None:
        raise RuntimeError(f"npm is needed to fetch the Data Docs assets ({', '.join(todo)})")
    for spec in todo:
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run(
                [npm, "pack", spec, "--pack-destination", tmp, "--silent"],
                capture_output=True,
                text=True,
                timeout=300,
                cwd=tmp,
            )
            if out.returncode != 0:
                raise RuntimeError(f"npm pack {spec} failed: {out.stderr.strip()[-500:]}")
            (tarball,) = Path(tmp).glob("*.tgz")
            staging = Path(tmp) / "unpacked"
            _unpack(tarball, staging, PACKAGES[spec])
            target = vendor / spec
            if target.exists():
                shutil.rmtree(target)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.move(str(staging), target)
    return todo


def main(argv: list[str]) -> int:
    vendor = Path(argv[0]) if argv else DEFAULT_DIR
    fetched = fetch(vendor)
    if fetched:
        print(f"==> Data Docs assets fetched into {vendor}: {', '.join(fetched)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
