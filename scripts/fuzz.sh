#!/usr/bin/env bash
# A long fuzz campaign over the gateway's parsers (fuzz/, FUZZING.md).
#
#   scripts/fuzz.sh SECONDS [TARGET...]
#
# Runs each TARGET (default: all) for SECONDS, one after the other, so it
# uses one core; run it under `nice -n 19` on a shared machine. With AFL++
# (`cargo install cargo-afl && cargo afl config --build`; Debian's afl++ is
# not needed) the campaign is coverage-guided: the `fuzz-afl` harness is
# built instrumented into target/afl, seeded from fuzz/corpus/<target>/ with
# fuzz/dict/<target>.dict, and its queue and crashes land in
# fuzz/findings/afl/<target>/ (git-ignored). Without cargo-afl, or with
# FUZZ_ENGINE=stable, the coverage-blind mutation loop `fuzz-run` runs
# instead. Either way one summary line per target goes to stdout and
# fuzz/findings/summary.txt; crashes are replayed with
#   cargo run -p fuzz --bin fuzz-run -- TARGET --replay FILE...
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if [ $# -lt 1 ] || ! [[ "$1" =~ ^[0-9]+$ ]]; then
    echo "usage: scripts/fuzz.sh SECONDS [TARGET...]" >&2
    exit 2
fi
seconds="$1"
shift
all=(request_head chunked response_head sse resp inbound form admin config translate eventstream cohere cache pass_through files rerank images websocket usage)
if [ $# -gt 0 ]; then targets=("$@"); else targets=("${all[@]}"); fi
mkdir -p fuzz/findings
summary=fuzz/findings/summary.txt

engine="${FUZZ_ENGINE:-}"
if [ -z "$engine" ]; then
    if cargo afl --version >/dev/null 2>&1; then engine=afl; else engine=stable; fi
fi

if [ "$engine" = afl ]; then
    cargo afl build --release -p fuzz --features afl --bin fuzz-afl --target-dir target/afl
    harness=target/afl/release/fuzz-afl
    # No core-dump helper or CPU governor on shared machines: tell AFL++
    # not to insist on them.
    export AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1
    export AFL_NO_AFFINITY=1
    for t in "${targets[@]}"; do
        out="fuzz/findings/afl/$t"
        mkdir -p "$out"
        input=fuzz/corpus/$t
        # A rerun resumes from the previous queue.
        if [ -f "$out/default/fuzzer_stats" ]; then input=-; fi
        # Without a UI AFL++ prints a line per test case: keep the end.
        FUZZ_TARGET="$t" cargo afl fuzz -V "$seconds" -i "$input" -o "$out" \
            -x "fuzz/dict/$t.dict" -- "$harness" 2>&1 | tail -n 200 >"$out/afl.log" || true
        stats="$out/default/fuzzer_stats"
        field() { sed -n "s/^$1 *: *//p" "$stats" 2>/dev/null | head -n 1; }
        line="target=$t engine=afl seconds=$seconds executions=$(field execs_done) \
coverage=$(field bitmap_cvg) corpus=$(field corpus_count) crashes=$(field saved_crashes) \
hangs=$(field saved_hangs)"
        echo "$line" | tee -a "$summary"
    done
else
    cargo build --release -p fuzz --bin fuzz-run
    for t in "${targets[@]}"; do
        target/release/fuzz-run "$t" "$seconds" "${FUZZ_SEED:-$RANDOM}" | tee -a "$summary" || true
    done
fi
