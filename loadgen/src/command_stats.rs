//! What Redis says it ran (`INFO commandstats`): calls and time per
//! command, summed over servers, and what ran between two readings. A run
//! reads it to show where Redis's time goes: in scripts (`EVALSHA`, `EVAL`,
//! `FCALL`) or in the commands they (and the gateway directly) ran.

use std::collections::BTreeMap;

use serde::Serialize;

/// Calls and microseconds of one command.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct Tally {
    /// Times it ran.
    pub calls: u64,
    /// Microseconds it ran for, as Redis clocks them.
    pub usec: u64,
}

/// Commands that run scripts: their time includes the commands the script
/// calls, which Redis also counts under their own names.
const SCRIPT_COMMANDS: [&str; 4] = ["evalsha", "eval", "fcall", "evalsha_ro"];

/// Commands the measuring side sends itself (statistics, resets, health
/// checks), left out of the commands a request costs.
const MEASURING_COMMANDS: [&str; 5] = ["info", "config|resetstat", "dbsize", "flushall", "ping"];

/// Per command name (lower case, as `INFO` names them: `hmget`,
/// `client|setname`), what Redis ran.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CommandStats {
    /// Every command seen, by name.
    pub by_name: BTreeMap<String, Tally>,
}

impl CommandStats {
    /// The `cmdstat_<name>:calls=..,usec=..` lines of an `INFO commandstats`
    /// reply; other lines, and lines whose numbers do not parse, are
    /// skipped.
    pub fn parse(info: &str) -> CommandStats {
        let mut stats = CommandStats::default();
        for line in info.lines() {
            let Some((name, rest)) = line
                .strip_prefix("cmdstat_")
                .and_then(|l| l.split_once(':'))
            else {
                continue;
            };
            let field = |key: &str| {
                rest.split(',')
                    .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))?
                    .trim()
                    .parse::<u64>()
                    .ok()
            };
            if let (Some(calls), Some(usec)) = (field("calls"), field("usec")) {
                stats.add_tally(name, Tally { calls, usec });
            }
        }
        stats
    }

    /// Adds `other` (another server's reading) to `self`.
    pub fn add(&mut self, other: &CommandStats) {
        for (name, t) in &other.by_name {
            self.add_tally(name, *t);
        }
    }

    fn add_tally(&mut self, name: &str, t: Tally) {
        let e = self.by_name.entry(name.to_string()).or_default();
        e.calls = e.calls.saturating_add(t.calls);
        e.usec = e.usec.saturating_add(t.usec);
    }

    /// What ran from `before` to `self` (a command whose figures went
    /// down, as after a reset, counts from zero).
    pub fn since(&self, before: &CommandStats) -> CommandStats {
        let mut by_name = BTreeMap::new();
        for (name, now) in &self.by_name {
            let was = before.by_name.get(name).copied().unwrap_or_default();
            let d = match now.calls >= was.calls && now.usec >= was.usec {
                true => Tally {
                    calls: now.calls - was.calls,
                    usec: now.usec - was.usec,
                },
                false => *now,
            };
            if d.calls > 0 {
                by_name.insert(name.clone(), d);
            }
        }
        CommandStats { by_name }
    }

    /// Script calls (every command in `SCRIPT_COMMANDS`) and their time.
    pub fn scripts(&self) -> Tally {
        self.sum(|name| SCRIPT_COMMANDS.contains(&name))
    }

    /// Every other command the gateway's requests cost (inside scripts or
    /// sent directly), and their time: not scripts, not the measuring
    /// side's own.
    pub fn commands(&self) -> Tally {
        self.sum(is_request_command)
    }

    /// The `n` commands of [`CommandStats::commands`] that took the most
    /// time, most first.
    pub fn top_commands(&self, n: usize) -> Vec<(&str, Tally)> {
        let mut all: Vec<(&str, Tally)> = self
            .by_name
            .iter()
            .filter(|(name, _)| is_request_command(name))
            .map(|(name, t)| (name.as_str(), *t))
            .collect();
        all.sort_by(|a, b| b.1.usec.cmp(&a.1.usec).then(a.0.cmp(b.0)));
        all.truncate(n);
        all
    }

    fn sum(&self, pick: impl Fn(&str) -> bool) -> Tally {
        self.by_name
            .iter()
            .filter(|(name, _)| pick(name))
            .fold(Tally::default(), |s, (_, t)| Tally {
                calls: s.calls.saturating_add(t.calls),
                usec: s.usec.saturating_add(t.usec),
            })
    }
}

/// Whether `name` is a command a request costs Redis (not a script, not
/// the measuring side's statistics and resets).
fn is_request_command(name: &str) -> bool {
    !SCRIPT_COMMANDS.contains(&name) && !MEASURING_COMMANDS.contains(&name)
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "# Commandstats\r\n\
        cmdstat_evalsha:calls=41,usec=1000,usec_per_call=24.39,rejected_calls=0,failed_calls=0\r\n\
        cmdstat_eval:calls=1,usec=30\r\n\
        cmdstat_hmget:calls=80,usec=120,usec_per_call=1.5\r\n\
        cmdstat_zadd:calls=40,usec=200\r\n\
        cmdstat_client|setname:calls=2,usec=4\r\n\
        cmdstat_info:calls=9,usec=700\r\n\
        cmdstat_broken:calls=x,usec=1\r\n";

    #[test]
    fn reads_calls_and_time_of_scripts_and_commands() {
        let s = CommandStats::parse(INFO);
        assert_eq!(
            s.scripts(),
            Tally {
                calls: 42,
                usec: 1030
            }
        );
        // hmget, zadd and client|setname; not INFO (the measuring side's),
        // not the line whose numbers do not parse.
        assert_eq!(
            s.commands(),
            Tally {
                calls: 122,
                usec: 324
            }
        );
        assert_eq!(
            s.top_commands(2),
            vec![
                (
                    "zadd",
                    Tally {
                        calls: 40,
                        usec: 200
                    }
                ),
                (
                    "hmget",
                    Tally {
                        calls: 80,
                        usec: 120
                    }
                )
            ]
        );
        assert_eq!(CommandStats::parse(""), CommandStats::default());
    }

    #[test]
    fn sums_servers_and_takes_what_ran_between_readings() {
        let before = CommandStats::parse(INFO);
        let mut after = CommandStats::parse(
            "cmdstat_evalsha:calls=51,usec=1500\r\ncmdstat_hmget:calls=80,usec=120\r\ncmdstat_zrem:calls=3,usec=9\r\n",
        );
        after.add(&CommandStats::parse("cmdstat_zrem:calls=2,usec=1\r\n"));
        let d = after.since(&before);
        assert_eq!(
            d.by_name["evalsha"],
            Tally {
                calls: 10,
                usec: 500
            }
        );
        assert_eq!(d.by_name["zrem"], Tally { calls: 5, usec: 10 });
        // Unchanged or gone commands ran nothing in between.
        assert!(!d.by_name.contains_key("hmget") && !d.by_name.contains_key("zadd"));
        // Figures that went down (a reset between readings) count from zero.
        let reset = CommandStats::parse("cmdstat_evalsha:calls=4,usec=40\r\n");
        assert_eq!(
            reset.since(&before).by_name["evalsha"],
            Tally { calls: 4, usec: 40 }
        );
    }
}
