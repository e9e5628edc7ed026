"""The log of a run of stages that never stops at a failure (``streamtrace.epilogue``): lines on
stderr, failures and notes kept for the run's state file, relayed from a stage's child process."""
from __future__ import annotations

import sys

from .console import printable


class StageLog:
    """The log of a run of stages (the epilogue's, ``streamtrace.open``'s): lines on ``out`` (stderr),
    failures and notes kept for its state file (``epilogue.json``).
    In a stage's child process (``call_in_child``) every entry is
    relayed to the parent's log (``relay_to``, ``replay``) instead."""

    def __init__(self, out=None, progress=None, verbose=False, name="epilogue"):
        self.name = name
        self.out = out or sys.stderr
        self.progress = progress          # False: failures, warnings and final lines only
        self.verbose = verbose
        self.failures: list = []
        self.notes: list = []
        self.send = None

    def relay_to(self, send):
        """In a stage's child process: pass every entry to ``send`` (to the parent's ``replay``)."""
        self.send = send

    def replay(self, entry):
        """An entry a stage's child process relayed: ``(method name, argument)``."""
        method, arg = entry
        {"final": self.final, "note": self.note, "failure": self.failure}[method](arg)

    def info(self, msg):
        """A progress line: logged unless ``progress`` is False."""
        if self.progress is not False:
            self.final(msg)

    def final(self, msg):
        if self.send is not None:
            self.send(("final", msg))
            return
        print(f"[streamtrace {self.name}] {printable(msg)}", file=self.out, flush=True)

    def note(self, msg):
        """Something missing that is not a failure (e.g. no GPU in a CPU-only run): logged, and kept in
        ``epilogue.json`` → ``notes``."""
        if self.send is not None:
            self.send(("note", msg))
            return
        self.notes.append(msg)
        self.info(f"note: {msg}")

    def fail(self, stage, what, err):
        line = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        self.failure({"stage": stage, "file": str(what), "error": line})

    def failure(self, entry: dict):
        """Keep and log one failure ``{"stage", "file", "error"}``."""
        if self.send is not None:
            self.send(("failure", entry))
            return
        self.failures.append(entry)
        self.final(f"FAILED {entry['stage']} ({entry['file']}): {entry['error']}")
