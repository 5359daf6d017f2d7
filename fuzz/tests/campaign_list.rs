//! `scripts/fuzz.sh` runs every target by default: its list of targets is
//! the fuzz crate's, so a new target is never left out of the long
//! campaigns.

use fuzz::TARGETS;

#[test]
fn the_campaign_script_lists_every_target() {
    let script = fuzz::root().join("../scripts/fuzz.sh");
    let text = std::fs::read_to_string(&script).expect("scripts/fuzz.sh");
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("all=("))
        .and_then(|l| l.strip_suffix(')'))
        .expect("fuzz.sh sets all=(...)");
    let listed: Vec<&str> = line.split_whitespace().collect();
    let targets: Vec<&str> = TARGETS.iter().map(|t| t.name).collect();
    assert_eq!(
        listed, targets,
        "scripts/fuzz.sh's all=(...) must name the fuzz crate's targets, in order"
    );
}
