//! The AFL++ harness: `FUZZ_TARGET=<name>` picks the target. Built and run
//! by `scripts/fuzz.sh` with `cargo afl build --release -p fuzz --features afl`.

fn main() {
    let name = std::env::var("FUZZ_TARGET").unwrap_or_default();
    let Some(target) = fuzz::target(&name) else {
        let names: Vec<&str> = fuzz::TARGETS.iter().map(|t| t.name).collect();
        eprintln!("set FUZZ_TARGET to one of {names:?}");
        std::process::exit(2);
    };
    afl::fuzz!(|data: &[u8]| {
        (target.run)(data);
    });
}
