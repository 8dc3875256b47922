//! iSCSI text keys (RFC 7143 §6): the input is one byte choosing the size limit, then a
//! login/text data segment parsed with `lacuna_iscsi::text::parse`; every value is then put
//! through the value decoders the login uses (numbers, booleans, CHAP binary values).
//!
//! Checked beyond "no panic": parse → encode → parse gives the same pairs and never a
//! longer text; every accepted key name is valid; numbers and binary values that decode
//! re-encode to values that decode to the same thing, and a binary value is only accepted
//! if it is made of digits of its encoding.
#![no_main]

use lacuna_iscsi::{chap, text};
use libfuzzer_sys::fuzz_target;

const LIMITS: [usize; 4] = [64, 1024, 8192, 65536];

fn check_value(value: &str) {
    if let Some(number) = text::parse_number(value) {
        assert_eq!(text::parse_number(&number.to_string()), Some(number));
        assert_eq!(text::parse_number(&format!("0x{number:x}")), Some(number));
    }
    if let Some(flag) = text::parse_boolean(value) {
        assert_eq!(text::format_boolean(flag), value);
    }
    if let Some(bytes) = chap::decode_binary(value, chap::CHALLENGE_MAX_BYTES) {
        assert!(!bytes.is_empty() && bytes.len() <= chap::CHALLENGE_MAX_BYTES);
        let digits = &value[2..];
        let hex = value[..2].eq_ignore_ascii_case("0x");
        let valid = if hex {
            digits.bytes().all(|b| b.is_ascii_hexdigit())
        } else {
            digits
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(&b))
        };
        assert!(valid, "binary value {value:?} accepted with a non-digit");
        let encoded = chap::encode_binary(&bytes);
        assert_eq!(
            chap::decode_binary(&encoded, chap::CHALLENGE_MAX_BYTES),
            Some(bytes)
        );
    }
    if let Some(chosen) = text::select_from_list(value, &["None", "CHAP", "CRC32C", "5"]) {
        assert!(value.split(',').any(|candidate| candidate == chosen));
    }
}

fuzz_target!(|input: &[u8]| {
    let Some((&limit, data)) = input.split_first() else {
        return;
    };
    let max_bytes = LIMITS[usize::from(limit) % LIMITS.len()];
    let Ok(pairs) = text::parse(data, max_bytes) else {
        return;
    };
    assert!(pairs.0.len() <= text::PAIRS_MAX_COUNT);
    let encoded = pairs.encode();
    assert!(encoded.len() <= data.len() + 1, "encoding grew the text");
    let again = text::parse(&encoded, usize::MAX).expect("encoded pairs parse");
    assert_eq!(again, pairs, "text round trip changed the pairs");
    for (key, value) in &pairs.0 {
        assert!(!key.is_empty() && key.len() <= text::KEY_NAME_MAX_BYTES);
        assert!(value.len() <= text::VALUE_MAX_BYTES);
        assert!(pairs.get(key).is_some());
        check_value(value);
    }
});
