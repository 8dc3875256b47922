//! Text keys (RFC 7143 §6.1–6.2): `key=value` pairs separated by NUL bytes, and the
//! negotiation rule of each value type.
//!
//! Why the rules are small pure functions: login, text requests and tests share them, and
//! each rule (boolean AND/OR, numerical min/max, list selection) is exactly one function
//! that can be checked against the RFC's tables. The parser is bounded: key names of at most
//! 63 bytes, values of at most 8192 bytes, and a caller-supplied total.

use std::fmt;

/// Longest key name (RFC 7143 §6.1).
pub const KEY_NAME_MAX_BYTES: usize = 63;
/// Longest value this target accepts (the longest the RFC allows for any key: CHAP binary
/// values and TargetAddress lists fit).
pub const VALUE_MAX_BYTES: usize = 8192;
/// Most pairs accepted in one text exchange.
pub const PAIRS_MAX_COUNT: usize = 256;

pub const REJECT: &str = "Reject";
pub const IRRELEVANT: &str = "Irrelevant";
pub const NOT_UNDERSTOOD: &str = "NotUnderstood";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error("text of {len_bytes} bytes exceeds the limit of {max_bytes} bytes")]
    TooLong { len_bytes: usize, max_bytes: usize },
    #[error("more than {PAIRS_MAX_COUNT} keys")]
    TooManyPairs,
    #[error("a key=value pair has no '='")]
    MissingEquals,
    #[error("key name is empty, too long or has invalid characters")]
    BadKeyName,
    #[error("value of key {0} is too long")]
    ValueTooLong(String),
    #[error("text is not UTF-8")]
    NotUtf8,
}

/// Ordered key=value pairs (order matters for responses and for the RFC's "first in list").
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Pairs(pub Vec<(String, String)>);

impl Pairs {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn push(&mut self, key: &str, value: impl fmt::Display) {
        self.0.push((key.to_string(), value.to_string()));
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// NUL-terminated `key=value` encoding for a data segment.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for (key, value) in &self.0 {
            out.extend_from_slice(key.as_bytes());
            out.push(b'=');
            out.extend_from_slice(value.as_bytes());
            out.push(0);
        }
        out
    }
}

/// Parses a complete text (all continuation PDUs concatenated). Trailing NULs and empty
/// entries are tolerated; a missing final NUL is tolerated too (some initiators omit it).
pub fn parse(text: &[u8], max_bytes: usize) -> Result<Pairs, TextError> {
    if text.len() > max_bytes {
        return Err(TextError::TooLong {
            len_bytes: text.len(),
            max_bytes,
        });
    }
    let mut pairs = Pairs::default();
    for entry in text.split(|byte| *byte == 0) {
        if entry.is_empty() {
            continue;
        }
        if pairs.0.len() == PAIRS_MAX_COUNT {
            return Err(TextError::TooManyPairs);
        }
        let entry = std::str::from_utf8(entry).map_err(|_| TextError::NotUtf8)?;
        let (key, value) = entry.split_once('=').ok_or(TextError::MissingEquals)?;
        if !key_name_valid(key) {
            return Err(TextError::BadKeyName);
        }
        if value.len() > VALUE_MAX_BYTES {
            return Err(TextError::ValueTooLong(key.to_string()));
        }
        pairs.0.push((key.to_string(), value.to_string()));
    }
    Ok(pairs)
}

/// Key names: letters, digits, '.', '-', '+', '@', '_' (RFC 7143 §6.1), 1..=63 bytes.
fn key_name_valid(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= KEY_NAME_MAX_BYTES
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-+@".contains(&b))
}

/// Parses `Yes`/`No`.
pub fn parse_boolean(value: &str) -> Option<bool> {
    match value {
        "Yes" => Some(true),
        "No" => Some(false),
        _ => None,
    }
}

pub fn format_boolean(value: bool) -> &'static str {
    if value {
        "Yes"
    } else {
        "No"
    }
}

/// Parses a decimal, hex (0x) or base64 (0b) numerical value (RFC 7143 §6.1: numbers are
/// decimal or hex; regular-binary values may be given in any encoding).
pub fn parse_number(value: &str) -> Option<u64> {
    if let Some(hex) = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        if hex.is_empty() || hex.len() > 16 {
            return None;
        }
        return u64::from_str_radix(hex, 16).ok();
    }
    if value.is_empty() || value.len() > 20 || !value.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    value.parse().ok()
}

/// Outcome of negotiating one key: the value to answer with, or one of the special answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answer<T> {
    Agreed(T),
    /// The offer is malformed or out of range: answer `Reject`, keep the default.
    Reject,
}

/// Boolean with the AND function (e.g. ImmediateData): the result is `Yes` only if both
/// sides say `Yes`.
pub fn negotiate_and(offer: &str, ours: bool) -> Answer<bool> {
    match parse_boolean(offer) {
        Some(theirs) => Answer::Agreed(theirs && ours),
        None => Answer::Reject,
    }
}

/// Boolean with the OR function (e.g. InitialR2T): the result is `Yes` if either side says
/// `Yes`.
pub fn negotiate_or(offer: &str, ours: bool) -> Answer<bool> {
    match parse_boolean(offer) {
        Some(theirs) => Answer::Agreed(theirs || ours),
        None => Answer::Reject,
    }
}

/// Numerical with the minimum function (e.g. MaxBurstLength). Offers outside `[lo, hi]` are
/// rejected.
pub fn negotiate_min(offer: &str, ours: u64, lo: u64, hi: u64) -> Answer<u64> {
    assert!(lo <= ours && ours <= hi);
    match parse_number(offer) {
        Some(theirs) if (lo..=hi).contains(&theirs) => Answer::Agreed(theirs.min(ours)),
        _ => Answer::Reject,
    }
}

/// Numerical with the maximum function (DefaultTime2Wait).
pub fn negotiate_max(offer: &str, ours: u64, lo: u64, hi: u64) -> Answer<u64> {
    assert!(lo <= ours && ours <= hi);
    match parse_number(offer) {
        Some(theirs) if (lo..=hi).contains(&theirs) => Answer::Agreed(theirs.max(ours)),
        _ => Answer::Reject,
    }
}

/// Declarative numerical value (MaxRecvDataSegmentLength): each side states its own; no
/// result is computed, the value only has to be in range.
pub fn declared_number(offer: &str, lo: u64, hi: u64) -> Answer<u64> {
    match parse_number(offer) {
        Some(theirs) if (lo..=hi).contains(&theirs) => Answer::Agreed(theirs),
        _ => Answer::Reject,
    }
}

/// List: the responder picks the first value of the offer it supports (RFC 7143 §6.2.1).
/// `None` when nothing in the offer is acceptable (answer `Reject`).
pub fn select_from_list<'a>(offer: &'a str, supported: &[&str]) -> Option<&'a str> {
    offer
        .split(',')
        .find(|candidate| supported.contains(candidate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_encodes_pairs_in_order() {
        let pairs = parse(b"InitiatorName=iqn.x\0SessionType=Normal\0\0", 1024).unwrap();
        assert_eq!(pairs.get("InitiatorName"), Some("iqn.x"));
        assert_eq!(pairs.0[1].0, "SessionType");
        assert_eq!(pairs.encode(), b"InitiatorName=iqn.x\0SessionType=Normal\0");
        // Values may contain '='.
        let pairs = parse(b"CHAP_R=0b==\0", 1024).unwrap();
        assert_eq!(pairs.get("CHAP_R"), Some("0b=="));
    }

    #[test]
    fn rejects_malformed_text() {
        assert_eq!(parse(b"novalue\0", 64), Err(TextError::MissingEquals));
        assert_eq!(parse(b"=x\0", 64), Err(TextError::BadKeyName));
        assert_eq!(parse(b"bad key=x\0", 64), Err(TextError::BadKeyName));
        let long_key = format!("{}=1", "K".repeat(64));
        assert_eq!(parse(long_key.as_bytes(), 1024), Err(TextError::BadKeyName));
        assert!(matches!(
            parse(&[b'a'; 100], 64),
            Err(TextError::TooLong { .. })
        ));
        assert_eq!(parse(b"A=\xff\0", 64), Err(TextError::NotUtf8));
        let many: Vec<u8> = (0..=PAIRS_MAX_COUNT)
            .flat_map(|_| b"A=1\0".to_vec())
            .collect();
        assert_eq!(parse(&many, 1 << 20), Err(TextError::TooManyPairs));
    }

    #[test]
    fn boolean_functions_follow_rfc_tables() {
        assert_eq!(negotiate_and("Yes", true), Answer::Agreed(true));
        assert_eq!(negotiate_and("Yes", false), Answer::Agreed(false));
        assert_eq!(negotiate_and("No", true), Answer::Agreed(false));
        assert_eq!(negotiate_or("No", false), Answer::Agreed(false));
        assert_eq!(negotiate_or("No", true), Answer::Agreed(true));
        assert_eq!(negotiate_or("Yes", false), Answer::Agreed(true));
        assert_eq!(negotiate_or("yes", false), Answer::Reject);
    }

    #[test]
    fn numerical_functions_clamp_and_reject_out_of_range() {
        assert_eq!(
            negotiate_min("262144", 65536, 512, 16_777_215),
            Answer::Agreed(65536)
        );
        assert_eq!(
            negotiate_min("4096", 65536, 512, 16_777_215),
            Answer::Agreed(4096)
        );
        assert_eq!(negotiate_min("100", 65536, 512, 16_777_215), Answer::Reject);
        assert_eq!(
            negotiate_min("0x1000", 65536, 512, 16_777_215),
            Answer::Agreed(4096)
        );
        assert_eq!(
            negotiate_min("12ab", 65536, 512, 16_777_215),
            Answer::Reject
        );
        assert_eq!(negotiate_max("2", 5, 0, 3600), Answer::Agreed(5));
        assert_eq!(negotiate_max("20", 5, 0, 3600), Answer::Agreed(20));
        assert_eq!(negotiate_max("3601", 5, 0, 3600), Answer::Reject);
        assert_eq!(
            declared_number("8192", 512, 16_777_215),
            Answer::Agreed(8192)
        );
        assert_eq!(declared_number("", 512, 16_777_215), Answer::Reject);
        assert_eq!(parse_number("99999999999999999999999"), None);
    }

    #[test]
    fn list_selection_takes_the_first_supported_offer() {
        assert_eq!(
            select_from_list("CRC32C,None", &["None", "CRC32C"]),
            Some("CRC32C")
        );
        assert_eq!(
            select_from_list("None,CRC32C", &["None", "CRC32C"]),
            Some("None")
        );
        assert_eq!(
            select_from_list("KRB5,CHAP", &["CHAP", "None"]),
            Some("CHAP")
        );
        assert_eq!(select_from_list("KRB5,SRP", &["CHAP", "None"]), None);
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(2000))]

            #[test]
            fn parse_is_total_and_bounded(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
                if let Ok(pairs) = parse(&bytes, 1024) {
                    prop_assert!(bytes.len() <= 1024);
                    prop_assert!(pairs.0.len() <= PAIRS_MAX_COUNT);
                    for (key, value) in &pairs.0 {
                        prop_assert!(!key.is_empty() && key.len() <= KEY_NAME_MAX_BYTES);
                        prop_assert!(value.len() <= VALUE_MAX_BYTES);
                    }
                    // Encoding and parsing again gives the same pairs.
                    prop_assert_eq!(parse(&pairs.encode(), 4096).unwrap(), pairs);
                }
            }

            #[test]
            fn negotiation_rules_are_total(offer in ".{0,24}", ours in 512u64..65536) {
                let _ = negotiate_and(&offer, true);
                let _ = negotiate_or(&offer, false);
                if let Answer::Agreed(value) = negotiate_min(&offer, ours, 512, 16_777_215) {
                    prop_assert!(value <= ours && value >= 512);
                }
                if let Answer::Agreed(value) = negotiate_max(&offer, 2, 0, 3600) {
                    prop_assert!((2..=3600).contains(&value));
                }
                let _ = select_from_list(&offer, &["None", "CRC32C"]);
            }
        }
    }
}
