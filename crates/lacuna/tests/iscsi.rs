//! `lacuna serve` over iSCSI with clients nobody here wrote: libiscsi's conformance
//! suite (`iscsi-test-cu`, SCSI and iSCSI families) and its tools, against volumes
//! of the real engine, with LUN masking by host.
//!
//! Some SCSI tests run only against a unit with a particular property and skip on
//! any other, so each group runs against a LUN that has it: removable medium
//! (PreventAllow, StartStopUnit, NoMedia), a read-only LUN (a snapshot), and a 4Kn
//! LUN for GetLBAStatus.UnmapSingle, whose expectation contradicts SBC-4 when a
//! physical block holds several logical blocks. Everything else runs against an
//! ordinary 512e thin volume, through two portals (MultipathIO).

mod support;

use std::collections::BTreeMap;

use support::*;

const INITIATOR: &str = "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test";
const INITIATOR_2: &str = "iqn.2007-10.com.github:sahlberg:libiscsi:iscsi-test-2";

/// Tests that do not pass against Lacuna, with why. Keep it short and true.
const KNOWN_NOT_PASSING: &[(&str, &str)] = &[
    (
        "SCSI.Sanitize.CryptoErase",
        "skipped: CRYPTO ERASE is not offered (volumes are not encrypted with a per-volume key)",
    ),
    (
        "SCSI.Sanitize.Readonly",
        "passes OVERWRITE and BLOCK ERASE, logs [SKIPPED] for its CRYPTO ERASE part",
    ),
    (
        "SCSI.Sanitize.Reservations",
        "passes OVERWRITE and BLOCK ERASE, logs [SKIPPED] for its CRYPTO ERASE part",
    ),
];

const CHAP_INITIATOR: &str = "iqn.2024-01.org.example:chap-host";
const CHAP_USER: &str = "chapuser";
const CHAP_SECRET: &str = "a-secret-of-16ch";

/// A daemon with one volume per unit kind, both test initiators in one host with
/// one LUN each, and a second host that must log in with CHAP — all set up with
/// the CLI, as an administrator would.
fn start() -> Daemon {
    let dir = temp_dir("iscsi");
    let daemon = Daemon::start_with(dir.path(), "4G").owning(dir);
    for (name, size) in [
        ("main", "128M"),
        ("second", "64M"),
        ("removable", "64M"),
        ("base", "64M"),
        ("fourk", "256M"),
    ] {
        daemon.cli_ok(&["volume", "create", name, "--size", size]);
    }
    daemon.cli_ok(&["snapshot", "create", "base", "--name", "frozen"]);
    daemon.cli_ok(&[
        "host",
        "create",
        "conformance",
        "--iqn",
        INITIATOR,
        "--iqn",
        INITIATOR_2,
    ]);
    for (volume, lun, extra) in [
        ("main", "0", &[][..]),
        ("second", "1", &[][..]),
        ("removable", "2", &["--removable"][..]),
        ("base@frozen", "3", &[][..]),
        ("fourk", "4", &["--block-size", "4096"][..]),
    ] {
        let mut args = vec!["host", "connect", "conformance", volume, "--lun", lun];
        args.extend_from_slice(extra);
        daemon.cli_ok(&args);
    }
    daemon.cli_ok(&[
        "host",
        "create",
        "chap-host",
        "--iqn",
        CHAP_INITIATOR,
        "--chap-user",
        CHAP_USER,
        "--chap-secret",
        CHAP_SECRET,
    ]);
    daemon.cli_ok(&["host", "connect", "chap-host", "second", "--lun", "0"]);
    daemon
}

/// (test, verdict) from CUnit's verbose output; verdict is "passed", "FAILED" or
/// "SKIPPED" (CUnit counts a skipped test as passed, so its log line decides).
fn verdicts(family: &str, output: &str) -> BTreeMap<String, &'static str> {
    let mut out = BTreeMap::new();
    let (mut suite, mut current, mut skipped) = (String::new(), None::<String>, false);
    let mut tokens = output.split_whitespace();
    while let Some(token) = tokens.next() {
        match token {
            "Suite:" => suite = tokens.next().unwrap_or_default().to_string(),
            "Test:" => {
                current = tokens.next().map(|t| format!("{family}.{suite}.{t}"));
                skipped = false;
            }
            t if t.contains("[SKIPPED]") => skipped = true,
            "passed" | "...passed" => {
                if let Some(name) = current.take() {
                    out.insert(name, if skipped { "SKIPPED" } else { "passed" });
                }
            }
            "FAILED" | "...FAILED" => {
                if let Some(name) = current.take() {
                    out.insert(name, "FAILED");
                }
            }
            _ => {}
        }
    }
    out
}

fn run_suite(tests: &[String], urls: &[String]) -> String {
    let mut args = vec![
        "--dataloss",
        "--allow-sanitize",
        "-i",
        INITIATOR,
        "-I",
        INITIATOR_2,
        "--test",
    ];
    let joined = tests.join(",");
    args.push(&joined);
    let urls: Vec<&str> = urls.iter().map(String::as_str).collect();
    args.extend(urls);
    let out = tool("iscsi-test-cu", &args);
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn listed(family: &str) -> Vec<String> {
    tool_ok("iscsi-test-cu", &["-l"])
        .lines()
        .map(str::trim)
        .filter(|n| n.starts_with(&format!("{family}.")) && n.split('.').count() == 3)
        .map(str::to_string)
        .collect()
}

#[test]
fn conformance_scsi_and_iscsi_families_pass_against_engine_volumes() {
    let daemon = start();
    let lun_of = |name: &str| -> u64 {
        if ["SCSI.PreventAllow.", "SCSI.StartStopUnit.", "SCSI.NoMedia."]
            .iter()
            .any(|p| name.starts_with(p))
        {
            2
        } else if name.starts_with("SCSI.ReadOnly.") {
            3
        } else if name == "SCSI.GetLBAStatus.UnmapSingle" {
            4
        } else {
            0
        }
    };
    // The iSCSI family first, on fresh sessions: LUNResetSimpleAsync checks state
    // its own earlier callbacks set, which a long SCSI run before it disturbs.
    let mut groups: Vec<((String, u64), Vec<String>)> = Vec::new();
    for family in ["iSCSI", "SCSI"] {
        for name in listed(family) {
            let key = (family.to_string(), lun_of(&name));
            match groups.iter_mut().find(|(k, _)| *k == key) {
                Some((_, tests)) => tests.push(name),
                None => groups.push((key, vec![name])),
            }
        }
    }
    let mut problems = Vec::new();
    let (mut ran, mut passed) = (0, 0);
    for ((family, lun), tests) in &groups {
        let lun = *lun;
        let urls = [daemon.iscsi_url(0, lun), daemon.iscsi_url(1, lun)];
        // The iSCSI family runs whole (`-t iSCSI`): LUNResetSimpleAsync passes only
        // in the family's own order, after AbortTaskSimpleAsync on the same context.
        let selection = if family == "iSCSI" {
            vec![family.clone()]
        } else {
            tests.clone()
        };
        let output = run_suite(&selection, &urls);
        let got = verdicts(family, &output);
        for name in tests {
            ran += 1;
            let verdict = got.get(name).copied().unwrap_or("not run");
            let known = KNOWN_NOT_PASSING.iter().find(|(k, _)| k == name);
            match (verdict, known) {
                ("passed", None) => passed += 1,
                ("passed", Some(_)) => {
                    problems.push(format!("{name} passes: drop it from the list"))
                }
                (_, Some(_)) => {}
                (other, None) => problems.push(format!("{name} (LUN {lun}): {other}")),
            }
        }
        if problems.iter().any(|p| p.contains("not run")) {
            problems.push(format!("output of the LUN {lun} {family} run:\n{output}"));
            break;
        }
    }
    eprintln!("iscsi-test-cu: {passed} of {ran} passed; known: {KNOWN_NOT_PASSING:?}");
    assert!(ran >= 230, "only {ran} tests listed");
    assert!(
        problems.is_empty(),
        "{}\ndaemon log:\n{}",
        problems.join("\n"),
        daemon.log()
    );
}

#[test]
fn masking_shows_each_initiator_only_its_luns() {
    let daemon = start();
    // The conformance host sees its five LUNs, in order.
    let inq = |initiator: &str, lun: u64| {
        tool("iscsi-inq", &["-i", initiator, &daemon.iscsi_url(0, lun)])
    };
    let ok = inq(INITIATOR, 3);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    let portal = format!("iscsi://127.0.0.1:{}", daemon.iscsi_ports[0]);
    let ls = tool_ok("iscsi-ls", &["-i", INITIATOR, "-s", &portal]);
    assert_eq!(ls.matches("Lun:").count(), 10, "{ls}"); // 5 LUNs × 2 portals
                                                        // A LUN the host was not given does not exist for it.
    let unmapped = inq(INITIATOR, 7);
    assert!(!unmapped.status.success());
    let text = String::from_utf8_lossy(&unmapped.stderr).to_string()
        + &String::from_utf8_lossy(&unmapped.stdout);
    assert!(text.contains("LOGICAL_UNIT_NOT_SUPPORTED"), "{text}");
    // An initiator in no host cannot log in at all.
    let stranger = "iqn.2024-01.org.example:stranger";
    let refused = inq(stranger, 0);
    assert!(!refused.status.success());
    let ls = tool("iscsi-ls", &["-i", stranger, "-s", &portal]);
    assert_eq!(
        String::from_utf8_lossy(&ls.stdout).matches("Lun:").count(),
        0
    );
    // Refused, it is in the event log once (two attempts within a minute).
    let refused = |e: &serde_json::Value| e["kind"] == "host_refused";
    let events = support::events_until(&daemon, |events| events.iter().any(refused));
    let refusals: Vec<&serde_json::Value> = events.iter().filter(|e| refused(e)).collect();
    assert_eq!(refusals.len(), 1, "{refusals:?}");
    assert_eq!(refusals[0]["subject"], stranger);
    assert!(refusals[0]["message"]
        .as_str()
        .unwrap()
        .starts_with("iSCSI: "));
    // The snapshot LUN is read-only: a write is refused, a read works.
    let opts = |lun: u64| {
        format!(
            "driver=iscsi,transport=tcp,portal=127.0.0.1:{},target={TARGET_IQN},lun={lun},initiator-name={INITIATOR}",
            daemon.iscsi_ports[0]
        )
    };
    let qemu_io = |lun: u64, command: &str| {
        let out = tool("qemu-io", &["--image-opts", &opts(lun), "-c", command]);
        format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    };
    let text = qemu_io(3, "write -P 0x55 0 4k");
    assert!(text.contains("write protected"), "{text}");
    let out = tool(
        "qemu-io",
        &["-r", "--image-opts", &opts(3), "-c", "read -P 0 0 4k"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("read 4096"), "{text}");
    // A writable LUN round-trips data, zeroes and discards.
    for (command, expect) in [
        ("write -P 0x5a 1M 64k", "wrote 65536"),
        ("read -P 0x5a 1M 64k", "read 65536"),
        ("write -z 1M 32k", "wrote 32768"),
        ("read -P 0 1M 32k", "read 32768"),
        ("discard 1056768 32k", "discard 32768"),
        ("read -P 0 1056768 32k", "read 32768"),
    ] {
        let text = qemu_io(1, command);
        assert!(text.contains(expect), "{command}: {text}");
    }
}

#[test]
fn chap_is_enforced_and_qemu_img_converts_and_compares_over_iscsi() {
    let daemon = start();
    let url = |user: &str, secret: &str| {
        format!(
            "iscsi://{user}%{secret}@127.0.0.1:{}/{TARGET_IQN}/0",
            daemon.iscsi_ports[0]
        )
    };
    let good = tool(
        "iscsi-inq",
        &["-i", CHAP_INITIATOR, &url(CHAP_USER, CHAP_SECRET)],
    );
    assert!(
        good.status.success(),
        "{}",
        String::from_utf8_lossy(&good.stderr)
    );
    let bad = tool(
        "iscsi-inq",
        &["-i", CHAP_INITIATOR, &url(CHAP_USER, "wrong-secret-123")],
    );
    assert!(!bad.status.success(), "a wrong CHAP secret logged in");
    let none = tool(
        "iscsi-inq",
        &["-i", CHAP_INITIATOR, &daemon.iscsi_url(0, 0)],
    );
    assert!(!none.status.success(), "CHAP was not required");
    // The secret never reaches the log, even when a login fails.
    assert!(!daemon.log().contains(CHAP_SECRET));
    assert!(!daemon.log().contains("wrong-secret-123"));
    // The other host still works after the failures.
    assert!(
        tool("iscsi-inq", &["-i", INITIATOR, &daemon.iscsi_url(0, 0)])
            .status
            .success()
    );

    // qemu-img writes an image into a LUN and reads it back equal.
    let image = daemon.dir.join("image.raw");
    let mut bytes = vec![0u8; 8 << 20];
    for (i, chunk) in bytes.chunks_mut(4096).enumerate() {
        if i % 3 != 0 {
            chunk.fill((i % 251) as u8 + 1);
        }
    }
    std::fs::write(&image, &bytes).unwrap();
    let target = format!(
        "json:{{\"driver\":\"raw\",\"file\":{{\"driver\":\"iscsi\",\"transport\":\"tcp\",\
         \"portal\":\"127.0.0.1:{}\",\"target\":\"{TARGET_IQN}\",\"lun\":1,\
         \"initiator-name\":\"{INITIATOR}\"}}}}",
        daemon.iscsi_ports[1]
    );
    tool_ok(
        "qemu-img",
        &[
            "convert",
            "-n",
            "-f",
            "raw",
            "-O",
            "raw",
            image.to_str().unwrap(),
            &target,
        ],
    );
    let out = tool(
        "qemu-img",
        &[
            "compare",
            "-f",
            "raw",
            "-F",
            "raw",
            image.to_str().unwrap(),
            &target,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    // The LUN is larger than the image: the rest must read as zeroes.
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
