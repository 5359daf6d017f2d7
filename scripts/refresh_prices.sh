#!/usr/bin/env bash
# Regenerates the gateway's default price tables (gateway/data/
# model_prices.tsv, query_prices.tsv, media_prices.tsv, audio_prices.tsv)
# from LiteLLM's model_prices_and_context_window.json (MIT licence,
# Copyright (c) 2023 Berri AI; see gateway/data/README.md).
#
#   scripts/refresh_prices.sh            # the JSON of the pinned litellm package (.venv)
#   scripts/refresh_prices.sh FILE.json  # a JSON file you downloaded
#   scripts/refresh_prices.sh --latest   # LiteLLM's main branch on GitHub
#
# The TSV keeps only what the gateway uses, so the binary carries ~0.3 MB,
# not 3.5 MB of JSON: one row per model (name lowercased, first spelling
# wins) with a per-token or per-second price or a context window.
set -euo pipefail
cd "$(dirname "$0")/.."
out=gateway/data/model_prices.tsv
url=https://raw.githubusercontent.com/BerriAI/litellm/main/model_prices_and_context_window.json
python=${PYTHON:-.venv/bin/python}
[ -x "$python" ] || python=python3

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
case "${1:-}" in
  --latest) curl -fsSL "$url" -o "$tmp"; src="$url" ;;
  "") json=$("$python" -c 'import importlib.util, os; s = importlib.util.find_spec("litellm"); print(os.path.join(os.path.dirname(s.origin), "model_prices_and_context_window_backup.json"))')
      cp "$json" "$tmp"
      src="litellm $("$python" -c 'import importlib.metadata as m; print(m.version("litellm"))') (model_prices_and_context_window_backup.json)" ;;
  *) cp "$1" "$tmp"; src="$1" ;;
esac

# One table: a row per model (name lowercased, first spelling wins) that
# has any of the given columns; `max_*` columns are whole token counts,
# the rest prices. Usage: table FILE COLUMN...
table() {
    local file=$1
    shift
    "$python" - "$tmp" "$src" "$@" > "$file.new" <<'PY'
import json, sys

path, source, cols = sys.argv[1], sys.argv[2], sys.argv[3:]
data = json.load(open(path))

def num(v, integer):
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
        return ""
    if integer:
        return str(int(v)) if int(v) > 0 else ""
    return repr(float(v))

rows = {}
for name, spec in data.items():
    if name == "sample_spec" or not isinstance(spec, dict):
        continue
    key = name.strip().lower()
    if not key or "\t" in key or "\n" in key or key in rows:
        continue
    vals = [num(spec.get(c), c.startswith("max_")) for c in cols]
    if any(vals):
        rows[key] = vals

print(f"# Derived from LiteLLM's model_prices_and_context_window.json, MIT licence, Copyright (c) 2023 Berri AI.")
print(f"# Source: {source}. Regenerate with scripts/refresh_prices.sh; do not edit by hand.")
print("# name\t" + "\t".join(cols))
for key in sorted(rows):
    print(key + "\t" + "\t".join(rows[key]))
PY
    mv "$file.new" "$file"
}

table "$out" input_cost_per_token output_cost_per_token \
    cache_read_input_token_cost cache_creation_input_token_cost \
    input_cost_per_second output_cost_per_second max_input_tokens max_output_tokens
# Rerank prices per search unit, beside the token table (merged into it
# by name when the gateway parses it).
queries=gateway/data/query_prices.tsv
table "$queries" input_cost_per_query
# Image and audio prices (per image, per pixel, per image token, per
# character, per second of audio), looked up by the exact names LiteLLM's
# image cost calculator builds (`{quality}/{size}/{model}`, ...).
media=gateway/data/media_prices.tsv
table "$media" input_cost_per_image output_cost_per_image input_cost_per_pixel \
    input_cost_per_image_token output_cost_per_image_token input_cost_per_character \
    input_cost_per_second output_cost_per_second
# Audio token prices (the realtime API's audio input, cached audio input
# and audio output), looked up by the model's name.
audio=gateway/data/audio_prices.tsv
table "$audio" input_cost_per_audio_token cache_read_input_audio_token_cost \
    output_cost_per_audio_token
echo "wrote $audio: $(grep -vc '^#' "$audio") models"
echo "wrote $media: $(grep -vc '^#' "$media") models"
echo "wrote $queries: $(grep -vc '^#' "$queries") models"
echo "wrote $out: $(grep -vc '^#' "$out") models from $src"
