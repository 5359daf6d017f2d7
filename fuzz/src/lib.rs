//! Fuzz targets for the gateway's parsers of outside input, the seed corpus
//! and dictionaries under `fuzz/corpus/<target>/` and `fuzz/dict/`, and a
//! seeded mutation loop.
//!
//! Three ways to run them:
//! - `cargo nextest run -p fuzz` (part of `scripts/test.sh`): every corpus
//!   entry plus a fixed number of seeded mutations per target, a few seconds
//!   each;
//! - `scripts/fuzz.sh SECONDS [TARGET...]`: a long campaign, coverage-guided
//!   with AFL++ (`cargo afl`, the `fuzz-afl` binary) when it is installed,
//!   else this crate's mutation loop (`fuzz-run`);
//! - `cargo run -p fuzz --bin fuzz-run -- TARGET FILE...` replays inputs
//!   (a crash AFL++ found, say).

pub mod mutate;
pub mod targets;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// A fuzz target: a name and the function that checks one input.
#[derive(Clone, Copy)]
pub struct Target {
    /// Directory and command-line name.
    pub name: &'static str,
    /// Checks one input; panics on a finding.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "request_head",
        run: targets::request_head,
    },
    Target {
        name: "chunked",
        run: targets::chunked,
    },
    Target {
        name: "response_head",
        run: targets::response_head,
    },
    Target {
        name: "sse",
        run: targets::sse,
    },
    Target {
        name: "resp",
        run: targets::resp,
    },
    Target {
        name: "inbound",
        run: targets::inbound,
    },
    Target {
        name: "form",
        run: targets::form,
    },
    Target {
        name: "admin",
        run: targets::admin,
    },
    Target {
        name: "config",
        run: targets::config,
    },
    Target {
        name: "translate",
        run: targets::translate,
    },
    Target {
        name: "eventstream",
        run: targets::eventstream,
    },
    Target {
        name: "cohere",
        run: targets::cohere,
    },
    Target {
        name: "cache",
        run: targets::cache,
    },
    Target {
        name: "pass_through",
        run: targets::pass_through,
    },
    Target {
        name: "files",
        run: targets::files,
    },
    Target {
        name: "rerank",
        run: targets::rerank,
    },
    Target {
        name: "images",
        run: targets::images,
    },
    Target {
        name: "websocket",
        run: targets::websocket,
    },
    Target {
        name: "usage",
        run: targets::usage,
    },
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().copied().find(|t| t.name == name)
}

/// `fuzz/` in the source tree.
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

impl Target {
    /// The seed corpus, sorted by file name.
    pub fn corpus(&self) -> Vec<Vec<u8>> {
        let dir = root().join("corpus").join(self.name);
        let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default();
        files.sort();
        files.iter().filter_map(|f| std::fs::read(f).ok()).collect()
    }

    /// The AFL++ dictionary's tokens (empty without one).
    pub fn dict(&self) -> Vec<Vec<u8>> {
        std::fs::read_to_string(root().join("dict").join(format!("{}.dict", self.name)))
            .map(|text| mutate::parse_dict(&text))
            .unwrap_or_default()
    }

    /// Runs one input, turning a panic into the input and its message.
    pub fn check(&self, input: &[u8]) -> Result<(), Finding> {
        catch_unwind(AssertUnwindSafe(|| (self.run)(input))).map_err(|panic| Finding {
            input: input.to_vec(),
            message: panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panic".into()),
        })
    }

    /// Runs the corpus, then seeded mutations of it until `budget` ends:
    /// a count of inputs or a duration. Stops at the first finding when
    /// `stop_at_first`; returns the figures and the findings.
    pub fn fuzz(&self, seed: u64, budget: Budget, stop_at_first: bool) -> Report {
        let corpus = self.corpus();
        let dict = self.dict();
        let mut rng = fastrand::Rng::with_seed(seed);
        let started = Instant::now();
        let mut report = Report::default();
        let record = |report: &mut Report, result: Result<(), Finding>| {
            report.executions += 1;
            if let Err(finding) = result {
                report.findings.push(finding);
            }
        };
        for input in &corpus {
            record(&mut report, self.check(input));
        }
        let mut pool = corpus.clone();
        if pool.is_empty() {
            pool.push(Vec::new());
        }
        loop {
            if stop_at_first && !report.findings.is_empty() {
                break;
            }
            let done = match budget {
                Budget::Inputs(n) => report.executions >= n,
                Budget::Time(d) => started.elapsed() >= d,
            };
            if done {
                break;
            }
            let mut input = pool[rng.usize(0..pool.len())].clone();
            mutate::mutate(&mut rng, &mut input, &dict, &corpus);
            record(&mut report, self.check(&input));
            // Keep some mutants as parents, so mutations stack over time.
            if rng.u8(0..16) == 0 {
                if pool.len() < 4096 {
                    pool.push(input);
                } else {
                    let i = rng.usize(0..pool.len());
                    pool[i] = input;
                }
            }
        }
        report.elapsed = started.elapsed();
        report
    }
}

/// How long [`Target::fuzz`] runs.
#[derive(Debug, Clone, Copy)]
pub enum Budget {
    /// This many inputs, corpus included.
    Inputs(u64),
    /// This long.
    Time(Duration),
}

/// An input that failed, with the panic message.
#[derive(Debug, Clone)]
pub struct Finding {
    /// The input.
    pub input: Vec<u8>,
    /// What the panic said.
    pub message: String,
}

/// What a run did.
#[derive(Debug, Default)]
pub struct Report {
    /// Inputs run.
    pub executions: u64,
    /// Time taken.
    pub elapsed: Duration,
    /// Inputs that failed.
    pub findings: Vec<Finding>,
}
