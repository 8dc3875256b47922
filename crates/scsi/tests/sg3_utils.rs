//! What the dispatcher answers about a protocol endpoint, read by decoders this project did
//! not write: sg3_utils' `sg_inq`, `sg_vpd` and `sg_luns`, on the bytes of standard
//! INQUIRY, the Extended INQUIRY Data VPD page (86h) and REPORT LUNS with SELECT REPORT
//! 12h. An ordinary LU is decoded alongside, so that a bit set everywhere (or nowhere)
//! cannot pass.
//!
//! Fails when sg3_utils is not installed (`scripts/test.sh` installs the Debian package
//! `sg3-utils`): a decoding that did not happen must not count as passed.

use std::path::PathBuf;
use std::process::Command as Process;
use std::sync::Arc;

use lacuna_scsi::backend::SecondLevelId;
use lacuna_scsi::lun::Lun;
use lacuna_scsi::memory::{MemoryBackend, MemoryUnitConfig};
use lacuna_scsi::target::{Command, ItNexus, ScsiStatus, ScsiTarget, TaskAttribute};
use lacuna_scsi::ScsiCore;

const ESX: &str = "iqn.1998-01.com.vmware:esx";
const PE_LUN: u64 = 1;
const IDS: [u64; 2] = [0xa6, 0x12_3456_789a];

/// LUN 0: an ordinary unit; LUN 1: a protocol endpoint with two vVols bound.
fn core() -> ScsiCore {
    let backend = Arc::new(MemoryBackend::new());
    let plain = backend.create_unit(MemoryUnitConfig::thin("plain", 1 << 20));
    backend.map(None, 0, &plain);
    backend.map_administrative(Some(ESX), PE_LUN, "pe");
    for id in IDS {
        let vvol = backend.create_unit(MemoryUnitConfig::thin("vvol", 1 << 20));
        backend.bind(Some(ESX), PE_LUN, SecondLevelId::new(id).unwrap(), &vvol);
    }
    ScsiCore::new(backend)
}

fn answer(core: &ScsiCore, lun: Lun, cdb: &[u8]) -> Vec<u8> {
    let nexus = ItNexus {
        initiator_name: ESX.to_string(),
        initiator_port: format!("{ESX},i,0x000000000001"),
        relative_target_port: 1,
    };
    let outcome = core.execute(
        &nexus,
        Command {
            lun,
            cdb,
            data_out: &bytes::Bytes::new(),
            expected_data_in_bytes: 1 << 16,
            task_tag: 1,
            attribute: TaskAttribute::Simple,
        },
    );
    assert_eq!(outcome.status, ScsiStatus::Good, "{outcome:?}");
    outcome.data_in
}

/// A file of ASCII hex bytes for `--inhex`, removed when dropped.
struct HexFile(PathBuf);

impl HexFile {
    fn new(name: &str, bytes: &[u8]) -> Self {
        let path = std::env::temp_dir().join(format!("sg3-{}-{name}.hex", std::process::id()));
        let text: Vec<String> = bytes.iter().map(|b| format!("{b:02x}")).collect();
        std::fs::write(&path, text.join(" ") + "\n").unwrap();
        Self(path)
    }

    fn arg(&self) -> String {
        format!("--inhex={}", self.0.display())
    }
}

impl Drop for HexFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Runs an sg3_utils tool, returning what it printed; panics (failing the test) when it
/// is missing or fails.
fn sg3(tool: &str, args: &[&str]) -> String {
    let output = Process::new(tool).args(args).output().unwrap_or_else(|e| {
        panic!("cannot run {tool} ({e}): install sg3-utils (Debian package `sg3-utils`; scripts/test.sh installs it)")
    });
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{tool} {args:?} failed: {}\n{text}",
        String::from_utf8_lossy(&output.stderr)
    );
    text
}

#[test]
fn sg_inq_reads_lu_cong_on_the_protocol_endpoint_only() {
    let core = core();
    for (lun, expected) in [
        (Lun::single_level(PE_LUN), "LU_CONG=1"),
        (Lun::single_level(0), "LU_CONG=0"),
    ] {
        let file = HexFile::new("inquiry", &answer(&core, lun, &[0x12, 0, 0, 0, 96, 0]));
        let decoded = sg3("sg_inq", &[&file.arg()]);
        assert!(decoded.contains(expected), "{lun}: {decoded}");
        assert!(
            decoded.contains("Vendor identification: LACUNA"),
            "{decoded}"
        );
    }
}

#[test]
fn sg_vpd_reads_a_conglomerate_collection_type_on_the_protocol_endpoint_only() {
    let core = core();
    for (lun, expected) in [
        (Lun::single_level(PE_LUN), "LU_COLL_TYPE=1"),
        (Lun::single_level(0), "LU_COLL_TYPE=0"),
    ] {
        let file = HexFile::new("extended", &answer(&core, lun, &[0x12, 1, 0x86, 0, 64, 0]));
        let decoded = sg3("sg_vpd", &[&file.arg(), "--page=0x86"]);
        assert!(
            decoded.contains("extended INQUIRY data VPD page"),
            "{decoded}"
        );
        assert!(decoded.contains(expected), "{lun}: {decoded}");
    }
}

#[test]
fn sg_luns_decodes_select_report_12h_as_the_pe_and_its_subsidiaries() {
    let core = core();
    let mut cdb = vec![0xa0, 0, 0x12, 0, 0, 0, 0, 0, 0x10, 0, 0, 0];
    cdb[6..10].copy_from_slice(&4096u32.to_be_bytes());
    let data = answer(&core, Lun::single_level(PE_LUN), &cdb);
    let luns: Vec<&[u8]> = data[8..].chunks(8).collect();
    assert_eq!(luns.len(), 1 + IDS.len());
    let decode = |lun: &[u8]| {
        let hex: String = lun.iter().map(|b| format!("{b:02x}")).collect();
        sg3(
            "sg_luns",
            &[&format!("--test={hex}"), "--decode", "--lu_cong"],
        )
    };
    let administrative = decode(luns[0]);
    assert!(
        administrative.contains(&format!("Simple lu addressing: {PE_LUN}")),
        "{administrative}"
    );
    assert!(
        administrative.contains(">>>> Administrative LU"),
        "{administrative}"
    );
    for (lun, id) in luns[1..].iter().zip(IDS) {
        let decoded = decode(lun);
        assert!(
            decoded.contains(&format!("Simple lu addressing: {PE_LUN}")),
            "{decoded}"
        );
        assert!(decoded.contains(">>Subsidiary element:"), "{decoded}");
        assert!(
            decoded.contains(&format!("Long extended flat space addressing: lun={id}")),
            "{decoded}"
        );
    }
}
