#!/usr/bin/env python3
"""same_json_keys.py KJIT VERB — `kjit VERB --json` prints the same keys for every
family (an elementwise chain and a matmul), so scripts need not special-case one."""
import json
import subprocess
import sys

kjit, verb = sys.argv[1], sys.argv[2]
extra = ["--arch", "sm_90"] if verb == "compile" else ["--gpu", "h200"]
runs = {
    "elementwise": [kjit, verb, "y = x * sigmoid(x) * g", "--json", *extra],
    "matmul": [kjit, verb, "matmul", "--m", "512", "--n", "512", "--k", "512", "--json", *extra],
}
keys = {}
for family, command in runs.items():
    out = subprocess.run(command, capture_output=True, text=True, env={"KJIT_CACHE": "off"})
    if out.returncode != 0:
        sys.exit(f"{' '.join(command)} failed ({out.returncode}): {out.stderr}")
    document = json.loads(out.stdout)
    if document.get("family") != family:
        sys.exit(f"{family}: family is {document.get('family')!r}")
    keys[family] = set(document) - {"expression"}  # the elementwise input, echoed
if keys["elementwise"] != keys["matmul"]:
    sys.exit(f"kjit {verb} --json keys differ: only elementwise "
             f"{sorted(keys['elementwise'] - keys['matmul'])}, only matmul "
             f"{sorted(keys['matmul'] - keys['elementwise'])}")
print(f"ok: kjit {verb} --json has the same {len(keys['matmul'])} keys for both families")
