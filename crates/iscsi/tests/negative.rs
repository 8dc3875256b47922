//! Negative tests with a raw TCP client: each misbehaviour gets the response the RFC names
//! (login status, Reject, silence) and the target keeps serving other sessions.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use lacuna_iscsi::pdu::{self, Header, RESERVED_TAG};
use lacuna_iscsi::{ChapCredentials, ChapRequirement};

const ISID_A: [u8; 6] = [0x80, 0, 0, 0, 0, 0x0a];
const ISID_B: [u8; 6] = [0x80, 0, 0, 0, 0, 0x0b];

/// Polls `condition` for up to five seconds.
fn wait_for(condition: impl Fn() -> bool) {
    for _ in 0..500 {
        if condition() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("condition not reached in time");
}

/// A server open to every initiator, with the test configuration as
/// `adjust` leaves it.
fn open_server(adjust: impl FnOnce(&mut lacuna_iscsi::TargetConfig)) -> TestServer {
    let mut config = test_config();
    adjust(&mut config);
    TestServer::start_with(config, Arc::new(lacuna_iscsi::OpenAccess), 1)
}

fn chap_server(requirement: ChapRequirement) -> TestServer {
    let mut config = test_config();
    config.allow_unknown_initiators = false;
    let policy = TestPolicy {
        chap: requirement,
        known: vec![INITIATOR_IQN.to_string()],
    };
    TestServer::start_with(config, Arc::new(policy), 1)
}

fn one_way(secret: &str) -> ChapRequirement {
    ChapRequirement::OneWay {
        initiator: ChapCredentials {
            user: "alice".into(),
            secret: secret.as_bytes().to_vec(),
        },
    }
}

/// Runs the CHAP exchange with `secret`; returns the final login response.
fn chap_login(client: &mut RawClient, secret: &str) -> pdu::LoginResponse {
    let (response, text) = client.login_step(
        ISID_A,
        0,
        1,
        false,
        &[
            ("InitiatorName", INITIATOR_IQN),
            ("TargetName", TARGET_IQN),
            ("AuthMethod", "CHAP"),
        ],
    );
    assert_eq!(response.status_class, 0);
    assert_eq!(text.get("AuthMethod"), Some("CHAP"));
    let (_, text) = client.login_step(ISID_A, 0, 1, false, &[("CHAP_A", "5")]);
    let identifier: u8 = text.get("CHAP_I").unwrap().parse().unwrap();
    let challenge = lacuna_iscsi::chap::decode_binary(text.get("CHAP_C").unwrap(), 1024).unwrap();
    let answer = lacuna_iscsi::chap::response(identifier, secret.as_bytes(), &challenge);
    let answer = lacuna_iscsi::chap::encode_binary(&answer);
    let (response, _) = client.login_step(
        ISID_A,
        0,
        1,
        true,
        &[("CHAP_N", "alice"), ("CHAP_R", &answer)],
    );
    response
}

#[test]
fn wrong_chap_secret_fails_02_01_and_the_right_one_still_works() {
    let server = chap_server(one_way("correct-secret"));
    let mut bad = RawClient::connect(server.portals[0]);
    let response = chap_login(&mut bad, "wrong-secret!!");
    assert_eq!((response.status_class, response.status_detail), (2, 1));
    assert!(bad.closed_by_target());

    let mut good = RawClient::connect(server.portals[0]);
    let response = chap_login(&mut good, "correct-secret");
    assert_eq!((response.status_class, response.status_detail), (0, 0));
    assert!(response.transit);
    let (response, _) = good.login_step(ISID_A, 1, 3, true, &[]);
    assert_eq!((response.status_class, response.next_stage), (0, 3));
    assert_ne!(response.tsih, 0);
    assert!(good.ping().is_some());
}

#[test]
fn unknown_initiator_fails_02_02() {
    let server = chap_server(ChapRequirement::None);
    let mut client = RawClient::connect(server.portals[0]);
    let (response, _) = client.login_step(
        ISID_A,
        1,
        3,
        true,
        &[
            ("InitiatorName", "iqn.2024-01.org.example:stranger"),
            ("TargetName", TARGET_IQN),
        ],
    );
    assert_eq!((response.status_class, response.status_detail), (2, 2));
    let mut known = RawClient::connect(server.portals[0]);
    known.login_normal(INITIATOR_IQN, ISID_B);
    assert!(known.ping().is_some());
}

#[test]
fn unknown_target_name_fails_02_03_and_missing_initiator_name_02_07() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    let (response, _) = client.login_step(
        ISID_A,
        1,
        3,
        true,
        &[
            ("InitiatorName", INITIATOR_IQN),
            ("TargetName", "iqn.2024-01.org.example:nothing"),
        ],
    );
    assert_eq!((response.status_class, response.status_detail), (2, 3));
    let mut client = RawClient::connect(server.portals[0]);
    let (response, _) = client.login_step(ISID_A, 1, 3, true, &[("TargetName", TARGET_IQN)]);
    assert_eq!((response.status_class, response.status_detail), (2, 7));
}

#[test]
fn unknown_opcode_is_rejected_with_its_header_and_the_session_continues() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    let mut bhs = [0u8; 48];
    bhs[0] = 0x1d; // not an opcode
    bhs[16..20].copy_from_slice(&7u32.to_be_bytes());
    client.send_bytes(&bhs);
    let received = client.receive().expect("reject");
    let Header::Reject(reject) = received.header else {
        panic!("expected Reject")
    };
    assert_eq!(reject.reason, pdu::RejectReason::CommandNotSupported as u8);
    assert_eq!(received.data, bhs.to_vec());
    assert!(client.ping().is_some());
}

#[test]
fn oversized_data_segment_is_rejected_and_the_session_continues() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    // 300 KiB NOP-Out data against a 256 KiB MaxRecvDataSegmentLength.
    let header = Header::NopOut(pdu::NopOut {
        immediate: true,
        lun: [0; 8],
        initiator_task_tag: 99,
        target_transfer_tag: RESERVED_TAG,
        cmd_sn: client.cmd_sn,
        exp_stat_sn: client.exp_stat_sn,
    });
    client.send(&header, &vec![0x5a; 300 * 1024]);
    let received = client.receive().expect("reject");
    let Header::Reject(reject) = received.header else {
        panic!("expected Reject")
    };
    assert_eq!(reject.reason, pdu::RejectReason::ProtocolError as u8);
    assert_eq!(&received.data[16..20], &99u32.to_be_bytes());
    assert!(client.ping().is_some());
}

/// Sends a WRITE(10) of 512 KiB without immediate data and returns its tag
/// and the R2T that asks for its first data (InitialR2T=Yes).
fn write_awaiting_data(client: &mut RawClient) -> (u32, pdu::ReadyToTransfer) {
    let itt = send_write_of(client, 0, 512 * 1024, &[]);
    let received = client.receive().expect("R2T");
    let Header::ReadyToTransfer(r2t) = received.header else {
        panic!("expected R2T, got {:?}", received.header)
    };
    (itt, r2t)
}

/// A Data-Out answering `r2t` of write `itt`, numbered `data_sn`.
fn data_out_for(client: &RawClient, itt: u32, r2t: &pdu::ReadyToTransfer, data_sn: u32) -> Header {
    Header::DataOut(pdu::DataOut {
        final_bit: true,
        lun: [0; 8],
        initiator_task_tag: itt,
        target_transfer_tag: r2t.target_transfer_tag,
        exp_stat_sn: client.exp_stat_sn,
        data_sn,
        buffer_offset: r2t.buffer_offset,
    })
}

/// Receives write `itt`'s response: CHECK CONDITION, and the write never ran.
fn expect_write_failed(client: &mut RawClient, server: &TestServer, itt: u32) {
    assert_eq!(next_status(client), (itt, 0x02));
    assert!(client.ping().is_some());
    assert_eq!(
        server.disk.commands.load(Ordering::SeqCst),
        0,
        "the write never ran"
    );
}

#[test]
fn an_oversized_data_out_ends_its_write_and_the_session_continues() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    let (itt, r2t) = write_awaiting_data(&mut client);
    // 300 KiB of Data-Out against a 256 KiB MaxRecvDataSegmentLength.
    let data_out = data_out_for(&client, itt, &r2t, 0);
    client.send(&data_out, &vec![0x5a; 300 * 1024]);
    let received = client.receive().expect("reject");
    let Header::Reject(reject) = received.header else {
        panic!("expected Reject, got {:?}", received.header)
    };
    assert_eq!(reject.reason, pdu::RejectReason::ProtocolError as u8);
    // The write cannot get its data now: it ends, rather than wait for ever.
    expect_write_failed(&mut client, &server, itt);
}

#[test]
fn a_data_out_out_of_sequence_ends_its_write_though_its_data_was_in_place() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    let (itt, r2t) = write_awaiting_data(&mut client);
    // At the offset the write expects (so received straight into its
    // buffer), with DataSN 5 where 0 is due.
    let data_out = data_out_for(&client, itt, &r2t, 5);
    client.send(&data_out, &vec![0x5a; r2t.desired_transfer_bytes as usize]);
    expect_write_failed(&mut client, &server, itt);
}

#[test]
fn cmd_sn_outside_the_window_is_ignored() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    let login = client.login_normal(INITIATOR_IQN, ISID_A);
    let window_end = login.max_cmd_sn;
    // Beyond MaxCmdSN: silently discarded (RFC 7143 §4.2.2.1).
    let saved = client.cmd_sn;
    client.cmd_sn = window_end.wrapping_add(1);
    client
        .stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    assert!(
        client.ping().is_none(),
        "a command beyond MaxCmdSN was answered"
    );
    // Below ExpCmdSN: a duplicate, also discarded.
    client.cmd_sn = saved.wrapping_sub(1);
    assert!(
        client.ping().is_none(),
        "a command below ExpCmdSN was answered"
    );
    client
        .stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client.cmd_sn = saved;
    let nop = client.ping().expect("in-window command answered");
    assert_eq!(nop.exp_cmd_sn, saved.wrapping_add(1));
}

#[test]
fn commands_ahead_of_exp_cmd_sn_wait_for_the_gap() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    let first = client.cmd_sn;
    client.cmd_sn = first + 1;
    client
        .stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(client.ping().is_none(), "CmdSN+1 ran before CmdSN");
    client
        .stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    client.cmd_sn = first;
    // Filling the gap runs both, in order: two NOP-Ins.
    let itt_second = client.itt;
    let nop = client.ping().expect("gap filled");
    let held = client.receive().expect("held command answered");
    let Header::NopIn(held) = held.header else {
        panic!("expected NOP-In")
    };
    assert_eq!(held.initiator_task_tag, itt_second);
    assert_eq!(held.exp_cmd_sn, first + 2);
    assert!(nop.exp_cmd_sn > first);
}

#[test]
fn garbage_before_login_closes_only_that_connection() {
    let server = TestServer::start();
    let mut garbage = RawClient::connect(server.portals[0]);
    garbage.send_bytes(&[0xffu8; 200]);
    assert!(
        garbage.closed_by_target(),
        "garbage login was not closed at once"
    );
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    assert!(client.ping().is_some());
}

#[test]
fn silent_connection_is_closed_after_the_login_timeout() {
    let server = open_server(|config| {
        config.timeouts.login = Duration::from_millis(300);
    });
    let mut idle = RawClient::connect(server.portals[0]);
    assert!(idle.closed_by_target(), "an idle login was not timed out");
}

#[test]
fn unanswered_nop_in_ping_closes_the_connection() {
    let server = open_server(|config| {
        config.timeouts.nop_in_interval = Duration::from_millis(200);
        config.timeouts.nop_in_timeout = Duration::from_millis(300);
    });
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    let ping = client.receive().expect("NOP-In ping");
    let Header::NopIn(nop) = ping.header else {
        panic!("expected NOP-In")
    };
    assert_eq!(nop.initiator_task_tag, RESERVED_TAG);
    assert_ne!(nop.target_transfer_tag, RESERVED_TAG);
    assert!(
        client.closed_by_target(),
        "connection kept without a ping answer"
    );
    wait_for(|| server.disk.nexus_dropped.load(Ordering::SeqCst) == 1);
}

#[test]
fn reusing_an_isid_reinstates_the_session() {
    let server = TestServer::start();
    let mut old = RawClient::connect(server.portals[0]);
    old.login_normal(INITIATOR_IQN, ISID_A);
    let mut new = RawClient::connect(server.portals[0]);
    new.login_normal(INITIATOR_IQN, ISID_A);
    assert!(
        old.closed_by_target(),
        "the old session survived reinstatement"
    );
    assert!(new.ping().is_some());
    assert_eq!(server.disk.nexus_created.load(Ordering::SeqCst), 2);
    assert_eq!(server.disk.nexus_dropped.load(Ordering::SeqCst), 1);
}

/// An initiator that hangs up and logs in again from another initiator port
/// finds the old nexus lost (its PREVENT and reservations gone) by the time
/// its login completes, however slow the old session's teardown.
#[test]
fn a_login_after_a_hang_up_waits_for_the_old_nexus_to_be_dropped() {
    let server = TestServer::start();
    *server.disk.nexus_dropped_delay.lock() = Duration::from_millis(500);
    let mut old = RawClient::connect(server.portals[0]);
    old.login_normal(INITIATOR_IQN, ISID_A);
    drop(old);
    // The target has seen the hang-up: the old session's teardown is under way.
    wait_for(|| server.disk.closing.load(Ordering::SeqCst));
    assert_eq!(server.disk.nexus_dropped.load(Ordering::SeqCst), 0);
    let mut new = RawClient::connect(server.portals[0]);
    new.login_normal(INITIATOR_IQN, ISID_B);
    assert_eq!(
        server.disk.nexus_dropped.load(Ordering::SeqCst),
        1,
        "the login completed before the old nexus was dropped"
    );
    assert!(new.ping().is_some());
}

/// Sends a Logout Request (close the session) and returns the reply.
fn logout(client: &mut RawClient, initiator_task_tag: u32) -> Received {
    let header = Header::LogoutRequest(pdu::LogoutRequest {
        immediate: true,
        reason: 0,
        initiator_task_tag,
        cid: 0,
        cmd_sn: client.cmd_sn,
        exp_stat_sn: client.exp_stat_sn,
    });
    client.send(&header, &[]);
    client.receive().expect("logout response")
}

#[test]
fn logout_answers_and_closes() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    let received = logout(&mut client, 55);
    let Header::LogoutResponse(response) = received.header else {
        panic!("expected Logout")
    };
    assert_eq!((response.response, response.initiator_task_tag), (0, 55));
    assert!(client.closed_by_target());
}

/// A logout releases the nexus (reservations and all) before it is
/// answered, once: an initiator may log in again at once and reserve.
#[test]
fn logout_drops_the_nexus_before_answering() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    assert_eq!(server.disk.nexus_dropped.load(Ordering::SeqCst), 0);
    let received = logout(&mut client, 56);
    assert!(matches!(received.header, Header::LogoutResponse(_)));
    assert_eq!(
        server.disk.nexus_dropped.load(Ordering::SeqCst),
        1,
        "dropped before the response"
    );
    assert!(client.closed_by_target());
    let mut again = RawClient::connect(server.portals[0]);
    again.login_normal(INITIATOR_IQN, ISID_A);
    assert!(again.ping().is_some());
    assert_eq!(
        server.disk.nexus_dropped.load(Ordering::SeqCst),
        1,
        "not again at the teardown"
    );
}

#[test]
fn read_and_write_round_trip_with_residual_and_sense() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    // WRITE(10) of 2 blocks at LBA 8 as immediate data.
    let data: Vec<u8> = (0..1024u32).map(|i| (i % 251) as u8).collect();
    let replies = client.scsi_command(&[0x2a, 0, 0, 0, 0, 8, 0, 0, 2, 0], 0, &data);
    let Header::ScsiResponse(response) = &replies.last().unwrap().header else {
        panic!()
    };
    assert_eq!(response.status, 0);
    assert_eq!(server.disk.read_bytes(8 * 512, 1024), data);
    // READ(10) of the same blocks with a 4096-byte expectation: underflow 3072.
    let replies = client.scsi_command(&[0x28, 0, 0, 0, 0, 8, 0, 0, 2, 0], 4096, &[]);
    let read: Vec<u8> = replies.iter().flat_map(|r| r.data.clone()).collect();
    assert_eq!(read, data);
    let Header::DataIn(last) = &replies.last().unwrap().header else {
        panic!("phase collapse")
    };
    assert!(last.status_present && last.residual_underflow);
    assert_eq!(last.residual_bytes, 3072);
    // An unknown opcode gets CHECK CONDITION with the sense in the response.
    let replies = client.scsi_command(&[0xc7, 0, 0, 0, 0, 0], 0, &[]);
    let received = replies.last().unwrap();
    let Header::ScsiResponse(response) = &received.header else {
        panic!()
    };
    assert_eq!(response.status, 2);
    assert_eq!(received.data[0..2], 18u16.to_be_bytes());
    assert_eq!(received.data[2 + 2] & 0x0f, 5);
}

#[test]
fn discovery_lists_every_portal() {
    let server = TestServer::start_with(test_config(), Arc::new(lacuna_iscsi::OpenAccess), 2);
    let mut client = RawClient::connect(server.portals[0]);
    let (response, _) = client.login_step(
        ISID_A,
        1,
        3,
        true,
        &[
            ("InitiatorName", INITIATOR_IQN),
            ("SessionType", "Discovery"),
        ],
    );
    assert_eq!(response.status_class, 0);
    let header = Header::TextRequest(pdu::TextRequest {
        immediate: true,
        final_bit: true,
        continue_bit: false,
        lun: [0; 8],
        initiator_task_tag: 3,
        target_transfer_tag: RESERVED_TAG,
        cmd_sn: client.cmd_sn,
        exp_stat_sn: client.exp_stat_sn,
    });
    client.send(&header, b"SendTargets=All\0");
    let received = client.receive().expect("text response");
    let text = String::from_utf8(received.data).unwrap();
    assert!(text.contains(&format!("TargetName={TARGET_IQN}")), "{text}");
    for portal in &server.portals {
        assert!(
            text.contains(&format!("TargetAddress={portal},1")),
            "{text}"
        );
    }
    // SCSI commands have no place in a discovery session.
    let replies = client.scsi_command(&[0, 0, 0, 0, 0, 0], 0, &[]);
    assert!(matches!(replies[0].header, Header::Reject(_)));
}

#[test]
fn crc32c_digests_protect_full_feature_pdus() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    let (response, text) = client.login_step(
        ISID_A,
        1,
        3,
        true,
        &[
            ("InitiatorName", INITIATOR_IQN),
            ("TargetName", TARGET_IQN),
            ("HeaderDigest", "CRC32C,None"),
            ("DataDigest", "CRC32C"),
        ],
    );
    assert_eq!(response.status_class, 0);
    assert_eq!(text.get("HeaderDigest"), Some("CRC32C"));
    assert_eq!(text.get("DataDigest"), Some("CRC32C"));
    client.digests = pdu::Digests {
        header: true,
        data: true,
    };
    // Both directions carry valid digests (checked in RawClient::receive).
    assert!(client.ping().is_some());
    let replies = client.scsi_command(&[0x12, 0, 0, 0, 36, 0], 36, &[]);
    assert_eq!(&replies[0].data[8..14], b"LACUNA");
    // A corrupted header digest ends the connection (ErrorRecoveryLevel 0).
    let header = Header::NopOut(pdu::NopOut {
        immediate: true,
        lun: [0; 8],
        initiator_task_tag: 77,
        target_transfer_tag: RESERVED_TAG,
        cmd_sn: client.cmd_sn,
        exp_stat_sn: client.exp_stat_sn,
    });
    let mut bytes = pdu::encode_pdu(&header, &[], &[], client.digests);
    bytes[48] ^= 0xff;
    client.send_bytes(&bytes);
    assert!(
        client.closed_by_target(),
        "a bad header digest was accepted"
    );
}

/// An immediate ABORT TASK (tag `tag`) of the command with tag `referenced`,
/// the last one `client` sent.
fn abort_task_request(client: &RawClient, tag: u32, referenced: u32) -> Header {
    Header::TaskManagementRequest(pdu::TaskManagementRequest {
        immediate: true,
        function: 1,
        lun: [0; 8],
        initiator_task_tag: tag,
        referenced_task_tag: referenced,
        cmd_sn: client.cmd_sn,
        exp_stat_sn: client.exp_stat_sn,
        ref_cmd_sn: client.cmd_sn - 1,
        exp_data_sn: 0,
    })
}

#[test]
fn abort_task_waits_for_the_running_command_and_suppresses_its_response() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    *server.disk.delay.lock() = Duration::from_millis(400);
    let itt = client.next_itt();
    let command = Header::ScsiCommand(pdu::ScsiCommand {
        immediate: false,
        final_bit: true,
        read: false,
        write: false,
        attribute: 1,
        lun: [0; 8],
        initiator_task_tag: itt,
        expected_data_transfer_bytes: 0,
        cmd_sn: client.cmd_sn,
        exp_stat_sn: client.exp_stat_sn,
        cdb: [0; 16],
    });
    client.send(&command, &[]);
    client.cmd_sn += 1;
    std::thread::sleep(Duration::from_millis(100));
    let abort = abort_task_request(&client, 500, itt);
    client.send(&abort, &[]);
    let received = client.receive().expect("TMF response");
    let Header::TaskManagementResponse(response) = received.header else {
        panic!("the aborted command answered: {:?}", received.header);
    };
    assert_eq!((response.initiator_task_tag, response.response), (500, 0));
    // Aborting a tag that no longer exists: TASK DOES NOT EXIST.
    *server.disk.delay.lock() = Duration::ZERO;
    let abort_again = Header::TaskManagementRequest(pdu::TaskManagementRequest {
        initiator_task_tag: 501,
        ..match abort {
            Header::TaskManagementRequest(request) => request,
            _ => unreachable!(),
        }
    });
    client.send(&abort_again, &[]);
    let received = client.receive().expect("TMF response");
    let Header::TaskManagementResponse(response) = received.header else {
        panic!()
    };
    assert_eq!((response.initiator_task_tag, response.response), (501, 1));
    // The window slot was released: the session keeps working.
    assert!(client.ping().is_some());
}

#[test]
fn shutdown_asks_initiators_to_log_out_then_closes() {
    let mut server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    server.begin_shutdown();
    let received = client.receive().expect("async message");
    let Header::AsyncMessage(message) = received.header else {
        panic!("expected Async")
    };
    assert_eq!(message.async_event, 1);
    assert!(message.parameter3 >= 1);
    assert!(client.closed_by_target());
}

/// A command sent with `attribute` (1 SIMPLE, 2 ORDERED) and no data, the
/// way the tests below queue commands without waiting for their answers.
fn send_no_data_command(client: &mut RawClient, attribute: u8) -> u32 {
    let itt = client.next_itt();
    let command = Header::ScsiCommand(pdu::ScsiCommand {
        immediate: false,
        final_bit: true,
        read: false,
        write: false,
        attribute,
        lun: [0; 8],
        initiator_task_tag: itt,
        expected_data_transfer_bytes: 0,
        cmd_sn: client.cmd_sn,
        exp_stat_sn: client.exp_stat_sn,
        cdb: [0; 16],
    });
    client.send(&command, &[]);
    client.cmd_sn += 1;
    itt
}

/// Waits up to five seconds for the one session's nexus to be dropped, and
/// gives the server back. Otherwise panics, leaving the server to the
/// process's end: its threads would wait for the session for ever.
fn expect_session_ended(server: TestServer) -> TestServer {
    let ended = (0..500).any(|_| {
        std::thread::sleep(Duration::from_millis(10));
        server.disk.nexus_dropped.load(Ordering::SeqCst) == 1
    });
    if !ended {
        std::mem::forget(server);
        panic!("the session outlived its connection");
    }
    server
}

/// A connection dropped while a command waits behind an ORDERED one for the
/// ordering lock: the waiting command never ran, and the session must still
/// end (its nexus dropped, its initiator port free for a new login) once the
/// running one is done. It once stayed registered for ever, and the next
/// login with the same ISID failed with TARGET ERROR.
#[test]
fn a_connection_dropped_with_commands_queued_behind_an_ordered_one_ends_its_session() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    *server.disk.delay.lock() = Duration::from_millis(300);
    send_no_data_command(&mut client, 2);
    send_no_data_command(&mut client, 1);
    // Both are in before the socket goes: the first runs, the second waits.
    wait_for(|| server.disk.commands.load(Ordering::SeqCst) >= 1);
    drop(client);
    let server = expect_session_ended(server);
    *server.disk.delay.lock() = Duration::ZERO;
    // The command behind the ORDERED one never reached the SCSI layer.
    assert_eq!(server.disk.commands.load(Ordering::SeqCst), 1);
    let mut again = RawClient::connect(server.portals[0]);
    again.login_normal(INITIATOR_IQN, ISID_A);
    assert!(again.ping().is_some());
}

/// The login timeout bounds the exchange, not the admission after it: a
/// SCSI layer slow to set up the new nexus once made the timeout fire after
/// the session was registered, and the connection closed with the session
/// left behind for ever (its nexus never dropped).
#[test]
fn a_slow_nexus_setup_outlasting_the_login_timeout_still_gives_a_working_session() {
    let server = open_server(|config| {
        config.timeouts.login = Duration::from_millis(300);
    });
    *server.disk.nexus_created_delay.lock() = Duration::from_millis(700);
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    assert!(client.ping().is_some(), "the admitted session was dropped");
    drop(client);
    let server = expect_session_ended(server);
    assert_eq!(server.disk.nexus_created.load(Ordering::SeqCst), 1);
}

/// A connection dropped while a command waits inside the SCSI layer on a
/// long operation: the SCSI layer hears that the nexus is closing, the
/// command ends, and the session with it (it once waited for the operation).
#[test]
fn a_connection_dropped_during_a_long_command_tells_the_scsi_layer_and_ends() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    server.disk.hold_until_closing.store(true, Ordering::SeqCst);
    send_no_data_command(&mut client, 1);
    wait_for(|| server.disk.commands.load(Ordering::SeqCst) >= 1);
    drop(client);
    let server = expect_session_ended(server);
    assert!(server.disk.closing.load(Ordering::SeqCst));
}

/// Past `max_connections` a new connection waits in the listen backlog: its
/// login is answered only once another connection ends.
#[test]
fn connections_past_the_limit_wait_until_one_ends() {
    let server = open_server(|config| {
        config.limits.max_connections = 2;
    });
    let first = RawClient::connect(server.portals[0]);
    let mut second = RawClient::connect(server.portals[0]);
    second.login_normal(INITIATOR_IQN, ISID_A);
    let mut third = RawClient::connect(server.portals[0]);
    third
        .stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let login = Header::LoginRequest(pdu::LoginRequest {
        transit: true,
        continue_bit: false,
        current_stage: 1,
        next_stage: 3,
        version_max: 0,
        version_min: 0,
        isid: ISID_B,
        tsih: 0,
        initiator_task_tag: 1,
        cid: 0,
        cmd_sn: 1,
        exp_stat_sn: 0,
    });
    let mut text = lacuna_iscsi::text::Pairs::default();
    text.push("InitiatorName", INITIATOR_IQN);
    text.push("TargetName", TARGET_IQN);
    third.send(&login, &text.encode());
    assert!(third.receive().is_none(), "a third connection was served");
    drop(first);
    third
        .stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let received = third.receive().expect("the login is answered");
    let Header::LoginResponse(response) = received.header else {
        panic!("expected a Login Response, got {:?}", received.header);
    };
    assert_eq!((response.status_class, response.status_detail), (0, 0));
    assert!(second.ping().is_some());
}

/// Task management requests are immediate (outside the CmdSN window): past
/// `task_management_max` running at once, more are refused at once with
/// FUNCTION REJECTED rather than each holding a task of the target.
#[test]
fn task_management_past_the_limit_is_rejected_at_once() {
    let server = open_server(|config| {
        config.limits.task_management_max = 2;
    });
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    *server.disk.delay.lock() = Duration::from_millis(500);
    let slow = send_no_data_command(&mut client, 1);
    wait_for(|| server.disk.commands.load(Ordering::SeqCst) >= 1);
    // Three aborts of the running command: two wait for it, the third is refused.
    for tag in [500, 501, 502] {
        let abort = abort_task_request(&client, tag, slow);
        client.send(&abort, &[]);
    }
    let mut answers = Vec::new();
    while answers.len() < 3 {
        let received = client.receive().expect("TMF response");
        let Header::TaskManagementResponse(response) = received.header else {
            panic!("the aborted command answered: {:?}", received.header);
        };
        answers.push((response.initiator_task_tag, response.response));
    }
    // The refusal comes first, without waiting for the command.
    assert_eq!(answers[0], (502, 255));
    answers[1..].sort_unstable();
    assert_eq!(&answers[1..], &[(500, 0), (501, 0)]);
    *server.disk.delay.lock() = Duration::ZERO;
    assert!(client.ping().is_some());
}

/// A WRITE(10) at `lba` with `data` as immediate data, sent without waiting
/// for its answer.
fn send_write(client: &mut RawClient, lba: u32, data: &[u8]) -> u32 {
    send_write_of(client, lba, data.len() as u32, data)
}

/// A WRITE(10) of `bytes` at `lba`, `immediate` of them sent with it.
fn send_write_of(client: &mut RawClient, lba: u32, bytes: u32, immediate: &[u8]) -> u32 {
    let itt = client.next_itt();
    let blocks = (bytes / BLOCK_BYTES as u32) as u16;
    let mut cdb = [0u8; 16];
    cdb[0] = 0x2a;
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
    let command = Header::ScsiCommand(pdu::ScsiCommand {
        immediate: false,
        final_bit: true,
        read: false,
        write: true,
        attribute: 1,
        lun: [0; 8],
        initiator_task_tag: itt,
        expected_data_transfer_bytes: bytes,
        cmd_sn: client.cmd_sn,
        exp_stat_sn: client.exp_stat_sn,
        cdb,
    });
    client.send(&command, immediate);
    client.cmd_sn += 1;
    itt
}

/// The SCSI status of the next response, with its task tag.
fn next_status(client: &mut RawClient) -> (u32, u8) {
    let received = client.receive().expect("a SCSI response");
    let Header::ScsiResponse(response) = received.header else {
        panic!("expected a SCSI Response, got {:?}", received.header);
    };
    (response.initiator_task_tag, response.status)
}

/// Write data held across commands is bounded: a write past the budget is
/// answered TASK SET FULL at once (initiators retry it), and the budget
/// comes back when the writes holding it are done.
#[test]
fn writes_past_the_write_buffer_budget_get_task_set_full_until_it_drains() {
    let server = open_server(|config| {
        config.limits.max_write_transfer_bytes = 64 * 1024;
        config.limits.write_buffers_max_bytes = 64 * 1024;
        config.limits.session_write_buffers_max_bytes = 64 * 1024;
    });
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    *server.disk.delay.lock() = Duration::from_millis(400);
    let held = send_write(&mut client, 0, &[1u8; 48 * 1024]);
    let refused = send_write(&mut client, 200, &[2u8; 32 * 1024]);

    assert_eq!(next_status(&mut client), (refused, 0x28));
    assert_eq!(next_status(&mut client), (held, 0x00));
    *server.disk.delay.lock() = Duration::ZERO;
    let again = send_write(&mut client, 200, &[3u8; 32 * 1024]);
    assert_eq!(next_status(&mut client), (again, 0x00));
    assert_eq!(server.disk.read_bytes(200 * 512, 4), vec![3u8; 4]);
    assert_eq!(server.disk.read_bytes(0, 4), vec![1u8; 4]);
}

/// A session runs at most `session_pool_commands_max` commands on the
/// blocking pool at once; the rest wait their turn and are all answered.
/// (One session could take every thread of the pool, which other sessions
/// and NBD share.)
#[test]
fn a_session_runs_no_more_than_its_share_of_the_pool_at_once() {
    let server = open_server(|config| {
        config.limits.session_pool_commands_max = 2;
    });
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID_A);
    *server.disk.delay.lock() = Duration::from_millis(100);
    let mut sent: Vec<u32> = (0..6)
        .map(|_| send_no_data_command(&mut client, 1))
        .collect();

    let mut answered: Vec<u32> = (0..6).map(|_| next_status(&mut client).0).collect();

    sent.sort_unstable();
    answered.sort_unstable();
    assert_eq!(answered, sent);
    assert_eq!(server.disk.most_running.load(Ordering::SeqCst), 2);
}
