//! Random PDUs against a live target: whatever a logged-in initiator sends, the target
//! answers or closes that connection, and keeps serving new sessions.

mod common;

use common::*;
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn random_pdus_never_take_the_target_down(
        pdus in proptest::collection::vec(
            (proptest::collection::vec(any::<u8>(), 48), proptest::collection::vec(any::<u8>(), 0..64)),
            1..6,
        ),
        opcode_bias in proptest::collection::vec(
            prop_oneof![Just(0x00u8), Just(0x01), Just(0x02), Just(0x04), Just(0x05), Just(0x06), Just(0x10), any::<u8>()],
            6,
        ),
    ) {
        let server = TestServer::start();
        let mut client = RawClient::connect(server.portals[0]);
        client.stream.set_read_timeout(Some(std::time::Duration::from_millis(50))).unwrap();
        client.login_normal(INITIATOR_IQN, [0x80, 0, 0, 0, 0, 1]);
        for (index, (mut bhs, data)) in pdus.into_iter().enumerate() {
            // Mostly real opcodes with a sane data length, so the fuzz reaches the handlers.
            bhs[0] = (bhs[0] & 0x40) | (opcode_bias[index] & 0x3f);
            bhs[4] = 0;
            bhs[5..8].copy_from_slice(&(data.len() as u32).to_be_bytes()[1..4]);
            let mut bytes = bhs.clone();
            bytes.extend_from_slice(&data);
            bytes.resize(bytes.len() + lacuna_iscsi::pdu::padding_len_bytes(data.len()), 0);
            use std::io::Write;
            if client.stream.write_all(&bytes).is_err() {
                break;
            }
            while client.receive().is_some() {}
        }
        drop(client);
        let mut fresh = RawClient::connect(server.portals[0]);
        fresh.login_normal(INITIATOR_IQN, [0x80, 0, 0, 0, 0, 2]);
        prop_assert!(fresh.ping().is_some());
        let replies = fresh.scsi_command(&[0x12, 0, 0, 0, 36, 0], 36, &[]);
        prop_assert_eq!(&replies[0].data[8..14], b"LACUNA");
    }
}
