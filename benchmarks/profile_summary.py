"""Summarize a py-spy profile in its raw (collapsed stacks) format: where a
process spent its samples, by package and by the function on top of the
stack. Used by ``bench_stack.py --profile`` to show what bounds a figure.

    .venv/bin/python benchmarks/profile_summary.py PROFILE.txt [--top 15]

A line of the input is ``frame;frame;...;frame COUNT`` (outermost first),
each frame ``function (file:line)``; py-spy writes it with ``--format raw``.
Idle threads (waiting on a lock, a sleep, a socket, select) are counted
apart: the busy share is what the process spent computing or in a call that
holds the GIL.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
from pathlib import Path

# A sample whose top frame is one of these waits rather than works.
# py-spy names a method with its class ("Condition.wait (threading.py:331)")
# and counts a thread blocked in one as running: the blocking methods of the
# threading and queue classes are idle too (not any class's ``get``: a
# cache's ``LRUCache.get`` works).
IDLE = re.compile(r"^((wait|_wait_for_tstate_lock|sleep|select|poll|epoll|accept|recv|"
                  r"recv_into|read|readinto|acquire|get|_worker|serve_forever|join)\b|"
                  r"(Condition|Event|Semaphore|BoundedSemaphore|Barrier)\.wait\b|"
                  r"(Queue|SimpleQueue|LifoQueue|PriorityQueue)\.get\b|Thread\.join\b)")
# The buckets a busy sample is counted in: the first that appears anywhere in
# its stack, innermost first (the database layer before the code calling it).
PACKAGES = (
    ("database driver (sqlite3, psycopg2, pymysql)", ("sqlite3", "psycopg2", "pymysql")),
    ("sqlalchemy", ("sqlalchemy",)),
    ("logging", ("oslo_log", "logging/")),
    ("tooz and redis", ("tooz", "redis")),
    ("dummy driver", ("sharemgr/drivers/",)),
    ("convergence engine", ("sharemgr/convergence/",)),
    ("request runner and operations", ("sharemgr/manager/",)),
    ("sharemgr, other", ("sharemgr/",)),
)


def parse(path: Path) -> list[tuple[list[str], int]]:
    samples = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if stack and count.isdigit():
            samples.append((stack.split(";"), int(count)))
    return samples


def bucket(frames: list[str]) -> str:
    for frame in reversed(frames):
        for name, needles in PACKAGES:
            if any(n in frame for n in needles):
                return name
    return "other (interpreter, stdlib)"


def summarize(path: Path, top: int = 15) -> dict:
    samples = parse(path)
    total = sum(c for _, c in samples)
    idle = sum(c for frames, c in samples if IDLE.match(frames[-1]))
    busy = total - idle
    by_bucket: collections.Counter = collections.Counter()
    by_top: collections.Counter = collections.Counter()
    for frames, count in samples:
        if IDLE.match(frames[-1]):
            continue
        by_bucket[bucket(frames)] += count
        by_top[frames[-1]] += count

    def share(n: int) -> float:
        return round(100 * n / busy, 1) if busy else 0.0

    return {"profile": str(path), "samples": total, "idle_samples": idle,
            "busy_samples": busy,
            "busy_percent_by_package": {k: share(v) for k, v in by_bucket.most_common()},
            "busy_percent_by_top_function": {k: share(v) for k, v in by_top.most_common(top)}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profile", type=Path)
    p.add_argument("--top", type=int, default=15)
    args = p.parse_args()
    print(json.dumps(summarize(args.profile, args.top), indent=1))


if __name__ == "__main__":
    main()
