//! ALUA as an initiator sees it: TPGS in standard INQUIRY and the target port group
//! designator of VPD 83h, read by sg3_utils' decoders (`sg_inq`, `sg_vpd --inhex`), and
//! REPORT TARGET PORT GROUPS for a single array and for gateways whose groups the binary
//! decides (a pool's owner active/optimized, the others standby or offline).
//!
//! Fails when sg3_utils is not installed (`scripts/test.sh` installs `sg3-utils`).

use std::path::PathBuf;
use std::process::Command as Process;
use std::sync::Arc;

use lacuna_scsi::lun::Lun;
use lacuna_scsi::memory::{MemoryBackend, MemoryUnitConfig};
use lacuna_scsi::port_groups::{AccessState, PortGroup, PortGroups};
use lacuna_scsi::target::{Command, ItNexus, ScsiStatus, ScsiTarget, TaskAttribute};
use lacuna_scsi::ScsiCore;

const HOST: &str = "iqn.2026-12.test:host";

/// Three gateways: this one (group 2) owns the units; 1 stands by; 3 is gone.
#[derive(Debug)]
struct Gateways;

impl PortGroups for Gateways {
    fn own_group(&self) -> u16 {
        2
    }
    fn groups(&self) -> Vec<PortGroup> {
        vec![
            PortGroup {
                id: 3,
                state: AccessState::Offline,
            },
            PortGroup {
                id: 2,
                state: AccessState::ActiveOptimized,
            },
            PortGroup {
                id: 1,
                state: AccessState::Standby,
            },
        ]
    }
}

fn core() -> ScsiCore {
    let backend = Arc::new(MemoryBackend::new());
    let unit = backend.create_unit(MemoryUnitConfig::thin("vol", 1 << 20));
    backend.map(None, 0, &unit);
    ScsiCore::new(backend)
}

fn run(core: &ScsiCore, relative_target_port: u16, cdb: &[u8]) -> (ScsiStatus, Vec<u8>, Vec<u8>) {
    let nexus = ItNexus {
        initiator_name: HOST.to_string(),
        initiator_port: format!("{HOST},i,0x000000000001"),
        relative_target_port,
    };
    let outcome = core.execute(
        &nexus,
        Command {
            lun: Lun::single_level(0),
            cdb,
            data_out: &bytes::Bytes::new(),
            expected_data_in_bytes: 1 << 16,
            task_tag: 1,
            attribute: TaskAttribute::Simple,
        },
    );
    (outcome.status, outcome.data_in, outcome.sense)
}

fn answer(core: &ScsiCore, relative_target_port: u16, cdb: &[u8]) -> Vec<u8> {
    let (status, data, sense) = run(core, relative_target_port, cdb);
    assert_eq!(status, ScsiStatus::Good, "sense {sense:02x?}");
    data
}

fn sg3(tool: &str, name: &str, bytes: &[u8], args: &[&str]) -> String {
    let path: PathBuf =
        std::env::temp_dir().join(format!("alua-{}-{name}.hex", std::process::id()));
    let text: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
    std::fs::write(&path, text.join(" ") + "\n").unwrap();
    let output = Process::new(tool)
        .arg(format!("--inhex={}", path.display()))
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {tool} ({e}): install sg3-utils"));
    let _ = std::fs::remove_file(&path);
    assert!(output.status.success(), "{tool} failed");
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// RTPG, length-only header: (group id, state, its ports) for each descriptor.
fn report(core: &ScsiCore, port: u16) -> Vec<(u16, u8, Vec<u16>)> {
    // The nexus's first command other than INQUIRY takes its POWER ON unit attention.
    run(core, port, &[0, 0, 0, 0, 0, 0]);
    let data = answer(core, port, &[0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    let length = u32::from_be_bytes(data[0..4].try_into().unwrap()) as usize;
    assert_eq!(length, data.len() - 4);
    let mut groups = Vec::new();
    let mut at = 4;
    while at < data.len() {
        let ports = usize::from(data[at + 7]);
        let ids = (0..ports)
            .map(|i| u16::from_be_bytes([data[at + 10 + 4 * i], data[at + 11 + 4 * i]]))
            .collect();
        groups.push((
            u16::from_be_bytes([data[at + 2], data[at + 3]]),
            data[at] & 0x0f,
            ids,
        ));
        at += 8 + 4 * ports;
    }
    groups
}

#[test]
fn sg3_utils_reads_implicit_alua_and_the_port_group_of_the_port_asked() {
    let core = core().with_port_groups(Arc::new(Gateways));
    let inquiry = answer(&core, 2, &[0x12, 0, 0, 0, 96, 0]);
    let decoded = sg3("sg_inq", "inquiry", &inquiry, &[]);
    assert!(decoded.contains("TPGS=1"), "{decoded}");

    let page = answer(&core, 2, &[0x12, 1, 0x83, 0x01, 0, 0]);
    let decoded = sg3("sg_vpd", "vpd83", &page, &["--page=0x83"]);
    assert!(
        decoded.to_lowercase().contains("target port group: 0x2"),
        "{decoded}"
    );
    assert!(
        decoded.to_lowercase().contains("relative target port: 0x2"),
        "{decoded}"
    );
}

#[test]
fn a_single_array_is_one_active_optimized_group() {
    let core = core();
    assert_eq!(report(&core, 1), vec![(1, 0x0, vec![1])]);
    let page = answer(&core, 1, &[0x12, 1, 0x83, 0x01, 0, 0]);
    let decoded = sg3("sg_vpd", "vpd83-one", &page, &["--page=0x83"]);
    assert!(
        decoded.to_lowercase().contains("target port group: 0x1"),
        "{decoded}"
    );
}

#[test]
fn gateways_report_the_owner_active_optimized_and_the_others_standby_or_offline() {
    let core = core().with_port_groups(Arc::new(Gateways));
    assert_eq!(
        report(&core, 2),
        vec![(1, 0x2, vec![1]), (2, 0x0, vec![2]), (3, 0xe, vec![3])]
    );
    // The extended header: FORMAT TYPE 001b and an implicit transition time.
    let data = answer(&core, 2, &[0xa3, 0x2a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(data[4] >> 4, 1);
    assert!(data[5] > 0);
    // A short allocation length truncates; an unknown format is refused.
    assert_eq!(
        answer(&core, 2, &[0xa3, 0x0a, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0]).len(),
        6
    );
    let (status, _, _) = run(&core, 2, &[0xa3, 0x4a, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0]);
    assert_eq!(status, ScsiStatus::CheckCondition);
}
