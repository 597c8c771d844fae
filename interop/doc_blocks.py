"""Runs the ```sh and ```python blocks of a Markdown page in order, in one
directory, as a reader would paste them: `widesql` and `python3` are
whatever PATH finds (run.sh puts the binary under test and the
virtualenv's python first). Stops at the first block that fails, naming
its line.

usage: doc_blocks.py PAGE.md DIR [--serve] [--replace OLD NEW]...

--replace puts this run's values (a database, a password, a certificate)
where the page has a reader's; each OLD must be in some block. --serve is
for a page whose first block starts `widesql serve`: that block runs in
the background until it prints "listening on HOST:PORT", the other blocks
run against it (the page's `localhost:50051` becoming `localhost:PORT`),
then the server gets SIGTERM and must stop by itself, with status 0.
"""

import os
import signal
import subprocess
import sys
import time


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


def command(language, code):
    return ["bash", "-euo", "pipefail", "-c", code] if language == "sh" else ["python3", "-c", code]


def run(page, where, line, language, code):
    done = subprocess.run(command(language, code), cwd=where, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{page}:{line}: the {language} block failed ({done.returncode}):\n{done.stdout}{done.stderr}")


def start_server(page, where, line, code):
    """The server the block starts, and the port it printed."""
    log = open(os.path.join(where, "serve.err"), "w+")
    server = subprocess.Popen(
        command("sh", code), cwd=where, stdout=subprocess.PIPE, stderr=log,
        text=True, start_new_session=True,
    )
    for said in server.stdout:
        if said.startswith("listening on "):
            return server, said.strip().rsplit(":", 1)[1]
    server.wait()
    log.seek(0)
    sys.exit(f"{page}:{line}: the server did not start ({server.returncode}): {log.read()}")


def stop_server(page, line, server):
    os.killpg(server.pid, signal.SIGTERM)
    deadline = time.time() + 60
    while server.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    if server.returncode != 0:
        server.kill()
        sys.exit(f"{page}:{line}: the server did not stop cleanly ({server.returncode})")


def main():
    page, where, rest = sys.argv[1], sys.argv[2], sys.argv[3:]
    serve, replacements = False, []
    while rest:
        if rest[0] == "--serve":
            serve, rest = True, rest[1:]
        elif rest[0] == "--replace":
            replacements.append((rest[1], rest[2]))
            rest = rest[3:]
        else:
            sys.exit(f"unknown argument {rest[0]}")
    ran = blocks(open(page, encoding="utf-8").read())
    if not ran:
        sys.exit(f"{page}: no sh or python block")
    for old, new in replacements:
        if not any(old in code for _, _, code in ran):
            sys.exit(f"{page}: '{old}' is in none of its blocks")
        ran = [(line, language, code.replace(old, new)) for line, language, code in ran]
    os.makedirs(where, exist_ok=True)
    server = None
    if serve:
        line, language, code = ran[0]
        if language != "sh" or "serve" not in code:
            sys.exit(f"{page}:{line}: --serve wants the first block to start the server")
        server, port = start_server(page, where, line, code)
        ran = [(l, lang, c.replace("localhost:50051", f"localhost:{port}")) for l, lang, c in ran[1:]]
    try:
        for line, language, code in ran:
            run(page, where, line, language, code)
    finally:
        if server is not None and server.poll() is None:
            stop_server(page, line, server)
    print(f"docs: {len(ran) + int(serve)} sh and python blocks of {page} ran")


main()
