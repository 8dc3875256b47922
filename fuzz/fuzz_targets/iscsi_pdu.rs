//! iSCSI PDUs as a target reads them off the wire: the input is one flags byte (header
//! digest, data digest, what to do with an oversized data segment, a small or large
//! MaxRecvDataSegmentLength) then a byte stream read PDU by PDU with
//! `lacuna_iscsi::pdu::read_pdu`.
//!
//! Checked beyond "no panic": every BHS that parses re-encodes to a BHS that parses to the
//! same header, and encoding is then stable; every PDU read re-encodes with
//! `encode_pdu` (with the same digests) into bytes that read back as the same PDU; AHS
//! segments re-encode to the same segments; LUN fields decode and re-encode consistently.
#![no_main]

use lacuna_fuzz::complete_now;
use lacuna_iscsi::pdu::{self, Digests, Header, Oversized, RawPdu, ReadOutcome, BHS_LEN_BYTES};
use lacuna_scsi::lun::Lun;
use libfuzzer_sys::fuzz_target;

/// PDUs read from one input at most.
const MAX_PDUS: usize = 64;

fn check_header_round_trip(raw: &RawPdu) -> Option<Header> {
    let header = Header::parse(&raw.bhs).ok()?;
    let encoded = header.encode(raw.ahs.len(), raw.data.len() as u32);
    let reparsed = Header::parse(&encoded).expect("an encoded header parses");
    assert_eq!(reparsed, header, "BHS round trip changed the header");
    assert_eq!(
        reparsed.encode(raw.ahs.len(), raw.data.len() as u32),
        encoded,
        "encoding is not stable"
    );
    assert_eq!(pdu::ahs_len_bytes(&encoded), raw.ahs.len());
    assert_eq!(
        pdu::data_segment_len_bytes(&encoded) as usize,
        raw.data.len()
    );
    Some(header)
}

fn check_pdu_round_trip(header: &Header, raw: &RawPdu, digests: Digests) {
    let bytes = pdu::encode_pdu(header, &raw.ahs, &raw.data, digests);
    let mut reader = &bytes[..];
    let read = complete_now(pdu::read_pdu(
        &mut reader,
        digests,
        u32::MAX,
        Oversized::Fail,
    ))
    .expect("an encoded PDU reads back");
    let ReadOutcome::Pdu(again) = read else {
        panic!("an encoded PDU read back as oversized");
    };
    assert!(
        reader.is_empty(),
        "encode_pdu wrote bytes read_pdu did not consume"
    );
    assert_eq!(again.ahs, raw.ahs);
    assert_eq!(again.data, raw.data);
    assert_eq!(Header::parse(&again.bhs).ok().as_ref(), Some(header));
}

fn check_ahs(ahs: &[u8]) {
    let Ok(segments) = pdu::parse_ahs(ahs) else {
        return;
    };
    for segment in segments {
        if segment.specific.len() + 1 > usize::from(u16::MAX) {
            continue;
        }
        let encoded = pdu::encode_ahs(segment.ahs_type, segment.specific);
        let reparsed = pdu::parse_ahs(&encoded).expect("an encoded AHS parses");
        assert_eq!(reparsed.len(), 1);
        // The specific bytes may gain zero padding, never lose or change bytes.
        assert_eq!(reparsed[0].ahs_type, segment.ahs_type);
        assert!(reparsed[0].specific.starts_with(segment.specific));
    }
}

fn check_lun(bhs: &[u8; BHS_LEN_BYTES]) {
    let lun = Lun(bhs[8..16].try_into().unwrap());
    // What a LUN addresses survives encode → decode, and the canonical form is settled.
    if let Some(address) = lun.address() {
        assert_eq!(
            Lun::from(address).address(),
            Some(address),
            "LUN {lun} round trip"
        );
    }
    assert_eq!(lun.canonical().canonical(), lun.canonical(), "LUN {lun}");
}

fuzz_target!(|input: &[u8]| {
    let Some((&flags, mut stream)) = input.split_first() else {
        return;
    };
    let digests = Digests {
        header: flags & 1 != 0,
        data: flags & 2 != 0,
    };
    let oversized = if flags & 4 != 0 {
        Oversized::Fail
    } else {
        Oversized::Skip
    };
    let max_data_bytes = if flags & 8 != 0 { 8192 } else { 512 };
    for _ in 0..MAX_PDUS {
        let before = stream.len();
        let read = complete_now(pdu::read_pdu(
            &mut stream,
            digests,
            max_data_bytes,
            oversized,
        ));
        match read {
            Ok(ReadOutcome::Pdu(raw)) => {
                assert!(raw.data.len() <= max_data_bytes as usize);
                check_lun(&raw.bhs);
                check_ahs(&raw.ahs);
                if let Some(header) = check_header_round_trip(&raw) {
                    check_pdu_round_trip(&header, &raw, digests);
                }
            }
            Ok(ReadOutcome::DataSegmentTooLong { len_bytes, .. }) => {
                assert_eq!(oversized, Oversized::Skip);
                assert!(len_bytes > max_data_bytes);
            }
            Err(_) => return,
        }
        assert!(stream.len() < before, "read_pdu consumed nothing");
    }
});
