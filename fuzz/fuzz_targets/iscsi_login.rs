//! iSCSI login negotiation: the input is one byte choosing the access policy (open, one-way
//! CHAP, mutual CHAP, initiator unknown) then a stream of Login Request PDUs (BHS, data
//! segment, padding; no digests) read with `read_pdu`. Each BHS has its opcode forced to
//! Login Request, is parsed with `Header::parse` and handed with its data to
//! `lacuna_iscsi::login::Login::step`, as the connection does during login.
//!
//! Checked beyond "no panic": a reply that continues carries status success; a completed
//! login transits to full feature phase with negotiated parameters inside their RFC 7143
//! ranges; a failure carries an error status class; every reply's text re-parses and fits
//! a login data segment; the login ends at the first completion or failure.
#![no_main]

use lacuna_fuzz::complete_now;
use lacuna_iscsi::login::{self, Login, LoginReply, LoginStatus, LoginStep, SessionParams};
use lacuna_iscsi::pdu::{self, Digests, Header, Oversized, ReadOutcome};
use lacuna_iscsi::{text, AccessPolicy, ChapCredentials, ChapRequirement, TargetConfig};
use libfuzzer_sys::fuzz_target;

/// Login requests per input: a real login takes two to five.
const MAX_REQUESTS: usize = 16;

struct Policy {
    requirement: ChapRequirement,
    known: bool,
}

impl AccessPolicy for Policy {
    fn chap_for(&self, _initiator_name: &str) -> ChapRequirement {
        self.requirement.clone()
    }

    fn initiator_known(&self, _initiator_name: &str) -> bool {
        self.known
    }
}

fn credentials(user: &str) -> ChapCredentials {
    ChapCredentials {
        user: user.to_string(),
        secret: b"fuzz-secret-16by".to_vec(),
    }
}

fn policy(choice: u8) -> Policy {
    let requirement = match choice % 4 {
        1 => ChapRequirement::OneWay {
            initiator: credentials("initiator"),
        },
        2 => ChapRequirement::Mutual {
            initiator: credentials("initiator"),
            target: credentials("target"),
        },
        _ => ChapRequirement::None,
    };
    Policy {
        requirement,
        known: choice % 4 != 3,
    }
}

fn check_reply(reply: &LoginReply) {
    let encoded = reply.text.encode();
    assert!(
        encoded.len() <= login::LOGIN_DATA_SEGMENT_MAX_BYTES as usize,
        "reply text of {} bytes",
        encoded.len()
    );
    assert_eq!(text::parse(&encoded, usize::MAX).as_ref(), Ok(&reply.text));
    if reply.transit {
        assert!(reply.next_stage > reply.current_stage && reply.next_stage != 2);
    }
}

fn check_params(params: &SessionParams) {
    assert!((512..=pdu::DATA_SEGMENT_MAX_BYTES).contains(&params.max_recv_data_segment_bytes));
    assert!((512..=pdu::DATA_SEGMENT_MAX_BYTES).contains(&params.max_send_data_segment_bytes));
    assert!((512..=pdu::DATA_SEGMENT_MAX_BYTES).contains(&params.max_burst_bytes));
    assert!((512..=params.max_burst_bytes).contains(&params.first_burst_bytes));
    assert!(params.max_outstanding_r2t >= 1);
    assert!(params.max_connections >= 1);
    assert_eq!(params.error_recovery_level, 0, "only ERL 0 is offered");
}

fuzz_target!(|input: &[u8]| {
    let Some((&choice, mut stream)) = input.split_first() else {
        return;
    };
    let config = TargetConfig {
        allow_unknown_initiators: choice & 0x80 != 0,
        ..TargetConfig::for_array("fuzz")
    };
    let policy = policy(choice);
    let mut login = Login::new(&config, &policy);
    for _ in 0..MAX_REQUESTS {
        let read = complete_now(pdu::read_pdu(
            &mut stream,
            Digests::default(),
            login::LOGIN_DATA_SEGMENT_MAX_BYTES,
            Oversized::Fail,
        ));
        let Ok(ReadOutcome::Pdu(mut raw)) = read else {
            return;
        };
        raw.bhs[0] = 0x40 | 0x03;
        let Ok(Header::LoginRequest(request)) = Header::parse(&raw.bhs) else {
            panic!("a Login Request BHS did not parse as one");
        };
        match login.step(&request, &raw.data) {
            LoginStep::Continue(reply) => {
                check_reply(&reply);
                // A failure echoes the request's stage, whatever it was; a reply that goes on
                // is in a stage the target is in.
                assert!(reply.current_stage <= login::STAGE_OPERATIONAL);
                assert_eq!(reply.status, LoginStatus::SUCCESS);
            }
            LoginStep::Complete(reply, outcome) => {
                check_reply(&reply);
                assert_eq!(reply.status, LoginStatus::SUCCESS);
                assert!(reply.transit);
                assert_eq!(reply.next_stage, login::STAGE_FULL_FEATURE);
                assert!(!outcome.initiator_name.is_empty());
                check_params(&outcome.params);
                return;
            }
            LoginStep::Fail(reply, why) => {
                check_reply(&reply);
                assert!(
                    matches!(reply.status.class, 2 | 3),
                    "failure {why}: {reply:?}"
                );
                return;
            }
        }
    }
});
