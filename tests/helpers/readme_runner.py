"""Runs the python blocks of README.md and the documentation pages for
``tests/project/test_readme.py``, one interpreter for all blocks.

Reads one JSON request per line on stdin (``{"code", "line", "path", "page", "raises",
"cwd"}``: ``path`` the page's file, ``page`` its name in messages),
executes the block in a fresh ``__main__`` namespace in the current directory and answers
with one line ``RESULT_MARK + json`` on stdout (``{"ok", "error", "output"}``). Sharing the
interpreter saves importing torch, SB3, procgen, ... once per block; each block still has
its own globals, so a missing import fails as it would for a reader.

Blocks are compiled with the page's path and line numbers (tracebacks name page lines),
and top-level ``print(...)  # TEXT`` lines check their output (``readme_blocks.instrument``).
"""

from __future__ import annotations

import builtins
import contextlib
import functools
import io
import json
import linecache
import os
import sys
import traceback

from tests.helpers.readme_blocks import instrument, output_matches

RESULT_MARK = "\x00readme-result "
CHECK_NAME = "__readme_print__"
OUTPUT_TAIL = 4000


def check_print(
    page: str, line: int, expected: str, *args, sep=" ", end="\n", file=None, flush=False
):
    """``print`` whose output must match the comment on its page line."""
    text = io.StringIO()
    print(*args, sep=sep, end=end, file=text)
    printed = text.getvalue()
    print(printed, end="", file=file, flush=flush)
    if not output_matches(expected, printed.rstrip("\n")):
        raise AssertionError(
            f"{page}:{line}: printed {printed.rstrip(chr(10))!r}, "
            f"the comment there says {expected!r}"
        )


def run(request: dict) -> dict:
    path, page = request["path"], request["page"]
    linecache.checkcache(path)
    tree = instrument(request["code"], request["line"], CHECK_NAME)
    code = compile(tree, path, "exec")
    check = functools.partial(check_print, page)
    namespace = {"__name__": "__main__", "__builtins__": builtins, CHECK_NAME: check}
    captured = io.StringIO()
    raised: BaseException | None = None
    with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
        try:
            exec(code, namespace)
        except BaseException as e:
            raised = e
            # the block's frames only (the first frame is this function's exec)
            traceback.print_exception(type(e), e, e.__traceback__.tb_next)
        finally:
            sys.stdout.flush()
    output = captured.getvalue()[-OUTPUT_TAIL:]
    want = request.get("raises")
    if want:
        names = [c.__name__ for c in type(raised).__mro__] if raised else []
        if want in names:
            return {"ok": True, "error": "", "output": output}
        got = f"raised {type(raised).__name__}: {raised}" if raised else "raised nothing"
        return {"ok": False, "error": f"expected {want}, {got}", "output": output}
    if raised is None:
        return {"ok": True, "error": "", "output": output}
    if isinstance(raised, SystemExit) and raised.code in (0, None):
        return {"ok": True, "error": "", "output": output}
    error = "".join(traceback.format_exception_only(raised)).strip()
    lines = [f.lineno for f in traceback.extract_tb(raised.__traceback__) if f.filename == path]
    where = f"{page}:{lines[-1]}: " if lines and not isinstance(raised, AssertionError) else ""
    return {"ok": False, "error": where + error, "output": output}


def main() -> None:
    out = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        os.chdir(request.get("cwd", "."))
        result = run(request)
        out.write(RESULT_MARK + json.dumps(result) + "\n")
        out.flush()


if __name__ == "__main__":
    main()
