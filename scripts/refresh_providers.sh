#!/usr/bin/env bash
# Regenerates gateway/data/litellm_providers.txt: every provider prefix
# LiteLLM knows (MIT licence, Copyright (c) 2023 Berri AI; see
# gateway/data/README.md), from the pinned litellm package's source:
# the `LlmProviders` enum (`litellm.provider_list`) and the JSON-configured
# OpenAI-compatible providers (`litellm/llms/openai_like/providers.json`).
# Read as text, so litellm's dependencies need not be installed.
#
#   scripts/refresh_providers.sh            # the litellm package of .venv (or PYTHON)
#   scripts/refresh_providers.sh DIR        # a litellm source directory
set -euo pipefail
cd "$(dirname "$0")/.."
out=gateway/data/litellm_providers.txt
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3
if [ -n "${1:-}" ]; then
  dir=$1; version=$(basename "$(dirname "$dir")")
else
  dir=$("$python" -c 'import importlib.util, os; s = importlib.util.find_spec("litellm"); print(os.path.dirname(s.origin))')
  version="litellm $("$python" -c 'import importlib.metadata as m; print(m.version("litellm"))')"
fi

"$python" - "$dir" "$version" > "$out.new" <<'PY'
import ast, json, os, sys

root, version = sys.argv[1], sys.argv[2]
tree = ast.parse(open(os.path.join(root, "types", "utils.py")).read())
names = []
for node in tree.body:
    if isinstance(node, ast.ClassDef) and node.name == "LlmProviders":
        for stmt in node.body:
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
                names.append(stmt.value.value)
if not names:
    sys.exit("LlmProviders not found")
extra = json.load(open(os.path.join(root, "llms", "openai_like", "providers.json")))
for name in extra:
    if name not in names:
        names.append(name)
print("# Provider prefixes LiteLLM knows: its LlmProviders enum (litellm.provider_list) and")
print("# llms/openai_like/providers.json. MIT licence, Copyright (c) 2023 Berri AI.")
print(f"# Source: {version}. Regenerate with scripts/refresh_providers.sh; do not edit by hand.")
for name in sorted(names):
    print(name)
PY
mv "$out.new" "$out"
echo "wrote $out ($(grep -vc '^#' "$out") providers)"
