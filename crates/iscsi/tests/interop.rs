//! Interop with the open-source initiator tools (libiscsi's utilities, qemu's iscsi driver)
//! against the transport and an in-memory SCSI double.

mod common;

use common::*;

#[test]
fn iscsi_inq_reads_standard_inquiry() {
    let server = TestServer::start();
    let (ok, out) = run_tool("iscsi-inq", &["-i", INITIATOR_IQN, &server.url(0)]);
    assert!(ok, "{out}");
    assert!(out.contains("LACUNA"), "{out}");
    assert!(out.contains("TEST DOUBLE"), "{out}");
}

#[test]
fn iscsi_ls_discovers_the_target_on_every_portal() {
    let server = TestServer::start_with(
        test_config(),
        std::sync::Arc::new(lacuna_iscsi::OpenAccess),
        2,
    );
    let portal = format!("iscsi://127.0.0.1:{}", server.port());
    let (ok, out) = run_tool("iscsi-ls", &["-i", INITIATOR_IQN, "-s", &portal]);
    assert!(ok, "{out}");
    assert!(out.contains(&format!("Target:{TARGET_IQN}")), "{out}");
    for portal in &server.portals {
        assert!(out.contains(&format!("Portal:{portal},1")), "{out}");
    }
    // -s logs in to the target and lists its LUN with the INQUIRY data.
    assert!(out.contains("Lun:0"), "{out}");
}

#[test]
fn iscsi_readcapacity16_reports_the_disk_size() {
    let server = TestServer::start();
    let (ok, out) = run_tool(
        "iscsi-readcapacity16",
        &["-i", INITIATOR_IQN, &server.url(0)],
    );
    assert!(ok, "{out}");
    let blocks = server.disk.blocks();
    assert!(
        out.contains(&format!("Total size:{}", blocks * 512)),
        "{out}"
    );
}

#[test]
fn header_digest_crc32c_is_negotiated_and_used() {
    let server = TestServer::start();
    let url = format!("{}?header_digest=crc32c", server.url(0));
    let (ok, out) = run_tool("iscsi-inq", &["-i", INITIATOR_IQN, &url]);
    assert!(ok, "{out}");
    assert!(out.contains("LACUNA"), "{out}");
}

fn chap_policy(requirement: lacuna_iscsi::ChapRequirement) -> std::sync::Arc<TestPolicy> {
    std::sync::Arc::new(TestPolicy {
        chap: requirement,
        known: vec![INITIATOR_IQN.to_string()],
    })
}

fn credentials(user: &str, secret: &str) -> lacuna_iscsi::ChapCredentials {
    lacuna_iscsi::ChapCredentials {
        user: user.into(),
        secret: secret.as_bytes().to_vec(),
    }
}

#[test]
fn chap_one_way_with_libiscsi() {
    let requirement = lacuna_iscsi::ChapRequirement::OneWay {
        initiator: credentials("alice", "alice-secret-12"),
    };
    let server = TestServer::start_with(test_config(), chap_policy(requirement), 1);
    let url = |secret: &str| {
        format!(
            "iscsi://alice%{secret}@127.0.0.1:{}/{TARGET_IQN}/0",
            server.port()
        )
    };
    let (ok, out) = run_tool("iscsi-inq", &["-i", INITIATOR_IQN, &url("alice-secret-12")]);
    assert!(ok && out.contains("LACUNA"), "{out}");
    let (ok, out) = run_tool("iscsi-inq", &["-i", INITIATOR_IQN, &url("not-the-secret")]);
    assert!(!ok, "a wrong secret logged in: {out}");
    // No credentials at all: refused too.
    let (ok, out) = run_tool("iscsi-inq", &["-i", INITIATOR_IQN, &server.url(0)]);
    assert!(!ok, "no CHAP logged in: {out}");
}

#[test]
fn chap_mutual_with_libiscsi() {
    let requirement = lacuna_iscsi::ChapRequirement::Mutual {
        initiator: credentials("alice", "alice-secret-12"),
        target: credentials("lacuna", "target-secret-12"),
    };
    let server = TestServer::start_with(test_config(), chap_policy(requirement), 1);
    let url = |target_secret: &str| {
        format!(
            "iscsi://alice%alice-secret-12@127.0.0.1:{}/{TARGET_IQN}/0?target_user=lacuna&target_password={target_secret}",
            server.port()
        )
    };
    let (ok, out) = run_tool(
        "iscsi-inq",
        &["-i", INITIATOR_IQN, &url("target-secret-12")],
    );
    assert!(ok && out.contains("LACUNA"), "{out}");
    // The initiator checks the target's answer: a target secret it does not expect fails.
    let (ok, out) = run_tool(
        "iscsi-inq",
        &["-i", INITIATOR_IQN, &url("some-other-secret")],
    );
    assert!(!ok, "the initiator accepted the wrong target secret: {out}");
}

fn qemu_available() -> bool {
    tool_available("qemu-img") && run_tool("qemu-img", &["--help"]).1.contains("iscsi")
}

#[test]
fn qemu_io_writes_and_reads_large_requests() {
    assert!(
        qemu_available(),
        "qemu-img with the iscsi driver (qemu-block-extra) is required"
    );
    let server = TestServer::start();
    let url = server.url(0);
    let (ok, out) = run_tool(
        "qemu-io",
        &[
            "-f",
            "raw",
            &url,
            "-c",
            "write -P 0xab 1M 3M",
            "-c",
            "read -P 0xab 1M 3M",
            "-c",
            "write -z 2M 64k",
            "-c",
            "read -P 0 2M 64k",
            "-c",
            "read -P 0xab 1M 1M",
        ],
    );
    assert!(ok, "{out}");
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert_eq!(server.disk.read_bytes(1 << 20, 4096), vec![0xab; 4096]);
    assert_eq!(server.disk.read_bytes(2 << 20, 4096), vec![0; 4096]);
}

#[test]
fn qemu_img_convert_and_compare() {
    assert!(
        qemu_available(),
        "qemu-img with the iscsi driver (qemu-block-extra) is required"
    );
    let server = TestServer::start();
    let dir = tempfile::Builder::new()
        .prefix("lacuna-iscsi-")
        .tempdir()
        .unwrap();
    let image = dir.path().join("source.raw");
    let content: Vec<u8> = (0..(4u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    std::fs::write(&image, &content).unwrap();
    let image = image.to_str().unwrap();
    let url = server.url(0);
    let (ok, out) = run_tool(
        "qemu-img",
        &["convert", "-n", "-f", "raw", "-O", "raw", image, &url],
    );
    assert!(ok, "{out}");
    assert_eq!(server.disk.read_bytes(0, content.len()), content);
    let (ok, out) = run_tool(
        "qemu-img",
        &["compare", "-f", "raw", "-F", "raw", image, &url],
    );
    assert!(ok, "{out}");
    assert!(out.contains("Images are identical"), "{out}");
}

#[test]
fn qemu_io_with_solicited_data_only_and_small_segments() {
    assert!(
        qemu_available(),
        "qemu-img with the iscsi driver (qemu-block-extra) is required"
    );
    let mut config = test_config();
    config.limits.initial_r2t = true;
    config.limits.immediate_data = false;
    config.limits.max_recv_data_segment_bytes = 4096;
    config.limits.max_burst_bytes = 64 * 1024;
    let server = TestServer::start_with(config, std::sync::Arc::new(lacuna_iscsi::OpenAccess), 1);
    let (ok, out) = run_tool(
        "qemu-io",
        &[
            "-f",
            "raw",
            &server.url(0),
            "-c",
            "write -P 0x5c 512k 1M",
            "-c",
            "read -P 0x5c 512k 1M",
        ],
    );
    assert!(ok, "{out}");
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert_eq!(
        server.disk.read_bytes((512 << 10) + (1 << 20) - 4096, 4096),
        vec![0x5c; 4096]
    );
}
