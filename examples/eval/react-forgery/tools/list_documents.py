"""list_documents: the documents under docs/, as JSON."""
import json
import pathlib
import sys

json.load(sys.stdin)
names = sorted(p.name for p in pathlib.Path("docs").glob("*.md"))
print(json.dumps({"documents": names, "tool": "list_documents"}))
