//! CHAP with MD5 (RFC 1994, RFC 7143 §12.1.3): the target's side of one-way and mutual
//! authentication.
//!
//! Why its own module: the exchange has three steps spread over several login PDUs, and the
//! checks that matter for security (constant-time comparison, challenge reflection, bounded
//! binary values) deserve to be tested without a socket. Nothing here logs a secret, a
//! challenge response, or a value derived from a secret.

use base64::engine::general_purpose::{self, GeneralPurpose};
use base64::Engine as _;
use md5::{Digest, Md5};
use subtle::ConstantTimeEq;

use crate::policy::{ChapCredentials, ChapRequirement};
use crate::text::Pairs;

/// CHAP_A value of MD5 (RFC 1994 algorithm 5), the only one RFC 7143 requires.
pub const ALGORITHM_MD5: &str = "5";
/// Length of the challenges this target sends.
pub const CHALLENGE_LEN_BYTES: usize = 16;
/// Longest challenge accepted from an initiator (RFC 7143 allows up to 1024 bytes).
pub const CHALLENGE_MAX_BYTES: usize = 1024;
pub const RESPONSE_LEN_BYTES: usize = 16;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChapError {
    #[error("initiator offered no supported CHAP algorithm")]
    NoAlgorithm,
    #[error("CHAP key {0} is missing")]
    MissingKey(&'static str),
    #[error("CHAP key {0} is malformed")]
    Malformed(&'static str),
    #[error("CHAP user name does not match")]
    WrongUser,
    #[error("CHAP response does not match")]
    WrongResponse,
    #[error("initiator asked for mutual CHAP but the target has no credentials for it")]
    MutualNotConfigured,
    #[error("mutual CHAP is required but the initiator sent no challenge")]
    MutualRequired,
    #[error("initiator reflected the target's challenge")]
    ReflectedChallenge,
    #[error("mutual CHAP is configured with one secret for both directions (RFC 7143 §12.1.3 forbids it)")]
    SharedSecret,
    #[error("no random bytes: {0}")]
    Random(String),
}

/// MD5(identifier || secret || challenge).
pub fn response(identifier: u8, secret: &[u8], challenge: &[u8]) -> [u8; RESPONSE_LEN_BYTES] {
    let mut hasher = Md5::new();
    hasher.update([identifier]);
    hasher.update(secret);
    hasher.update(challenge);
    hasher.finalize().into()
}

/// Hex encoding with the `0x` prefix.
pub fn encode_binary(bytes: &[u8]) -> String {
    format!("0x{}", hex::encode(bytes))
}

/// Decodes a binary value in hex (`0x`) or base64 (`0b`) encoding, at most `max_bytes`.
pub fn decode_binary(value: &str, max_bytes: usize) -> Option<Vec<u8>> {
    let bytes = if let Some(hex) = value
        .strip_prefix("0x")
        .or_else(|| value.strip_prefix("0X"))
    {
        decode_hex(hex)?
    } else if let Some(b64) = value
        .strip_prefix("0b")
        .or_else(|| value.strip_prefix("0B"))
    {
        decode_base64(b64)?
    } else {
        return None;
    };
    (!bytes.is_empty() && bytes.len() <= max_bytes).then_some(bytes)
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() > 2 * CHALLENGE_MAX_BYTES + 1 {
        return None;
    }
    // `hex` takes 0-9, a-f and A-F only: not a sign, which `u8::from_str_radix` would
    // (the iscsi_text fuzz target once had "0x+f+f" decode). An odd digit count means a
    // leading zero was left out.
    if hex.len().is_multiple_of(2) {
        hex::decode(hex).ok()
    } else {
        hex::decode(format!("0{hex}")).ok()
    }
}

/// The standard alphabet padded to whole groups of four, as RFC 7143 §6.1 writes base64;
/// the unused low bits of a final symbol are ignored, not refused.
const BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    general_purpose::PAD.with_decode_allow_trailing_bits(true),
);

fn decode_base64(text: &str) -> Option<Vec<u8>> {
    if text.len() > 4 * CHALLENGE_MAX_BYTES / 3 + 4 {
        return None;
    }
    BASE64.decode(text).ok()
}

/// The challenge the target sent, kept until the initiator answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Challenge {
    pub identifier: u8,
    pub challenge: Vec<u8>,
}

/// Step 2: the initiator sent CHAP_A; answer with the algorithm, CHAP_I and CHAP_C.
pub fn issue_challenge(chap_a: &str, answer: &mut Pairs) -> Result<Challenge, ChapError> {
    if !chap_a
        .split(',')
        .any(|algorithm| algorithm == ALGORITHM_MD5)
    {
        return Err(ChapError::NoAlgorithm);
    }
    let mut random = [0u8; 1 + CHALLENGE_LEN_BYTES];
    getrandom::fill(&mut random).map_err(|error| ChapError::Random(error.to_string()))?;
    let challenge = Challenge {
        identifier: random[0],
        challenge: random[1..].to_vec(),
    };
    answer.push("CHAP_A", ALGORITHM_MD5);
    answer.push("CHAP_I", challenge.identifier);
    answer.push("CHAP_C", encode_binary(&challenge.challenge));
    Ok(challenge)
}

/// Step 3: check CHAP_N/CHAP_R against the requirement and, for mutual CHAP, answer the
/// initiator's CHAP_I/CHAP_C with the target's CHAP_N/CHAP_R.
pub fn verify(
    offered: &Pairs,
    sent: &Challenge,
    requirement: &ChapRequirement,
    answer: &mut Pairs,
) -> Result<(), ChapError> {
    let (initiator, target) = match requirement {
        ChapRequirement::None => return Err(ChapError::WrongUser),
        ChapRequirement::OneWay { initiator } => (initiator, None),
        ChapRequirement::Mutual { initiator, target } => (initiator, Some(target)),
    };
    let user = offered
        .get("CHAP_N")
        .ok_or(ChapError::MissingKey("CHAP_N"))?;
    let received = offered
        .get("CHAP_R")
        .ok_or(ChapError::MissingKey("CHAP_R"))?;
    let received =
        decode_binary(received, RESPONSE_LEN_BYTES).ok_or(ChapError::Malformed("CHAP_R"))?;
    let expected = response(sent.identifier, &initiator.secret, &sent.challenge);
    // Check both before answering so the two failures take the same path; each comparison
    // runs without an early exit, so timing says nothing about where a value differs.
    let user_ok = bool::from(user.as_bytes().ct_eq(initiator.user.as_bytes()));
    let response_ok = bool::from(received.ct_eq(&expected));
    if !user_ok {
        return Err(ChapError::WrongUser);
    }
    if !response_ok {
        return Err(ChapError::WrongResponse);
    }
    // A target answering with the initiator's own secret proves nothing to it:
    // whoever knows one direction could answer the other.
    if target.is_some_and(|t| bool::from(t.secret.ct_eq(&initiator.secret))) {
        return Err(ChapError::SharedSecret);
    }
    mutual_answer(offered, sent, target, answer)
}

fn mutual_answer(
    offered: &Pairs,
    sent: &Challenge,
    target: Option<&ChapCredentials>,
    answer: &mut Pairs,
) -> Result<(), ChapError> {
    let identifier = offered.get("CHAP_I");
    let challenge = offered.get("CHAP_C");
    let (identifier, challenge) = match (identifier, challenge, target) {
        (None, None, None) => return Ok(()),
        (None, None, Some(_)) => return Err(ChapError::MutualRequired),
        (Some(_), Some(_), None) => return Err(ChapError::MutualNotConfigured),
        (Some(identifier), Some(challenge), Some(_)) => (identifier, challenge),
        (None, Some(_), _) => return Err(ChapError::MissingKey("CHAP_I")),
        (Some(_), None, _) => return Err(ChapError::MissingKey("CHAP_C")),
    };
    let target = target.expect("matched above");
    let identifier = crate::text::parse_number(identifier)
        .and_then(|id| u8::try_from(id).ok())
        .ok_or(ChapError::Malformed("CHAP_I"))?;
    let challenge =
        decode_binary(challenge, CHALLENGE_MAX_BYTES).ok_or(ChapError::Malformed("CHAP_C"))?;
    if challenge == sent.challenge {
        return Err(ChapError::ReflectedChallenge);
    }
    answer.push("CHAP_N", &target.user);
    answer.push(
        "CHAP_R",
        encode_binary(&response(identifier, &target.secret, &challenge)),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn credentials(user: &str, secret: &str) -> ChapCredentials {
        ChapCredentials {
            user: user.to_string(),
            secret: secret.as_bytes().to_vec(),
        }
    }

    #[test]
    fn md5_response_matches_known_vector() {
        // MD5(0x01 || "secret" || 0x00..0x0f), computed independently with Python's hashlib.
        let challenge: Vec<u8> = (0u8..16).collect();
        assert_eq!(
            encode_binary(&response(1, b"secret", &challenge)),
            "0x740e86463bda3a4d7017d6e0fba0699d"
        );
        // RFC 1321 test vector for the empty input's neighbour: MD5("a").
        let mut hasher = Md5::new();
        hasher.update(b"a");
        let md5_a: [u8; 16] = hasher.finalize().into();
        assert_eq!(encode_binary(&md5_a), "0x0cc175b9c0f1b6a831c399e269772661");
    }

    #[test]
    fn binary_values_decode_in_hex_and_base64() {
        assert_eq!(decode_binary("0x0102ff", 16), Some(vec![1, 2, 255]));
        assert_eq!(decode_binary("0x102", 16), Some(vec![1, 2]));
        assert_eq!(decode_binary("0bAQL/", 16), Some(vec![1, 2, 255]));
        assert_eq!(decode_binary("0bAQI=", 16), Some(vec![1, 2]));
        assert_eq!(decode_binary("0bAQ==", 16), Some(vec![1]));
        assert_eq!(decode_binary("0bA===", 16), None);
        assert_eq!(decode_binary("0xzz", 16), None);
        assert_eq!(decode_binary("1234", 16), None);
        assert_eq!(decode_binary("0x", 16), None);
        assert_eq!(decode_binary("0x010203", 2), None);
    }

    /// Regression (fuzz/corpus/iscsi_text/regression-hex-sign): a sign is not a hex digit.
    #[test]
    fn hex_values_take_hex_digits_only() {
        assert_eq!(decode_binary("0x0f0+f0f", 16), None);
        assert_eq!(decode_binary("0x+f", 16), None);
        assert_eq!(decode_binary("0x-1", 16), None);
        assert_eq!(decode_binary("0x 1", 16), None);
        assert_eq!(decode_binary("0x0f0F0f", 16), Some(vec![0x0f, 0x0f, 0x0f]));
    }

    #[test]
    fn one_way_chap_accepts_the_right_secret_only() {
        let requirement = ChapRequirement::OneWay {
            initiator: credentials("alice", "twelve-chars"),
        };
        let mut answer = Pairs::default();
        let sent = issue_challenge("7,5", &mut answer).unwrap();
        assert_eq!(answer.get("CHAP_A"), Some("5"));
        assert_eq!(
            decode_binary(answer.get("CHAP_C").unwrap(), 64).unwrap(),
            sent.challenge
        );

        let mut offer = Pairs::default();
        offer.push("CHAP_N", "alice");
        offer.push(
            "CHAP_R",
            encode_binary(&response(sent.identifier, b"twelve-chars", &sent.challenge)),
        );
        assert_eq!(
            verify(&offer, &sent, &requirement, &mut Pairs::default()),
            Ok(())
        );

        let mut wrong = Pairs::default();
        wrong.push("CHAP_N", "alice");
        wrong.push(
            "CHAP_R",
            encode_binary(&response(sent.identifier, b"wrong", &sent.challenge)),
        );
        assert_eq!(
            verify(&wrong, &sent, &requirement, &mut Pairs::default()),
            Err(ChapError::WrongResponse)
        );
        let mut wrong_user = offer.clone();
        wrong_user.0[0].1 = "mallory".to_string();
        assert_eq!(
            verify(&wrong_user, &sent, &requirement, &mut Pairs::default()),
            Err(ChapError::WrongUser)
        );
    }

    #[test]
    fn mutual_chap_answers_the_initiator_challenge_and_refuses_reflection() {
        let requirement = ChapRequirement::Mutual {
            initiator: credentials("alice", "initiator-secret"),
            target: credentials("target", "target-secret-1"),
        };
        let mut answer = Pairs::default();
        let sent = issue_challenge("5", &mut answer).unwrap();
        let mut offer = Pairs::default();
        offer.push("CHAP_N", "alice");
        offer.push(
            "CHAP_R",
            encode_binary(&response(
                sent.identifier,
                b"initiator-secret",
                &sent.challenge,
            )),
        );
        offer.push("CHAP_I", 77);
        offer.push("CHAP_C", "0x00112233445566778899aabbccddeeff");
        let mut answer = Pairs::default();
        verify(&offer, &sent, &requirement, &mut answer).unwrap();
        assert_eq!(answer.get("CHAP_N"), Some("target"));
        let challenge = decode_binary("0x00112233445566778899aabbccddeeff", 64).unwrap();
        assert_eq!(
            answer.get("CHAP_R").unwrap(),
            encode_binary(&response(77, b"target-secret-1", &challenge))
        );

        let mut reflected = offer.clone();
        reflected.0[3].1 = encode_binary(&sent.challenge);
        assert_eq!(
            verify(&reflected, &sent, &requirement, &mut Pairs::default()),
            Err(ChapError::ReflectedChallenge)
        );
        let one_way_offer = Pairs(offer.0[..2].to_vec());
        assert_eq!(
            verify(&one_way_offer, &sent, &requirement, &mut Pairs::default()),
            Err(ChapError::MutualRequired)
        );

        // One secret for both directions is refused even when the answer is right.
        let shared = ChapRequirement::Mutual {
            initiator: credentials("alice", "initiator-secret"),
            target: credentials("target", "initiator-secret"),
        };
        assert_eq!(
            verify(&offer, &sent, &shared, &mut Pairs::default()),
            Err(ChapError::SharedSecret)
        );
    }

    #[test]
    fn unsupported_algorithm_is_refused() {
        assert_eq!(
            issue_challenge("6,7", &mut Pairs::default()),
            Err(ChapError::NoAlgorithm)
        );
    }

    mod fuzz {
        use super::super::*;
        use proptest::prelude::*;

        proptest! {
            #[test]
            fn decode_binary_is_total_and_bounded(value in "(0x|0b|0X|0B)?[0-9a-zA-Z+/=]{0,80}") {
                if let Some(bytes) = decode_binary(&value, 16) {
                    prop_assert!(!bytes.is_empty() && bytes.len() <= 16);
                }
            }

            #[test]
            fn hex_encoding_round_trips(bytes in proptest::collection::vec(any::<u8>(), 1..64)) {
                prop_assert_eq!(decode_binary(&encode_binary(&bytes), 64), Some(bytes));
            }
        }
    }
}
