"""One engine's process: bench/engine_worker.py in a session of its own (so its sglang children go with
it), its start, the commands it answers, the cores it runs on, and its end."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1]
PROBE_PATH = BENCH / "engine_probe"
WORKER_SCRIPT = BENCH / "engine_worker.py"
# what makes every process of a stalled engine write its threads' stacks to its log, and the time given to it
STACKS_SIGNAL = signal.SIGUSR2
STACKS_WAIT_S = 2.0

# personality(2)'s flag for ASLR off (what `setarch -R` sets); kept across exec, so an engine's children have it
ADDR_NO_RANDOMIZE = 0x0040000
# loaded here, not in the child: a child forked from a process with threads must not call dlopen
_LIBC = ctypes.CDLL(None, use_errno=True)

_EXCEPTION_LINE = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception)(?::\s.*)?$")


def first_error(log: str) -> str | None:
    """The exception line that ends the first traceback in an engine log ("torch.AcceleratorError:
    CUDA error: ..."), or None."""
    in_traceback = False
    for line in log.splitlines():
        text = line.strip()
        if "Traceback (most recent call last)" in text:
            in_traceback = True
        elif in_traceback and _EXCEPTION_LINE.match(text):
            return text
    return None


def no_aslr() -> None:
    """ASLR off for this process and what it execs from now on; where the kernel or a seccomp filter
    refuses, it stays on (the process's /proc/PID/personality tells which)."""
    current = _LIBC.personality(0xFFFFFFFF)
    if current != -1:
        _LIBC.personality(current | ADDR_NO_RANDOMIZE)


def aslr_state(personality: int) -> str:
    """ "off" where a process with this personality has fixed addresses (its flag, or the kernel's setting
    for every process), else "on"."""
    try:
        system_off = Path("/proc/sys/kernel/randomize_va_space").read_text().strip() == "0"
    except OSError:
        system_off = False
    return "off" if personality & ADDR_NO_RANDOMIZE or system_off else "on"


def layout_of(pid: int, env: dict) -> dict:
    """The hash seed a process was given and whether its addresses are randomized (None: unreadable)."""
    try:
        aslr = aslr_state(int(Path(f"/proc/{pid}/personality").read_text(), 16))
    except (OSError, ValueError):
        aslr = None
    return {"hash_seed": env.get("PYTHONHASHSEED", "random"), "aslr": aslr}


def prepare_child(cpus: list[int] | None, fixed_layout: bool) -> None:
    """In the child before exec: its cores, and with `fixed_layout` ASLR off."""
    if cpus:
        os.sched_setaffinity(0, cpus)
    if fixed_layout:
        no_aslr()


class EngineProcess:
    """A bench/engine_worker.py process (in a session of its own, so its sglang children go with it)."""

    def __init__(
        self,
        label: str,
        tree: Path,
        spec: dict,
        workdir: Path,
        extra_path: list[str],
        env: dict,
        script: Path,
        cpus: list[int] | None = None,
        fixed_layout: bool = False,
    ):
        self.label = label
        self.cpus = cpus
        self.probe_dir = workdir / f"probe-{label}"
        self.probe_dir.mkdir(parents=True, exist_ok=True)
        spec = {**spec, "probe_dir": str(self.probe_dir)}
        spec_file = workdir / f"spec-{label}.json"
        spec_file.write_text(json.dumps(spec, indent=1))
        read_fd, write_fd = os.pipe()
        child_env = {
            **os.environ,
            **env,
            "PYTHONPATH": os.pathsep.join([str(PROBE_PATH), str(tree), *extra_path]),
            "SGLPATCH_ENGINE_PROBE_DIR": str(self.probe_dir),
        }
        self.log_path = workdir / f"engine-{label}.log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, str(script), "--spec", str(spec_file), "--reply-fd", str(write_fd)],
            stdin=subprocess.PIPE,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            env=child_env,
            pass_fds=(write_fd,),
            start_new_session=True,
            text=True,
            # the engine and every process it starts run on their own cores only (and share one address layout)
            preexec_fn=(lambda: prepare_child(cpus, fixed_layout)) if cpus or fixed_layout else None,
        )
        self.layout = layout_of(self.proc.pid, child_env)
        os.close(write_fd)
        self.replies = os.fdopen(read_fd, "r")
        self.pinned = cpus
        self.started = None
        self.unresponsive = False  # a command went unanswered: stop() asks for stacks, not for a shutdown

    def pin(self, cpus: list[int]) -> None:
        """Every thread of the engine's processes onto ``cpus`` from now on."""
        for pid in process_tree(self.proc.pid):
            for task in Path(f"/proc/{pid}/task").glob("*"):
                with contextlib.suppress(OSError, ValueError):
                    os.sched_setaffinity(int(task.name), cpus)
        self.pinned = cpus

    def read_reply(self, timeout_s: float) -> dict:
        ready, _, _ = select.select([self.replies], [], [], timeout_s)
        if not ready:
            self.unresponsive = True
            raise TimeoutError(
                f"{self.label}: no answer within {timeout_s:.0f} s; its threads' stacks go to its log as it is "
                f"stopped (log: {self.log_path.name})"
            )
        line = self.replies.readline()
        if not line:
            raise RuntimeError(f"{self.label}: the engine process ended (exit {self.proc.poll()}); {self.failure()}")
        return json.loads(line)

    def wait_ready(self, timeout_s: float) -> dict:
        self.started = self.read_reply(timeout_s)
        if not self.started.get("ready"):
            raise RuntimeError(f"{self.label}: {self.started.get('error')}\n{self.tail()}")
        return self.started

    def call(self, command: dict, timeout_s: float = 300) -> dict:
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        answer = self.read_reply(timeout_s)
        if "error" in answer:
            raise RuntimeError(f"{self.label}: {answer['error']}")
        return answer

    def tail(self, lines: int = 25) -> str:
        self.log.flush()
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])

    def failure(self) -> str:
        """The exception the engine's log names, else its last lines (a dying process's thread dump
        buries the error under the stacks of idle threads)."""
        self.log.flush()
        error = first_error(self.log_path.read_text(errors="replace"))
        if error:
            return f"{error} (log: {self.log_path.name})"
        return f"last log lines:\n{self.tail()}"

    def stop(self) -> None:
        """sglang's own shutdown first (an engine that left a command unanswered is asked for every
        thread's stack instead: bench/engine_probe/sitecustomize.py); then whatever is left of the process
        group goes, so the GPU's memory is free before the next pair starts."""
        if self.proc.poll() is None and not self.unresponsive:
            try:
                self.call({"op": "shutdown"}, timeout_s=60)
                self.proc.wait(timeout=30)
            except Exception:
                pass
        if self.unresponsive and _group_alive(self.proc.pid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, STACKS_SIGNAL)
                time.sleep(STACKS_WAIT_S)  # the dumps are written while the processes still run
        for sig, wait_s in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 2.0)):
            if not _group_alive(self.proc.pid):
                break
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.time() + wait_s
            while time.time() < deadline and (self.proc.poll() is None or _group_alive(self.proc.pid)):
                time.sleep(0.2)
        self.proc.wait(timeout=30)
        self.log.close()


def _group_alive(pgid: int) -> bool:
    """Whether a process of the group still runs (zombies waiting for their parent do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def process_tree(root: int, proc: Path = Path("/proc")) -> list[int]:
    """``root`` and every process below it (from each process's parent in /proc/PID/stat)."""
    children: dict[int, list[int]] = {}
    for stat in proc.glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            parent = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            children.setdefault(parent, []).append(int(stat.parent.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo += children.get(pid, [])
    return tree
