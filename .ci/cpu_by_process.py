#!/usr/bin/env python3
"""CPU seconds by process while a command runs, for finding where a test run's CPU goes.

usage: cpu_by_process.py OUT -- COMMAND...

Every second, reads each process's user+system ticks from /proc/<pid>/stat and labels
it (a Python service by its script or gunicorn app, a Go or Rust binary by its name).
When COMMAND exits, writes to OUT the wall seconds, the machine's busy CPU seconds
(/proc/stat) and the CPU seconds per label, largest first. Processes that live less
than a second are missed: the gap between "machine busy" and "sampled" is theirs.
"""
import collections
import os
import subprocess
import sys
import threading
import time


def label(pid, comm):
    if comm.startswith("gunicorn"):
        return comm
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return comm
    if not argv:
        return comm
    base = os.path.basename(argv[0])
    if base.startswith("python"):
        script = next((a for a in argv[1:] if not a.startswith("-")), base)
        return "python " + os.path.basename(script)
    if "/target/" in argv[0]:
        return base.split("-")[0] + (" " + argv[1] if len(argv) > 1 and not argv[1].startswith("-") else "")
    return base


def busy_ticks():
    with open("/proc/stat") as f:
        v = f.readline().split()
    return sum(int(x) for x in v[1:4]) + sum(int(x) for x in v[6:9])


def sample(seen, first, labels, t0):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                s = f.read()
        except OSError:
            continue
        r = s.rfind(")")
        comm = s[s.find("(") + 1:r]
        fields = s[r + 2:].split()
        key = (pid, fields[19])  # pid and start time: a reused pid is another process
        ticks = int(fields[11]) + int(fields[12])
        if key not in labels:
            labels[key] = label(pid, comm)
            if time.time() - t0 < 1.5:
                first[key] = ticks
        seen[key] = ticks


def main():
    if len(sys.argv) < 4 or sys.argv[2] != "--":
        sys.exit(__doc__)
    out, cmd = sys.argv[1], sys.argv[3:]
    seen, first, labels = {}, {}, {}
    t0, b0 = time.time(), busy_ticks()
    sample(seen, first, labels, t0)
    proc = subprocess.Popen(cmd)
    done = threading.Event()
    threading.Thread(target=lambda: (proc.wait(), done.set()), daemon=True).start()
    while not done.wait(1.0):
        sample(seen, first, labels, t0)
    sample(seen, first, labels, t0)
    hz = os.sysconf("SC_CLK_TCK")
    by = collections.Counter()
    for key, ticks in seen.items():
        by[labels[key]] += ticks - first.get(key, 0)
    with open(out, "w") as o:
        o.write(f"wall {time.time() - t0:.0f} s, machine busy {(busy_ticks() - b0) / hz:.0f} cpu-s, "
                f"sampled {sum(by.values()) / hz:.0f} cpu-s, exit {proc.returncode}\n")
        for name, ticks in by.most_common(40):
            o.write(f"{ticks / hz:8.0f}  {name}\n")
    sys.exit(proc.returncode)


if __name__ == "__main__":
    main()
