"""The one exception type for mistakes a user can fix, and how a command reports it."""

import os
import sys
from collections.abc import Callable


class UserError(Exception):
    """A problem with the user's input or machine, reported as one line with no traceback.

    The message names the problem and the fix; command-line entry points and the pytest
    plugin print it alone and exit with status 2.
    """


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message ("" where it has none), for one-line reports."""
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else ""


def printable(text: str) -> str:
    """``text`` with its control characters escaped (``\\x1b``), for a terminal: a commit subject is anyone's text,
    and raw escape sequences in it could retitle the window, erase a line or print a fake verdict."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def drop_stdout() -> None:
    """Point stdout at devnull after its reader left (``| head``), as Python's SIGPIPE recipe does.

    Later output, and the flush at exit, then go nowhere instead of raising BrokenPipeError again.
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)


def run_command(prog: str, run: Callable[[], int], interrupted: str = "interrupted") -> int:
    """A console command's exit status: ``run()``'s, 2 after a UserError (printed as one line), 130 on Ctrl-C."""
    try:
        status = run()
        if sys.stdout is not None:  # None where the command started with no stdout at all (``>&-``)
            sys.stdout.flush()  # a closed pipe shows here, not as a traceback at exit
        return status
    except UserError as exc:
        # One line even where a message quotes a subprocess's output (a DDP worker's, say).
        print(f"{prog}: error: {' '.join(str(exc).split())}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{prog}: {interrupted}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader took what it wanted; status 1 and no traceback, as Python's recipe has it.
        drop_stdout()
        return 1
