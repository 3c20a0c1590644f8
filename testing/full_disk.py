"""A real full disk for the fault grid: a small tmpfs, filled so that exactly N bytes stay free.

Mounting needs root with CAP_SYS_ADMIN (a CI container often lacks it): `mount_small_disk`
then returns the reason, and the tests that need it skip with that reason; the
injected variant (SGLPATCH_FAULT_SIGNAL=ENOSPC, a full disk at one write point) runs
everywhere. The filler file sits at the disk's root, beside the trees: removing it
is "freeing space".
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

PAGE = 4096  # tmpfs hands out space a page at a time
SIZE, LIMIT = "1g", 1 << 30  # the small disk, and the most fill() ever takes (never a real disk's space)
FILLER = "filler"


class SmallDisk:
    def __init__(self, root: Path):
        self.root = root

    def available(self) -> int:
        info = os.statvfs(self.root)
        return info.f_bavail * info.f_frsize

    def used(self) -> int:
        info = os.statvfs(self.root)
        return (info.f_blocks - info.f_bfree) * info.f_frsize

    def fill(self, leave: int) -> None:
        """Take all free space but `leave` bytes (rounded down to a page); only on the small disk itself."""
        if not os.path.ismount(self.root) or self.available() > LIMIT:
            raise RuntimeError(f"{self.root} is not the small disk mounted for the test: refusing to fill it")
        self.free()
        take = self.available() - (leave // PAGE) * PAGE
        if take > 0:
            with open(self.root / FILLER, "wb") as f:
                os.posix_fallocate(f.fileno(), 0, take)

    def free(self) -> None:
        (self.root / FILLER).unlink(missing_ok=True)

    def unmount(self) -> None:
        subprocess.run(["umount", "-l", str(self.root)], capture_output=True)


def mount_small_disk(root: Path) -> SmallDisk | str:
    """A tmpfs of SIZE at `root`, or why there cannot be one here."""
    if shutil.which("mount") is None:
        return "cannot mount a tmpfs for a real full disk: no mount command"
    root.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={SIZE}", "tmpfs", str(root)], capture_output=True)
    if done.returncode != 0:
        why = done.stderr.decode(errors="replace").strip() or f"exit {done.returncode}"
        return f"cannot mount a tmpfs for a real full disk (needs root with CAP_SYS_ADMIN): {why}"
    return SmallDisk(root)
