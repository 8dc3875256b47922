//! libiscsi's conformance suite (`iscsi-test-cu`), iSCSI family, against the transport and
//! the in-memory SCSI double. Every test must run and pass: CUnit counts a SKIPPED test as
//! passed, so SKIPPED lines are counted separately and must be zero.
//!
//! Write residuals come from `ScsiTarget::data_out_bytes`: the Data-Out length the CDB asks
//! for, which only the SCSI layer knows.

mod common;

use std::sync::Arc;

use common::*;

/// (test name, passed) for every test CUnit ran, and the count of SKIPPED lines.
fn parse_verdicts(output: &str) -> (Vec<(String, bool)>, usize) {
    let mut verdicts: Vec<(String, Option<bool>)> = Vec::new();
    for line in output.lines() {
        let trimmed = line.trim();
        if let Some(rest) = trimmed.strip_prefix("Test: ") {
            let name = rest.split(" ...").next().unwrap_or(rest).to_string();
            verdicts.push((name, None));
        }
        if trimmed.starts_with("Suite:") || trimmed.starts_with("Run Summary") {
            continue;
        }
        if let Some((_, verdict)) = verdicts.last_mut() {
            if trimmed.ends_with("...passed") || trimmed == "passed" {
                *verdict = Some(true);
            } else if trimmed.ends_with("...FAILED") || trimmed == "FAILED" {
                *verdict = Some(false);
            }
        }
    }
    let skipped = output
        .lines()
        .filter(|line| line.contains("[SKIPPED]"))
        .count();
    let verdicts = verdicts
        .into_iter()
        .map(|(name, verdict)| {
            let verdict = verdict.unwrap_or_else(|| panic!("no verdict for {name}:\n{output}"));
            (name, verdict)
        })
        .collect();
    (verdicts, skipped)
}

#[test]
fn iscsi_family_passes_without_skips() {
    let server = TestServer::start_with(test_config(), Arc::new(lacuna_iscsi::OpenAccess), 2);
    let (_, output) = run_tool(
        "iscsi-test-cu",
        &[
            "--dataloss",
            "-i",
            INITIATOR_IQN,
            "-I",
            "iqn.2024-01.org.lacuna:initiator-2",
            "-t",
            "iSCSI",
            &server.url(0),
            &server.portal_url(1, 0),
        ],
    );
    println!("{output}");
    let (verdicts, skipped) = parse_verdicts(&output);
    assert_eq!(
        verdicts.len(),
        15,
        "the iSCSI family has 15 tests:\n{output}"
    );
    assert_eq!(skipped, 0, "SKIPPED lines:\n{output}");
    for (name, passed) in &verdicts {
        assert!(*passed, "{name} failed:\n{output}");
    }
    let passed = verdicts.iter().filter(|(_, passed)| *passed).count();
    println!(
        "iSCSI family: {} run, {passed} passed, {skipped} skipped",
        verdicts.len()
    );
}

#[test]
fn verdict_parser_reads_interleaved_logs() {
    let output = "Suite: A\n  Test: One ...passed\n  Test: Two ...    [FAILED] log\nlog\npassed\n  Test: Three ...FAILED\n    1. x.c:1 - assert\n";
    let (verdicts, skipped) = parse_verdicts(output);
    assert_eq!(
        verdicts,
        vec![
            ("One".to_string(), true),
            ("Two".to_string(), true),
            ("Three".to_string(), false)
        ]
    );
    assert_eq!(skipped, 0);
}
