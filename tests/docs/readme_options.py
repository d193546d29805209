#!/usr/bin/env python3
"""The README's commands use only options their programs have (ctest docs.readme).

    readme_options.py README.md EDGEFL EDGEFL_SERVER

For every `edgefl <command> ...` and `edgefl-server ...` in README.md (continuation lines joined),
each --option must appear in that command's --help; and no link may point outside the repository.
Exits 1 listing every offence.
"""
import re
import subprocess
import sys

COMMANDS = "encode|decode|inspect|add|bench|sim|certs|client|swarm|secagg-bench"


def main():
    readme_path, edgefl, server = sys.argv[1:4]
    readme = open(readme_path, encoding="utf-8").read()
    helps = {}

    def help_of(cmd):
        if cmd not in helps:
            argv = [server, "--help"] if cmd == "edgefl-server" else [edgefl, cmd, "--help"]
            helps[cmd] = subprocess.run(argv, capture_output=True, text=True, check=True).stdout
        return helps[cmd]

    offences = []
    text = re.sub(r"\\\n\s*", " ", readme)
    for number, line in enumerate(text.splitlines(), 1):
        for m in re.finditer(rf"edgefl(-server)?(?:\s+({COMMANDS}))?\s[^`|]*", line):
            cmd = "edgefl-server" if m.group(1) else m.group(2)
            if not cmd:
                continue
            for opt in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", m.group(0)):
                if opt != "--help" and opt not in help_of(cmd):
                    offences.append(f"README line ~{number}: `{cmd}` has no option {opt}")
    for link in re.findall(r"\]\(([^)#][^)]*)\)", readme):
        if re.match(r"[a-z]+://", link):
            offences.append(f"README links outside the repository: {link}")
    checked = len(helps)
    if offences:
        print("\n".join(offences))
        return 1
    print(f"README: the options of {checked} programs/commands checked, no outside links")
    return 0


if __name__ == "__main__":
    sys.exit(main())
