//! The login phase of one connection (RFC 7143 §6): security stage (CHAP or none),
//! operational parameter negotiation, and the transition to full feature phase.
//!
//! Why a pure state machine: login is where an unauthenticated peer talks to the target, so
//! every step is checked here without sockets or time, and the connection code only moves
//! PDUs. Each failure maps to the status class/detail the RFC names for it.

use crate::chap::{self, Challenge};
use crate::config::{TargetConfig, PORTAL_GROUP_TAG};
use crate::pdu::{LoginRequest, DATA_SEGMENT_MAX_BYTES};
use crate::policy::{AccessPolicy, ChapRequirement};
use crate::text::{self, Answer, Pairs};

pub const STAGE_SECURITY: u8 = 0;
pub const STAGE_OPERATIONAL: u8 = 1;
pub const STAGE_FULL_FEATURE: u8 = 3;
/// Data segment limit during login (RFC 7143 §13.12: MaxRecvDataSegmentLength applies only
/// after login; 8192 is the default both sides assume until then).
pub const LOGIN_DATA_SEGMENT_MAX_BYTES: u32 = 8192;

/// Login status class and detail (RFC 7143 §11.13.5).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoginStatus {
    pub class: u8,
    pub detail: u8,
}

impl LoginStatus {
    pub const SUCCESS: LoginStatus = LoginStatus {
        class: 0,
        detail: 0,
    };
    pub const INITIATOR_ERROR: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x00,
    };
    pub const AUTHENTICATION_FAILURE: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x01,
    };
    pub const AUTHORIZATION_FAILURE: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x02,
    };
    pub const NOT_FOUND: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x03,
    };
    pub const UNSUPPORTED_VERSION: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x05,
    };
    pub const TOO_MANY_CONNECTIONS: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x06,
    };
    pub const MISSING_PARAMETER: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x07,
    };
    pub const SESSION_TYPE_NOT_SUPPORTED: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x09,
    };
    pub const SESSION_DOES_NOT_EXIST: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x0a,
    };
    pub const INVALID_DURING_LOGIN: LoginStatus = LoginStatus {
        class: 2,
        detail: 0x0b,
    };
    pub const TARGET_ERROR: LoginStatus = LoginStatus {
        class: 3,
        detail: 0x00,
    };
    pub const OUT_OF_RESOURCES: LoginStatus = LoginStatus {
        class: 3,
        detail: 0x02,
    };
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SessionType {
    Discovery,
    Normal,
}

/// Operational parameters of a session after negotiation (defaults of RFC 7143 §13).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SessionParams {
    pub header_digest: bool,
    pub data_digest: bool,
    pub max_connections: u16,
    pub initial_r2t: bool,
    pub immediate_data: bool,
    /// What this target accepts in one data segment (its declared MaxRecvDataSegmentLength).
    pub max_recv_data_segment_bytes: u32,
    /// What the initiator accepts in one data segment (its declared value).
    pub max_send_data_segment_bytes: u32,
    pub max_burst_bytes: u32,
    pub first_burst_bytes: u32,
    pub default_time2wait_seconds: u16,
    pub default_time2retain_seconds: u16,
    pub max_outstanding_r2t: u16,
    pub data_pdu_in_order: bool,
    pub data_sequence_in_order: bool,
    pub error_recovery_level: u8,
}

impl SessionParams {
    pub fn rfc_defaults(max_recv_data_segment_bytes: u32) -> SessionParams {
        SessionParams {
            header_digest: false,
            data_digest: false,
            max_connections: 1,
            initial_r2t: true,
            immediate_data: true,
            max_recv_data_segment_bytes,
            max_send_data_segment_bytes: 8192,
            max_burst_bytes: 262_144,
            first_burst_bytes: 65_536,
            default_time2wait_seconds: 2,
            default_time2retain_seconds: 20,
            max_outstanding_r2t: 1,
            data_pdu_in_order: true,
            data_sequence_in_order: true,
            error_recovery_level: 0,
        }
    }
}

/// What a completed login established.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginOutcome {
    pub initiator_name: String,
    pub isid: [u8; 6],
    /// TSIH the initiator sent: 0 for a new session.
    pub tsih: u16,
    pub cid: u16,
    pub session_type: SessionType,
    pub params: SessionParams,
}

/// The target's answer to one Login Request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginReply {
    pub transit: bool,
    pub current_stage: u8,
    pub next_stage: u8,
    pub status: LoginStatus,
    pub text: Pairs,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoginStep {
    /// Send the reply and wait for the next request.
    Continue(LoginReply),
    /// Send the reply (status success, transit to full feature phase) and start the session.
    Complete(LoginReply, Box<LoginOutcome>),
    /// Send the reply (status class 2 or 3) and close the connection.
    Fail(LoginReply, String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Auth {
    /// No AuthMethod agreed yet.
    Pending,
    /// AuthMethod=CHAP agreed; waiting for CHAP_A.
    ChapAlgorithm,
    /// Challenge sent; waiting for CHAP_N/CHAP_R.
    ChapResponse(Challenge),
    /// Authenticated (or no authentication required and agreed).
    Done,
}

/// Login state of one connection.
pub struct Login<'a> {
    config: &'a TargetConfig,
    policy: &'a dyn AccessPolicy,
    first: Option<LoginRequest>,
    stage: u8,
    auth: Auth,
    requirement: ChapRequirement,
    initiator_name: String,
    session_type: SessionType,
    params: SessionParams,
    pending_text: Vec<u8>,
    declared_limits: bool,
    declared_target: bool,
}

impl<'a> Login<'a> {
    pub fn new(config: &'a TargetConfig, policy: &'a dyn AccessPolicy) -> Login<'a> {
        Login {
            config,
            policy,
            first: None,
            stage: STAGE_SECURITY,
            auth: Auth::Pending,
            requirement: ChapRequirement::None,
            initiator_name: String::new(),
            session_type: SessionType::Normal,
            params: SessionParams::rfc_defaults(config.limits.max_recv_data_segment_bytes),
            pending_text: Vec::new(),
            declared_limits: false,
            declared_target: false,
        }
    }

    /// The InitiatorName the initiator declared; empty until its first request
    /// names it. Logged with every refusal, so a failed login is traceable to
    /// the initiator whatever stage it failed in.
    pub fn initiator_name(&self) -> &str {
        &self.initiator_name
    }

    /// Handles one Login Request with its data segment.
    pub fn step(&mut self, request: &LoginRequest, data: &[u8]) -> LoginStep {
        match self.try_step(request, data) {
            Ok(step) => step,
            Err((status, why)) => {
                if status == LoginStatus::AUTHENTICATION_FAILURE {
                    self.policy.authentication_failed(&self.initiator_name);
                }
                LoginStep::Fail(
                    LoginReply {
                        transit: false,
                        current_stage: request.current_stage,
                        next_stage: 0,
                        status,
                        text: Pairs::default(),
                    },
                    why,
                )
            }
        }
    }

    fn try_step(
        &mut self,
        request: &LoginRequest,
        data: &[u8],
    ) -> Result<LoginStep, (LoginStatus, String)> {
        self.check_header(request)?;
        if self.pending_text.len() + data.len() > self.config.limits.text_max_bytes {
            return Err((LoginStatus::INITIATOR_ERROR, "login text too long".into()));
        }
        self.pending_text.extend_from_slice(data);
        if request.continue_bit {
            if request.transit {
                return Err((LoginStatus::INITIATOR_ERROR, "C and T bits both set".into()));
            }
            // More text follows: acknowledge with an empty response (RFC 7143 §11.12.2).
            return Ok(LoginStep::Continue(self.reply(
                request,
                false,
                Pairs::default(),
            )));
        }
        let text = std::mem::take(&mut self.pending_text);
        let offered = text::parse(&text, self.config.limits.text_max_bytes)
            .map_err(|error| (LoginStatus::INITIATOR_ERROR, format!("login text: {error}")))?;
        if self.first.is_none() {
            self.first_request(request, &offered)?;
        }
        let mut answer = Pairs::default();
        match request.current_stage {
            STAGE_SECURITY => self.security(&offered, &mut answer)?,
            STAGE_OPERATIONAL => {
                if self.auth != Auth::Done {
                    self.skip_security()?;
                }
                self.operational(&offered, &mut answer);
            }
            _ => return Err((LoginStatus::INITIATOR_ERROR, "invalid current stage".into())),
        }
        self.stage = request.current_stage;
        self.finish(request, answer)
    }

    fn check_header(&mut self, request: &LoginRequest) -> Result<(), (LoginStatus, String)> {
        if let Some(first) = &self.first {
            if first.isid != request.isid || first.tsih != request.tsih || first.cid != request.cid
            {
                return Err((
                    LoginStatus::INITIATOR_ERROR,
                    "ISID, TSIH or CID changed".into(),
                ));
            }
        } else if request.version_min > 0 {
            return Err((
                LoginStatus::UNSUPPORTED_VERSION,
                "version 0 not offered".into(),
            ));
        }
        let stage_ok = match request.current_stage {
            STAGE_SECURITY => self.stage == STAGE_SECURITY,
            STAGE_OPERATIONAL => true,
            _ => false,
        };
        if !stage_ok {
            return Err((LoginStatus::INITIATOR_ERROR, "invalid current stage".into()));
        }
        let next_ok = !request.transit
            || (request.next_stage > request.current_stage && request.next_stage != 2);
        if !next_ok {
            return Err((LoginStatus::INITIATOR_ERROR, "invalid next stage".into()));
        }
        Ok(())
    }

    fn first_request(
        &mut self,
        request: &LoginRequest,
        offered: &Pairs,
    ) -> Result<(), (LoginStatus, String)> {
        self.first = Some(request.clone());
        let initiator_name = offered
            .get("InitiatorName")
            .filter(|name| !name.is_empty())
            .ok_or((
                LoginStatus::MISSING_PARAMETER,
                "InitiatorName missing".into(),
            ))?;
        self.initiator_name = initiator_name.to_string();
        self.session_type = match offered.get("SessionType").unwrap_or("Normal") {
            "Normal" => SessionType::Normal,
            "Discovery" => SessionType::Discovery,
            _ => {
                return Err((
                    LoginStatus::SESSION_TYPE_NOT_SUPPORTED,
                    "SessionType".into(),
                ))
            }
        };
        if self.session_type == SessionType::Normal {
            let target_name = offered
                .get("TargetName")
                .ok_or((LoginStatus::MISSING_PARAMETER, "TargetName missing".into()))?;
            if !target_name.eq_ignore_ascii_case(&self.config.target_name) {
                return Err((
                    LoginStatus::NOT_FOUND,
                    format!("no target named {target_name}"),
                ));
            }
        }
        if !self.config.allow_unknown_initiators && !self.policy.initiator_known(initiator_name) {
            return Err((
                LoginStatus::AUTHORIZATION_FAILURE,
                format!("initiator {initiator_name} is not configured"),
            ));
        }
        self.requirement = self.policy.chap_for(initiator_name);
        Ok(())
    }

    /// The initiator went straight to the operational stage: allowed only when no
    /// authentication is required.
    fn skip_security(&mut self) -> Result<(), (LoginStatus, String)> {
        if self.requirement != ChapRequirement::None {
            return Err((LoginStatus::AUTHENTICATION_FAILURE, "CHAP required".into()));
        }
        self.auth = Auth::Done;
        Ok(())
    }

    fn security(
        &mut self,
        offered: &Pairs,
        answer: &mut Pairs,
    ) -> Result<(), (LoginStatus, String)> {
        let auth_fail = |why: String| (LoginStatus::AUTHENTICATION_FAILURE, why);
        for (key, value) in &offered.0 {
            match key.as_str() {
                "AuthMethod" => {
                    let supported: &[&str] = match self.requirement {
                        ChapRequirement::None => &["None"],
                        _ => &["CHAP"],
                    };
                    let Some(method) = text::select_from_list(value, supported) else {
                        return Err(auth_fail(format!("AuthMethod {value} not acceptable")));
                    };
                    answer.push("AuthMethod", method);
                    self.auth = if method == "CHAP" {
                        Auth::ChapAlgorithm
                    } else {
                        Auth::Done
                    };
                }
                "CHAP_A" => {
                    if self.auth != Auth::ChapAlgorithm {
                        return Err(auth_fail("CHAP_A out of sequence".into()));
                    }
                    let challenge = chap::issue_challenge(value, answer)
                        .map_err(|error| auth_fail(error.to_string()))?;
                    self.auth = Auth::ChapResponse(challenge);
                }
                "CHAP_N" | "CHAP_R" | "CHAP_I" | "CHAP_C" => {}
                _ => self.negotiate(key, value, answer),
            }
        }
        if offered.get("CHAP_N").is_some() || offered.get("CHAP_R").is_some() {
            let Auth::ChapResponse(challenge) = &self.auth else {
                return Err(auth_fail("CHAP response out of sequence".into()));
            };
            chap::verify(offered, challenge, &self.requirement, answer).map_err(|error| {
                // The error names the check that failed, never a secret or a response.
                auth_fail(format!("CHAP for {}: {error}", self.initiator_name))
            })?;
            self.auth = Auth::Done;
        }
        Ok(())
    }

    fn operational(&mut self, offered: &Pairs, answer: &mut Pairs) {
        for (key, value) in &offered.0 {
            match key.as_str() {
                "AuthMethod" | "CHAP_A" | "CHAP_N" | "CHAP_R" | "CHAP_I" | "CHAP_C" => {
                    answer.push(key, text::REJECT)
                }
                _ => self.negotiate(key, value, answer),
            }
        }
    }

    /// Negotiates one operational or declarative key and appends the answer (if any).
    fn negotiate(&mut self, key: &str, value: &str, answer: &mut Pairs) {
        const SESSION_ONLY: &[&str] = &[
            "MaxConnections",
            "InitialR2T",
            "ImmediateData",
            "MaxBurstLength",
            "FirstBurstLength",
            "MaxOutstandingR2T",
            "DataPDUInOrder",
            "DataSequenceInOrder",
        ];
        if self.session_type == SessionType::Discovery && SESSION_ONLY.contains(&key) {
            answer.push(key, text::IRRELEVANT);
            return;
        }
        let limits = &self.config.limits;
        let params = &mut self.params;
        let reply = match key {
            "InitiatorName" | "InitiatorAlias" | "TargetName" | "SessionType" => return,
            "HeaderDigest" | "DataDigest" => {
                match text::select_from_list(value, &["None", "CRC32C"]) {
                    Some(choice) => {
                        let on = choice == "CRC32C";
                        if key == "HeaderDigest" {
                            params.header_digest = on;
                        } else {
                            params.data_digest = on;
                        }
                        choice.to_string()
                    }
                    None => text::REJECT.to_string(),
                }
            }
            "MaxConnections" => number_reply(text::negotiate_min(value, 1, 1, 65535), |v| {
                params.max_connections = v as u16
            }),
            "InitialR2T" => bool_reply(text::negotiate_or(value, limits.initial_r2t), |v| {
                params.initial_r2t = v
            }),
            "ImmediateData" => bool_reply(text::negotiate_and(value, limits.immediate_data), |v| {
                params.immediate_data = v
            }),
            "MaxRecvDataSegmentLength" => {
                // Declarative: the initiator's limit for what this target sends. No answer.
                if let Answer::Agreed(v) =
                    text::declared_number(value, 512, u64::from(DATA_SEGMENT_MAX_BYTES))
                {
                    params.max_send_data_segment_bytes = v as u32;
                    return;
                }
                text::REJECT.to_string()
            }
            "MaxBurstLength" => number_reply(
                text::negotiate_min(
                    value,
                    u64::from(limits.max_burst_bytes),
                    512,
                    u64::from(DATA_SEGMENT_MAX_BYTES),
                ),
                |v| params.max_burst_bytes = v as u32,
            ),
            "FirstBurstLength" => number_reply(
                text::negotiate_min(
                    value,
                    u64::from(limits.first_burst_bytes),
                    512,
                    u64::from(DATA_SEGMENT_MAX_BYTES),
                ),
                |v| params.first_burst_bytes = v as u32,
            ),
            "DefaultTime2Wait" => number_reply(text::negotiate_max(value, 0, 0, 3600), |v| {
                params.default_time2wait_seconds = v as u16
            }),
            "DefaultTime2Retain" => number_reply(text::negotiate_min(value, 0, 0, 3600), |v| {
                params.default_time2retain_seconds = v as u16
            }),
            "MaxOutstandingR2T" => number_reply(
                text::negotiate_min(value, u64::from(limits.max_outstanding_r2t), 1, 65535),
                |v| params.max_outstanding_r2t = v as u16,
            ),
            // This target delivers Data-Out in order only, so its side of the OR is Yes.
            "DataPDUInOrder" => bool_reply(text::negotiate_or(value, true), |v| {
                params.data_pdu_in_order = v
            }),
            "DataSequenceInOrder" => bool_reply(text::negotiate_or(value, true), |v| {
                params.data_sequence_in_order = v
            }),
            "ErrorRecoveryLevel" => number_reply(text::negotiate_min(value, 0, 0, 2), |v| {
                params.error_recovery_level = v as u8
            }),
            "IFMarker" | "OFMarker" => bool_reply(text::negotiate_and(value, false), |_| {}),
            "IFMarkInt" | "OFMarkInt" => text::IRRELEVANT.to_string(),
            "TaskReporting" => text::select_from_list(value, &["RFC3720"])
                .unwrap_or(text::REJECT)
                .to_string(),
            "iSCSIProtocolLevel" => number_reply(text::negotiate_min(value, 1, 0, 31), |_| {}),
            "TargetAlias" | "TargetAddress" | "TargetPortalGroupTag" | "SendTargets" => {
                text::REJECT.to_string()
            }
            _ => text::NOT_UNDERSTOOD.to_string(),
        };
        answer.push(key, reply);
    }

    /// Decides on the transit bit and builds the reply.
    fn finish(
        &mut self,
        request: &LoginRequest,
        mut answer: Pairs,
    ) -> Result<LoginStep, (LoginStatus, String)> {
        let mut transit = request.transit;
        if request.current_stage == STAGE_SECURITY && transit {
            match &self.auth {
                Auth::Done => {}
                Auth::Pending if self.requirement == ChapRequirement::None => {
                    self.auth = Auth::Done;
                }
                Auth::Pending => {
                    return Err((LoginStatus::AUTHENTICATION_FAILURE, "CHAP required".into()))
                }
                // CHAP still running: stay in the security stage (RFC 7143 §6.2).
                Auth::ChapAlgorithm | Auth::ChapResponse(_) => transit = false,
            }
        }
        // Operational keys belong in the operational stage, or in the reply that goes from
        // security straight to full feature phase.
        let operational = request.current_stage == STAGE_OPERATIONAL
            || (transit && request.next_stage == STAGE_FULL_FEATURE);
        if operational && !self.declared_limits {
            self.declared_limits = true;
            answer.push(
                "MaxRecvDataSegmentLength",
                self.params.max_recv_data_segment_bytes,
            );
        }
        if self.session_type == SessionType::Normal && !self.declared_target {
            self.declared_target = true;
            answer.push("TargetPortalGroupTag", PORTAL_GROUP_TAG);
            if let Some(alias) = &self.config.target_alias {
                answer.push("TargetAlias", alias);
            }
        }
        let reply = self.reply(request, transit, answer);
        if transit && request.next_stage == STAGE_FULL_FEATURE {
            let mut params = self.params.clone();
            // FirstBurstLength must not exceed MaxBurstLength (RFC 7143 §13.14).
            params.first_burst_bytes = params.first_burst_bytes.min(params.max_burst_bytes);
            let first = self.first.as_ref().expect("first request recorded");
            let outcome = LoginOutcome {
                initiator_name: self.initiator_name.clone(),
                isid: first.isid,
                tsih: first.tsih,
                cid: first.cid,
                session_type: self.session_type,
                params,
            };
            return Ok(LoginStep::Complete(reply, Box::new(outcome)));
        }
        Ok(LoginStep::Continue(reply))
    }

    fn reply(&self, request: &LoginRequest, transit: bool, text: Pairs) -> LoginReply {
        LoginReply {
            transit,
            current_stage: request.current_stage,
            next_stage: if transit { request.next_stage } else { 0 },
            status: LoginStatus::SUCCESS,
            text,
        }
    }
}

fn number_reply(answer: Answer<u64>, apply: impl FnOnce(u64)) -> String {
    match answer {
        Answer::Agreed(value) => {
            apply(value);
            value.to_string()
        }
        Answer::Reject => text::REJECT.to_string(),
    }
}

fn bool_reply(answer: Answer<bool>, apply: impl FnOnce(bool)) -> String {
    match answer {
        Answer::Agreed(value) => {
            apply(value);
            text::format_boolean(value).to_string()
        }
        Answer::Reject => text::REJECT.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{ChapCredentials, OpenAccess};

    const TARGET: &str = "iqn.2024-01.org.lacuna:test";

    fn config() -> TargetConfig {
        let mut config = TargetConfig::for_array("test");
        config.allow_unknown_initiators = true;
        config
    }

    fn request(csg: u8, nsg: u8, transit: bool) -> LoginRequest {
        LoginRequest {
            transit,
            continue_bit: false,
            current_stage: csg,
            next_stage: nsg,
            version_max: 0,
            version_min: 0,
            isid: [0x80, 0, 0, 0, 0, 1],
            tsih: 0,
            initiator_task_tag: 1,
            cid: 0,
            cmd_sn: 1,
            exp_stat_sn: 0,
        }
    }

    fn text(pairs: &[(&str, &str)]) -> Vec<u8> {
        let mut out = Pairs::default();
        for (k, v) in pairs {
            out.push(k, v);
        }
        out.encode()
    }

    struct ChapPolicy(ChapRequirement);

    impl AccessPolicy for ChapPolicy {
        fn chap_for(&self, _initiator_name: &str) -> ChapRequirement {
            self.0.clone()
        }
        fn initiator_known(&self, name: &str) -> bool {
            name == "iqn.init"
        }
    }

    fn expect_continue(step: LoginStep) -> LoginReply {
        match step {
            LoginStep::Continue(reply) => reply,
            other => panic!("expected Continue, got {other:?}"),
        }
    }

    fn expect_fail(step: LoginStep) -> LoginStatus {
        match step {
            LoginStep::Fail(reply, _) => reply.status,
            other => panic!("expected Fail, got {other:?}"),
        }
    }

    #[test]
    fn no_auth_login_negotiates_operational_keys() {
        let config = config();
        let mut login = Login::new(&config, &OpenAccess);
        let first = text(&[
            ("InitiatorName", "iqn.init"),
            ("TargetName", TARGET),
            ("SessionType", "Normal"),
            ("AuthMethod", "CHAP,None"),
        ]);
        let reply = expect_continue(login.step(&request(0, 1, true), &first));
        assert!(reply.transit);
        assert_eq!(reply.text.get("AuthMethod"), Some("None"));
        assert_eq!(reply.text.get("TargetPortalGroupTag"), Some("1"));
        let ops = text(&[
            ("HeaderDigest", "CRC32C,None"),
            ("DataDigest", "None"),
            ("InitialR2T", "No"),
            ("ImmediateData", "Yes"),
            ("MaxBurstLength", "16776192"),
            ("FirstBurstLength", "262144"),
            ("MaxRecvDataSegmentLength", "65536"),
            ("MaxOutstandingR2T", "1"),
            ("ErrorRecoveryLevel", "2"),
            ("X-com.example.Foo", "1"),
            ("IFMarker", "No"),
        ]);
        let LoginStep::Complete(reply, outcome) = login.step(&request(1, 3, true), &ops) else {
            panic!("expected Complete");
        };
        assert_eq!(reply.next_stage, 3);
        assert_eq!(reply.text.get("HeaderDigest"), Some("CRC32C"));
        assert_eq!(reply.text.get("InitialR2T"), Some("No"));
        assert_eq!(reply.text.get("MaxBurstLength"), Some("1048576"));
        assert_eq!(reply.text.get("ErrorRecoveryLevel"), Some("0"));
        assert_eq!(reply.text.get("X-com.example.Foo"), Some("NotUnderstood"));
        assert_eq!(reply.text.get("MaxRecvDataSegmentLength"), Some("262144"));
        assert_eq!(outcome.params.max_send_data_segment_bytes, 65536);
        assert!(outcome.params.header_digest);
        assert!(!outcome.params.data_digest);
        assert_eq!(outcome.params.first_burst_bytes, 262144);
        assert_eq!(outcome.session_type, SessionType::Normal);
    }

    #[test]
    fn missing_or_wrong_names_fail_with_their_status() {
        let config = config();
        let mut login = Login::new(&config, &OpenAccess);
        let step = login.step(&request(0, 1, true), &text(&[("TargetName", TARGET)]));
        assert_eq!(expect_fail(step), LoginStatus::MISSING_PARAMETER);

        let mut login = Login::new(&config, &OpenAccess);
        let step = login.step(
            &request(0, 1, true),
            &text(&[("InitiatorName", "iqn.init")]),
        );
        assert_eq!(expect_fail(step), LoginStatus::MISSING_PARAMETER);

        let mut login = Login::new(&config, &OpenAccess);
        let wrong = text(&[("InitiatorName", "iqn.init"), ("TargetName", "iqn.other")]);
        assert_eq!(
            expect_fail(login.step(&request(0, 1, true), &wrong)),
            LoginStatus::NOT_FOUND
        );

        let mut login = Login::new(&config, &OpenAccess);
        let bad_type = text(&[("InitiatorName", "iqn.init"), ("SessionType", "Weird")]);
        let step = login.step(&request(0, 1, true), &bad_type);
        assert_eq!(expect_fail(step), LoginStatus::SESSION_TYPE_NOT_SUPPORTED);

        let mut login = Login::new(&config, &OpenAccess);
        let mut old = request(0, 1, true);
        old.version_min = 1;
        old.version_max = 2;
        let names = text(&[("InitiatorName", "iqn.init"), ("TargetName", TARGET)]);
        assert_eq!(
            expect_fail(login.step(&old, &names)),
            LoginStatus::UNSUPPORTED_VERSION
        );
    }

    #[test]
    fn unknown_initiator_gets_authorization_failure() {
        let mut config = config();
        config.allow_unknown_initiators = false;
        let policy = ChapPolicy(ChapRequirement::None);
        let mut login = Login::new(&config, &policy);
        let names = text(&[("InitiatorName", "iqn.stranger"), ("TargetName", TARGET)]);
        let step = login.step(&request(0, 1, true), &names);
        assert_eq!(expect_fail(step), LoginStatus::AUTHORIZATION_FAILURE);
    }

    fn chap_login(secret: &str, requirement: ChapRequirement) -> LoginStep {
        let config = config();
        let policy = ChapPolicy(requirement);
        let mut login = Login::new(&config, &policy);
        let first = text(&[
            ("InitiatorName", "iqn.init"),
            ("TargetName", TARGET),
            ("AuthMethod", "CHAP,None"),
        ]);
        let reply = expect_continue(login.step(&request(0, 1, false), &first));
        assert_eq!(reply.text.get("AuthMethod"), Some("CHAP"));
        let reply = expect_continue(login.step(&request(0, 1, false), &text(&[("CHAP_A", "5")])));
        let identifier = reply.text.get("CHAP_I").unwrap().parse::<u8>().unwrap();
        let challenge = chap::decode_binary(reply.text.get("CHAP_C").unwrap(), 64).unwrap();
        let response =
            chap::encode_binary(&chap::response(identifier, secret.as_bytes(), &challenge));
        let answer = text(&[("CHAP_N", "user"), ("CHAP_R", &response)]);
        login.step(&request(0, 1, true), &answer)
    }

    #[test]
    fn chap_one_way_succeeds_with_the_secret_and_fails_02_01_without() {
        let requirement = ChapRequirement::OneWay {
            initiator: ChapCredentials {
                user: "user".into(),
                secret: b"good-secret-1".to_vec(),
            },
        };
        let reply = expect_continue(chap_login("good-secret-1", requirement.clone()));
        assert!(reply.transit);
        assert_eq!(reply.next_stage, 1);
        let status = expect_fail(chap_login("bad-secret", requirement));
        assert_eq!(status, LoginStatus::AUTHENTICATION_FAILURE);
    }

    #[test]
    fn chap_required_but_initiator_offers_none_or_skips_security() {
        let config = config();
        let policy = ChapPolicy(ChapRequirement::OneWay {
            initiator: ChapCredentials {
                user: "user".into(),
                secret: b"good-secret-1".to_vec(),
            },
        });
        let mut login = Login::new(&config, &policy);
        let first = text(&[
            ("InitiatorName", "iqn.init"),
            ("TargetName", TARGET),
            ("AuthMethod", "None"),
        ]);
        let step = login.step(&request(0, 1, true), &first);
        assert_eq!(expect_fail(step), LoginStatus::AUTHENTICATION_FAILURE);

        let mut login = Login::new(&config, &policy);
        let names = text(&[("InitiatorName", "iqn.init"), ("TargetName", TARGET)]);
        let step = login.step(&request(1, 3, true), &names);
        assert_eq!(expect_fail(step), LoginStatus::AUTHENTICATION_FAILURE);
    }

    #[test]
    fn discovery_session_marks_session_keys_irrelevant() {
        let config = config();
        let mut login = Login::new(&config, &OpenAccess);
        let first = text(&[
            ("InitiatorName", "iqn.init"),
            ("SessionType", "Discovery"),
            ("InitialR2T", "No"),
            ("HeaderDigest", "None"),
        ]);
        let LoginStep::Complete(reply, outcome) = login.step(&request(1, 3, true), &first) else {
            panic!("expected Complete");
        };
        assert_eq!(reply.text.get("InitialR2T"), Some("Irrelevant"));
        assert_eq!(reply.text.get("HeaderDigest"), Some("None"));
        assert_eq!(reply.text.get("TargetPortalGroupTag"), None);
        assert_eq!(outcome.session_type, SessionType::Discovery);
    }

    #[test]
    fn continuation_text_is_joined_before_parsing() {
        let config = config();
        let mut login = Login::new(&config, &OpenAccess);
        let whole = text(&[("InitiatorName", "iqn.init"), ("TargetName", TARGET)]);
        let mut part = request(1, 3, false);
        part.continue_bit = true;
        let reply = expect_continue(login.step(&part, &whole[..10]));
        assert!(reply.text.is_empty());
        assert!(matches!(
            login.step(&request(1, 3, true), &whole[10..]),
            LoginStep::Complete(..)
        ));
    }

    #[test]
    fn changing_isid_mid_login_is_an_initiator_error() {
        let config = config();
        let mut login = Login::new(&config, &OpenAccess);
        let names = text(&[("InitiatorName", "iqn.init"), ("TargetName", TARGET)]);
        expect_continue(login.step(&request(1, 3, false), &names));
        let mut changed = request(1, 3, true);
        changed.isid[5] = 9;
        assert_eq!(
            expect_fail(login.step(&changed, &[])),
            LoginStatus::INITIATOR_ERROR
        );
    }

    mod fuzz {
        use super::*;
        use proptest::prelude::*;

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(500))]

            /// Arbitrary request flags and text never panic the state machine; a login only
            /// completes with the session keys it requires.
            #[test]
            fn login_steps_are_total(
                steps in proptest::collection::vec(
                    (any::<u8>(), any::<bool>(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..200)),
                    1..6,
                ),
            ) {
                let config = config();
                let mut login = Login::new(&config, &OpenAccess);
                for (stages, transit, continue_bit, data) in steps {
                    let mut request = request((stages >> 2) & 3, stages & 3, transit);
                    request.continue_bit = continue_bit;
                    match login.step(&request, &data) {
                        LoginStep::Complete(_, outcome) => {
                            prop_assert!(!outcome.initiator_name.is_empty());
                            break;
                        }
                        LoginStep::Fail(reply, _) => {
                            prop_assert!(reply.status.class >= 2);
                            break;
                        }
                        LoginStep::Continue(_) => {}
                    }
                }
            }
        }
    }
}
