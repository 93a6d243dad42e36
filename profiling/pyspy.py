"""py-spy plumbing: find it, check it may read other processes, record, dump.

Recorders run with ``--nonblocking``: py-spy then reads the target's memory without stopping it, so the
three recorders of one load phase (on-CPU, ``--idle``, ``--gil``) sample the same run side by side.
Blocking recorders would take turns stopping the process and lose samples to each other. The price is
an occasional torn stack, which py-spy counts as an error. ``--function`` names frames by the
function's first line, so a function is one frame, not one per line. Recorders write raw (collapsed)
stacks; profiling.flamegraph draws them.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from profiling.children import Children

__all__ = [
    "KINDS",
    "MIN_SAMPLES",
    "PtraceDenied",
    "Recorder",
    "check_ptrace",
    "dump",
    "find_py_spy",
    "ptrace_advice",
]

Kind = Literal["cpu", "idle", "gil"]

KINDS: dict[Kind, list[str]] = {
    "cpu": [],  # on-CPU samples only: py-spy drops threads that are idle
    "idle": ["--idle"],  # every sample, idle ones too: where the loop and threads sit waiting
    "gil": ["--gil"],  # only samples of the thread holding the GIL
}
# py-spy's default is 100 Hz: at a few hundred requests a second that leaves a few hundred samples in
# Python code a minute; 500 Hz reaches MIN_SAMPLES in a phase of half a minute.
SAMPLE_RATE = 500
# Per profile, before a report compares anything by its samples: a count n is uncertain by about sqrt(n),
# so two counts of 1,000 each tell a 10 % difference apart at about two standard deviations.
MIN_SAMPLES = 1_000

_DENIED = re.compile(r"permission denied|operation not permitted|os error 1\b|os error 13\b", re.I)
_SUMMARY = re.compile(r"Samples: (\d+) Errors: (\d+)")


class PtraceDenied(RuntimeError):
    """py-spy may not read other processes here."""


def find_py_spy() -> str | None:
    """The py-spy next to this interpreter (the virtualenv's), else the one on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def ptrace_advice() -> str:
    """What to do when py-spy may not attach, tailored to the Yama setting when there is one."""
    lines = [
        "py-spy needs ptrace rights over the node processes. Any one of:",
        "  - run as root (sudo env PATH=$PATH ...);",
        "  - in a container: docker run --cap-add SYS_PTRACE ... (Kubernetes: capabilities add SYS_PTRACE);",
        "  - allow same-user ptrace: echo 0 | sudo tee /proc/sys/kernel/yama/ptrace_scope",
    ]
    try:
        scope = Path("/proc/sys/kernel/yama/ptrace_scope").read_text().strip()
    except OSError:
        scope = ""
    if scope:
        lines.append(f"(kernel.yama.ptrace_scope is {scope} here; 3 forbids ptrace until reboot)")
    return "\n".join(lines)


def check_ptrace(py_spy: str, children: Children, timeout: float = 10.0) -> None:
    """Dump a throwaway Python child; raise PtraceDenied with py-spy's words if that fails.

    A real attempt is the only reliable test: root without CAP_SYS_PTRACE, Yama, seccomp and
    gVisor-style sandboxes each deny in their own way.
    """
    child = children.start(
        [sys.executable, "-c", "import time; time.sleep(60)"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            result = subprocess.run(
                [py_spy, "dump", "--pid", str(child.pid)],
                capture_output=True,
                text=True,
                timeout=timeout,
                check=False,
            )
            if result.returncode == 0:
                return
            said = (result.stderr + result.stdout).strip()
            # Right after exec the interpreter may not be found yet: retry that, never a denial.
            if _DENIED.search(said) or time.monotonic() > deadline:
                first = said.splitlines()[0] if said else f"exit status {result.returncode}"
                raise PtraceDenied(f"py-spy cannot read a Python process: {first}")
            time.sleep(0.2)
    finally:
        children.stop(child, signal.SIGKILL)


@dataclass
class Recorder:
    """One ``py-spy record`` of one process into raw stacks; stop() ends it with SIGINT, so py-spy writes
    its file."""

    kind: Kind
    output: Path
    rate: int = SAMPLE_RATE
    process: subprocess.Popen[bytes] | None = None
    samples: int | None = None
    errors: int | None = None

    def start(self, py_spy: str, pid: int, children: Children) -> None:
        self.output.parent.mkdir(parents=True, exist_ok=True)
        argv = [
            py_spy, "record", "--pid", str(pid), "--rate", str(self.rate),
            "--format", "raw", "--output", str(self.output),
            "--function", "--nonblocking", *KINDS[self.kind],
        ]  # fmt: skip
        self.process = children.start(argv, log=self.log_path)

    @property
    def log_path(self) -> Path:
        return self.output.with_name(self.output.name + ".log")

    def stop(self, children: Children) -> None:
        if self.process is None:
            return
        children.stop(self.process, signal.SIGINT, timeout=30.0)
        self.process = None  # stopped once: a second stop() is a no-op
        said = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
        counts = _SUMMARY.findall(said)
        if counts:
            self.samples, self.errors = (int(n) for n in counts[-1])
        if not self.output.exists():
            tail = " | ".join(said.strip().splitlines()[-3:])
            print(f"profiling: py-spy wrote no {self.output.name}: {tail}", file=sys.stderr)


def dump(py_spy: str, pid: int, output: Path) -> bool:
    """``py-spy dump`` of one process into ``output``; False (and the error in the file) on failure."""
    output.parent.mkdir(parents=True, exist_ok=True)
    try:
        result = subprocess.run(
            [py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30.0, check=False
        )
    except subprocess.TimeoutExpired:
        output.write_text("py-spy dump timed out after 30 s\n")
        return False
    output.write_text(result.stdout + (f"\n[py-spy stderr]\n{result.stderr}" if result.returncode else ""))
    return result.returncode == 0
