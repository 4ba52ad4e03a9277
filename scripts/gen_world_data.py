"""Write the world's shipped data files: ``generate_world(DEFAULT_SEED)`` as JSON.

Run after changing ``closedloop/world/_generate.py``; a test fails while the files and
the generator disagree. ``--check`` only compares and exits 1 on a difference.

    .venv/bin/python scripts/gen_world_data.py [--check]
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources

from closedloop_bench.world import DEFAULT_SEED, generate_world, world_to_files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare only; exit 1 if stale")
    args = parser.parse_args(argv)
    folder = resources.files("closedloop_bench.world").joinpath("data")
    files = world_to_files(generate_world(DEFAULT_SEED))
    stale = [
        name
        for name, text in files.items()
        if not folder.joinpath(name).is_file()
        or folder.joinpath(name).read_text(encoding="utf-8") != text
    ]
    if args.check:
        for name in stale:
            print(f"stale: {name}")
        return 1 if stale else 0
    for name, text in files.items():
        path = folder.joinpath(name)
        with resources.as_file(path) as real:
            real.parent.mkdir(parents=True, exist_ok=True)
            real.write_text(text, encoding="utf-8")
        print(f"wrote {name} ({len(text.encode()):,} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
