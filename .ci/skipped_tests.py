"""The node ids of the tests a pytest run skipped, read from its JUnit XML (``-o junit_family=xunit1``).

``.ci/run`` runs the README's test command as written, with only ``PYTEST_ADDOPTS`` asking pytest for
this report; after installing the optional extras into the same virtual environment it runs again
exactly the tests that were skipped — found from the run itself, not from a hand list of files that
would miss the next test guarded by an optional import. Standard library only.

Usage: ``python3 .ci/skipped_tests.py REPORT.xml`` prints the ids NUL-separated (a parametrized id may
hold spaces), ``--reasons`` prints ``id: reason`` lines instead.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def skipped(report: str) -> list[tuple[str, str]]:
    """``(node id, reason)`` of every skipped test and every module skipped at collection, in order."""
    found: list[tuple[str, str]] = []
    for case in ET.fromstring(report).iter("testcase"):
        skip = case.find("skipped")
        if skip is None:
            continue
        path, classname, name = case.get("file", ""), case.get("classname", ""), case.get("name", "")
        if not path:
            raise ValueError(f"testcase {name!r} has no file attribute: run pytest with -o junit_family=xunit1")
        if not classname:  # the whole module was skipped while collecting it
            found.append((path, skip.text or skip.get("message", "")))
            continue
        module = path.removesuffix(".py").replace("/", ".")
        classes = classname[len(module) + 1 :].split(".") if classname != module else []
        found.append(("::".join([path, *classes, name]), skip.get("message", "")))
    return found


def main(argv: list[str]) -> int:
    reasons = "--reasons" in argv
    paths = [a for a in argv if a != "--reasons"]
    if len(paths) != 1:
        print("usage: skipped_tests.py [--reasons] REPORT.xml", file=sys.stderr)
        return 2
    found = skipped(Path(paths[0]).read_text(encoding="utf-8"))
    if reasons:
        sys.stdout.write("".join(f"{node}: {reason}\n" for node, reason in found))
    else:
        sys.stdout.write("".join(f"{node}\0" for node, _ in found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
