"""Make the monorepo's packages importable without pip or hatchling (a lent GPU machine has neither network nor
hatchling): write a `.dist-info` folder per package into SITE, holding its name, version and entry points (the
`ember.devices` registry and `ember-llama` are found through them), and print the PYTHONPATH that puts SITE and
every packages/*/src on the path.

Run: export PYTHONPATH=$(python3 tools/gpu/install_site.py /tmp/ember-site)
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def write_dist_info(package: Path, site: Path) -> Path:
    """The `.dist-info` of one package folder (packages/<p>) in `site`; returns the package's src folder."""
    project = tomllib.loads((package / "pyproject.toml").read_text())
    meta = project["project"]
    version_file = package / project["tool"]["hatch"]["version"]["path"]
    match = re.search(r"""^__version__\s*=\s*["']([^"']+)["']""", version_file.read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"install_site: no __version__ in {version_file}")
    name, version = meta["name"], match.group(1)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                                   + "".join(f"Requires-Dist: {d}\n" for d in meta.get("dependencies", [])))
    groups = dict(meta.get("entry-points", {}))
    if scripts := meta.get("scripts"):
        groups["console_scripts"] = scripts
    (info / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) + "\n" for group, eps in groups.items()))
    (info / "INSTALLER").write_text("tools/gpu/install_site.py\n")
    return package / "src"


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit("usage: install_site.py SITE_DIR")
    site = Path(sys.argv[1]).resolve()
    srcs = [write_dist_info(p, site) for p in sorted((REPO / "packages").iterdir()) if (p / "pyproject.toml").is_file()]
    print(":".join([str(site), *map(str, srcs)]))


if __name__ == "__main__":
    main()
