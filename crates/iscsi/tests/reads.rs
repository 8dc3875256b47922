//! Where the target runs READs: small ones on the connection's own task when
//! their data is in memory, and on threads that may wait when it is not, so a
//! read from a slow disk does not hold up the commands behind it.

mod common;

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use common::*;
use lacuna_iscsi::pdu::{self, Header};

const ISID: [u8; 6] = [0x80, 0, 0, 0, 0, 0x1c];
const COLD_READ_DELAY: Duration = Duration::from_millis(400);

fn read10(lba: u32, blocks: u16) -> [u8; 10] {
    let mut cdb = [0x28, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    cdb[2..6].copy_from_slice(&lba.to_be_bytes());
    cdb[7..9].copy_from_slice(&blocks.to_be_bytes());
    cdb
}

/// Sends a READ (10) without waiting for its answer; returns its task tag.
fn send_read(client: &mut RawClient, lba: u32, blocks: u16) -> u32 {
    let mut cdb = [0u8; 16];
    cdb[..10].copy_from_slice(&read10(lba, blocks));
    let itt = client.next_itt();
    let header = Header::ScsiCommand(pdu::ScsiCommand {
        immediate: false,
        final_bit: true,
        read: true,
        write: false,
        attribute: 1,
        lun: [0; 8],
        initiator_task_tag: itt,
        expected_data_transfer_bytes: u32::from(blocks) * BLOCK_BYTES as u32,
        cmd_sn: client.cmd_sn,
        exp_stat_sn: client.exp_stat_sn,
        cdb,
    });
    client.send(&header, &[]);
    client.cmd_sn += 1;
    itt
}

/// Receives Data-In until `count` commands have their status: (tag, data) in
/// the order they completed.
fn receive_reads(client: &mut RawClient, count: usize) -> Vec<(u32, Vec<u8>)> {
    let mut data: Vec<(u32, Vec<u8>)> = Vec::new();
    let mut done = Vec::new();
    while done.len() < count {
        let received = client.receive().expect("a Data-In within the timeout");
        let Header::DataIn(data_in) = &received.header else {
            panic!("expected Data-In, got {:?}", received.header);
        };
        let itt = data_in.initiator_task_tag;
        match data.iter_mut().find(|(tag, _)| *tag == itt) {
            Some((_, bytes)) => bytes.extend_from_slice(&received.data),
            None => data.push((itt, received.data.clone())),
        }
        if data_in.status_present {
            assert_eq!(data_in.status, 0, "READ {itt:#x} failed");
            let position = data.iter().position(|(tag, _)| *tag == itt).unwrap();
            done.push(data.remove(position));
        }
    }
    done
}

#[test]
fn a_read_from_a_slow_disk_does_not_hold_up_the_reads_behind_it() {
    let server = TestServer::start();
    let hot = vec![0xa5u8; 8 * BLOCK_BYTES];
    let cold = vec![0x5au8; 8 * BLOCK_BYTES];
    {
        let mut client = RawClient::connect(server.portals[0]);
        client.login_normal(INITIATOR_IQN, ISID);
        for (lba, data) in [(1024u32, &hot), (0, &cold)] {
            let mut cdb = read10(lba, 8);
            cdb[0] = 0x2a;
            let replies = client.scsi_command(&cdb, 0, data);
            let Header::ScsiResponse(response) = &replies.last().unwrap().header else {
                panic!("expected a SCSI Response");
            };
            assert_eq!(response.status, 0);
        }
    }
    *server.disk.cold.lock() = Some((0, 8));
    *server.disk.cold_read_delay.lock() = COLD_READ_DELAY;
    let mut client = RawClient::connect(server.portals[0]);
    client.login_normal(INITIATOR_IQN, ISID);
    let started = Instant::now();
    let cold_itt = send_read(&mut client, 0, 8);
    let hot_itts: Vec<u32> = (0..4).map(|_| send_read(&mut client, 1024, 8)).collect();
    let completed = receive_reads(&mut client, 5);
    let (last_itt, last_data) = completed.last().unwrap();
    assert_eq!(
        *last_itt, cold_itt,
        "the cold read completes last, after the reads sent behind it"
    );
    assert_eq!(*last_data, cold);
    assert!(started.elapsed() >= COLD_READ_DELAY, "the cold read waited");
    for (itt, data) in &completed[..4] {
        assert!(hot_itts.contains(itt));
        assert_eq!(*data, hot);
    }
    assert_eq!(
        server.disk.reads_from_memory.load(Ordering::SeqCst),
        4,
        "the reads of data in memory ran from memory, the cold one did not"
    );
}

#[test]
fn a_long_read_in_many_small_data_in_pdus_arrives_whole_and_in_order() {
    let server = TestServer::start();
    let mut client = RawClient::connect(server.portals[0]);
    // Data segments of 512 bytes: a 256 KiB READ takes 512 Data-In PDUs,
    // more than the writer sends in one system call.
    client.login_normal_receiving(INITIATOR_IQN, ISID, 512);
    let data: Vec<u8> = (0..256 * 1024u32).map(|i| (i * 7 % 253) as u8).collect();
    for (i, piece) in data.chunks(32 * 1024).enumerate() {
        let mut cdb = read10(4096 + i as u32 * 64, 64);
        cdb[0] = 0x2a;
        let replies = client.scsi_command(&cdb, 0, piece);
        let Header::ScsiResponse(response) = &replies.last().unwrap().header else {
            panic!("expected a SCSI Response");
        };
        assert_eq!(response.status, 0);
    }
    let itt = send_read(&mut client, 4096, 512);
    let mut read = Vec::new();
    let mut data_sns = Vec::new();
    loop {
        let received = client.receive().expect("a Data-In within the timeout");
        let Header::DataIn(data_in) = &received.header else {
            panic!("expected Data-In, got {:?}", received.header);
        };
        assert_eq!(data_in.initiator_task_tag, itt);
        assert!(received.data.len() <= 512);
        assert_eq!(data_in.buffer_offset as usize, read.len());
        data_sns.push(data_in.data_sn);
        read.extend_from_slice(&received.data);
        if data_in.status_present {
            assert_eq!(data_in.status, 0);
            break;
        }
    }
    assert_eq!(read, data);
    assert_eq!(data_sns, (0..512).collect::<Vec<u32>>());
}
