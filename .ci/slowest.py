#!/usr/bin/env python3
"""Reads nextest's JUnit report: `slowest.py JUNIT N` prints the N slowest tests with
their seconds; with `--count`, a last line `tests: P passed, F failed`."""
import sys
import xml.etree.ElementTree as ET


def main():
    path, n = sys.argv[1], int(sys.argv[2])
    cases = []
    for case in ET.parse(path).getroot().iter("testcase"):
        failed = any(c.tag in ("failure", "error") for c in case)
        name = "%s %s" % (case.get("classname", ""), case.get("name", ""))
        cases.append((float(case.get("time", "0")), name, failed))
    for secs, name, failed in sorted(cases, reverse=True)[:n]:
        print("   %7.1f  %s%s" % (secs, name, "  (FAILED)" if failed else ""))
    if "--count" in sys.argv:
        failed = sum(1 for c in cases if c[2])
        print("tests: %d passed, %d failed" % (len(cases) - failed, failed))


if __name__ == "__main__":
    main()
