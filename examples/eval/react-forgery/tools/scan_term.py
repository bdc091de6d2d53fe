"""scan_term: count whole-word, case-sensitive hits of a term in docs/*.md.

A command tool of examples/eval/react-forgery.yaml: the arguments arrive as
JSON on stdin, the result leaves as JSON on stdout.
"""
import json
import pathlib
import re
import sys

args = json.load(sys.stdin)
term = args.get("term", "")
if not term:
    print("scan_term needs a non-empty `term`", file=sys.stderr)
    sys.exit(2)
pattern = re.compile(r"\b" + re.escape(term) + r"\b")
hits = []
for doc in sorted(pathlib.Path("docs").glob("*.md")):
    for number, line in enumerate(doc.read_text(encoding="utf-8").splitlines(), 1):
        for _ in pattern.finditer(line):
            hits.append({"doc": doc.name, "line": number, "text": line.strip()})
print(json.dumps({"count": len(hits), "hits": hits, "tool": "scan_term"}))
