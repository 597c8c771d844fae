"""Runs the ```sh and ```python blocks of a Markdown page in order, in one
directory, as a reader would paste them: `widesql` and `python3` are
whatever PATH finds (run.sh puts the binary under test and the
virtualenv's python first). Stops at the first block that fails, naming
its line.

usage: doc_blocks.py PAGE.md DIR
"""

import subprocess
import sys


def blocks(text):
    """(line, language, code) of each fenced sh or python block."""
    found, fence = [], None
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if fence is None and stripped.startswith("```"):
            fence = (number, stripped[3:].strip().split(" ")[0], [])
        elif fence is not None and stripped == "```":
            if fence[1] in ("sh", "python"):
                found.append((fence[0], fence[1], "\n".join(fence[2]) + "\n"))
            fence = None
        elif fence is not None:
            fence[2].append(line)
    return found


def main():
    page, where = sys.argv[1], sys.argv[2]
    ran = blocks(open(page, encoding="utf-8").read())
    if not ran:
        sys.exit(f"{page}: no sh or python block")
    for line, language, code in ran:
        command = ["bash", "-euo", "pipefail", "-c", code] if language == "sh" else ["python3", "-c", code]
        done = subprocess.run(command, cwd=where, capture_output=True, text=True)
        if done.returncode != 0:
            sys.exit(f"{page}:{line}: the {language} block failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    print(f"docs: {len(ran)} sh and python blocks of {page} ran")


main()
