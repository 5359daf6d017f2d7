#!/usr/bin/env bash
# Regenerates gateway/data/litellm_route_groups.tsv: LiteLLM's route groups
# (`litellm.proxy._types.LiteLLMRoutes`; MIT licence, Copyright (c) 2023
# Berri AI; see gateway/data/README.md), which a virtual key's
# `allowed_routes` may name. Needs the pinned litellm package (.venv, as
# scripts/test.sh installs it, or PYTHON).
#
#   scripts/refresh_route_groups.sh
set -euo pipefail
cd "$(dirname "$0")/.."
out=gateway/data/litellm_route_groups.tsv
python=${PYTHON:-.venv/bin/python}

LITELLM_LOCAL_MODEL_COST_MAP=True "$python" - > "$out.new" <<'PY'
import importlib.metadata
from litellm.proxy._types import LiteLLMRoutes

print(f"# LiteLLM {importlib.metadata.version('litellm')}'s route groups (litellm.proxy._types.LiteLLMRoutes), one")
print('# "<group>\\t<route>" per line: a virtual key\'s allowed_routes may name a group.')
print("# Routes are exact paths, /prefix/* wildcards or /path/{param} patterns.")
for name, member in LiteLLMRoutes.__members__.items():
    value = member.value
    if not isinstance(value, (list, set, tuple, frozenset)):
        continue
    routes = sorted(r for r in value if isinstance(r, str) and r.startswith("/"))
    for route in routes:
        print(f"{name}\t{route}")
PY
mv "$out.new" "$out"
echo "wrote $out ($(cut -f1 "$out" | grep -vc '^#' | tr -d ' ') routes in $(grep -v '^#' "$out" | cut -f1 | sort -u | wc -l | tr -d ' ') groups)"
