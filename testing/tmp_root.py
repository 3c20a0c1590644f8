"""Where `make test` puts pytest's trees: a RAM disk (/dev/shm) when it has the room, else $TMPDIR or /tmp.

The suite writes real sglang trees (some 3,600 files each) by the hundred: a run creates
about 15 GB of files. On the 2-core machine's disk (ext4) creating and deleting them took
more kernel time than the tests themselves; on a tmpfs the same suite ran in 8 to 9 min
against 11 to 15 (README, "How long make test takes", names the runs). A RAM disk holds only what is
deleted as tests pass (pytest's `tmp_path_retention_policy=failed`, which the Makefile
passes along with this folder): about 7 GB at the peak. So a tmpfs is taken only with
room for that, and memory to spare beside it; otherwise the disk, where a passed test's
folder stays until the next run moves it aside.

Prints "ram" (put the trees under /dev/shm) or "disk" ($TMPDIR or /tmp).
Python 3.8+ and the standard library only: the Makefile runs it before the venv exists.
"""

from __future__ import annotations

import os

RAM_DISK = "/dev/shm"
PEAK_BYTES = 7 << 30  # /dev/shm in use at the peak of one main-suite run (2 Dec 2026: 6.7 GB, `df` every 20 s)
ROOM_BYTES = 10 << 30  # free on the tmpfs to take it
SPARE_BYTES = 6 << 30  # memory beside the peak: two pytest workers with sglang and torch imported, and git


def is_tmpfs(path: str, mounts_file: str = "/proc/self/mounts") -> bool:
    """Whether the last mount at `path` is a tmpfs."""
    try:
        with open(mounts_file) as mounts:
            kinds = [fields[2] for fields in map(str.split, mounts) if len(fields) > 2 and fields[1] == path]
    except OSError:
        return False
    return bool(kinds) and kinds[-1] == "tmpfs"


def memory_available(meminfo: str = "/proc/meminfo") -> int:
    try:
        with open(meminfo) as info:
            for line in info:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def choose(
    environ: dict[str, str], ram_disk: str = RAM_DISK, meminfo: str = "/proc/meminfo", mounts: str = "/proc/self/mounts"
) -> str:
    """Where the trees go: "ram" when `ram_disk` is a writable tmpfs with the room, and memory to spare beside
    it; else "disk". SGLPATCH_TEST_TMP=disk keeps them on the disk."""
    if environ.get("SGLPATCH_TEST_TMP") == "disk" or not is_tmpfs(ram_disk, mounts):
        return "disk"
    if not os.access(ram_disk, os.W_OK | os.X_OK):
        return "disk"
    info = os.statvfs(ram_disk)
    if info.f_bavail * info.f_frsize < ROOM_BYTES or memory_available(meminfo) < PEAK_BYTES + SPARE_BYTES:
        return "disk"
    return "ram"


if __name__ == "__main__":
    print(choose(dict(os.environ)))
