//! `loadgen run`: one load against one URL, reported as a table and
//! optionally as JSON.

pub mod args;

use std::sync::Arc;

use serde::Serialize;

use crate::cli::Args;
use crate::load::{self, LoadConfig, LoadSummary, Mode};
use crate::output::write_json;

/// The JSON report of `loadgen run`.
#[derive(Debug, Serialize)]
pub struct RunReport {
    /// The target URL.
    pub url: String,
    /// `open` or `closed`.
    pub mode: &'static str,
    /// Open loop: the scheduled rate (requests/s).
    pub rate: Option<f64>,
    /// Connections.
    pub connections: usize,
    /// Client threads.
    pub workers: usize,
    /// Request body size in bytes.
    pub body_bytes: usize,
    /// Whether responses were streamed.
    pub stream: bool,
    /// The measurements.
    pub result: LoadSummary,
}

impl RunReport {
    /// Runs `config` and summarizes it.
    pub fn measure(config: &LoadConfig) -> Result<RunReport, String> {
        let result = load::run(config, &Arc::default())?;
        Ok(RunReport {
            url: config.target.url(),
            mode: match config.mode {
                Mode::Open { .. } => "open",
                Mode::Closed => "closed",
            },
            rate: match config.mode {
                Mode::Open { rate } => Some(rate),
                Mode::Closed => None,
            },
            connections: config.connections,
            workers: config.workers,
            body_bytes: config.spec.body_size,
            stream: config.spec.stream,
            result: LoadSummary::new(&result, config.spec.stream),
        })
    }

    /// The human table.
    pub fn table(&self) -> String {
        let (pacing, basis) = match self.rate {
            Some(rate) => (format!("open loop {rate} req/s"), "intended send"),
            None => ("closed loop".to_string(), "actual send"),
        };
        format!(
            "loadgen run → {}\n{pacing}, {} connections, {} worker(s), {}-byte bodies{}\n{}",
            self.url,
            self.connections,
            self.workers,
            self.body_bytes,
            if self.stream { ", streamed" } else { "" },
            self.result.table(basis)
        )
    }
}

/// Entry point of `loadgen run`.
pub fn main(args: &mut Args) -> Result<(), String> {
    let (config, json) = match args::parse(args)? {
        args::Parsed::Run { config, json } => (config, json),
        args::Parsed::Help => {
            print!("{}", args::usage());
            return Ok(());
        }
    };
    let report = RunReport::measure(&config)?;
    print!("{}", report.table());
    if let Some(path) = json {
        write_json(&path, &report)?;
    }
    Ok(())
}
