//! Alarms (VASA `getAlarms`): conditions a host or vCenter should show,
//! raised when one begins and cleared (status Green) when it ends. The
//! provider raises the certificate's: Yellow within [`CERT_WARNING_DAYS`] of
//! its expiry, Red once expired. Kept in memory, the newest [`MAX_ALARMS`].

use std::collections::VecDeque;

use parking_lot::Mutex;

use crate::fault::Fault;

pub const MAX_ALARMS: usize = 1024;
/// Days before the provider certificate expires that it raises an alarm.
pub const CERT_WARNING_DAYS: i64 = 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlarmStatus {
    Green,
    Yellow,
    Red,
}

impl AlarmStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AlarmStatus::Green => "Green",
            AlarmStatus::Yellow => "Yellow",
            AlarmStatus::Red => "Red",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Alarm {
    pub id: u64,
    pub unix_s: u64,
    /// VASA's AlarmTypeEnum value.
    pub alarm_type: &'static str,
    pub object: Option<String>,
    pub object_type: &'static str,
    pub message_id: &'static str,
    pub message: String,
    pub status: AlarmStatus,
}

#[derive(Debug, Default)]
struct AlarmLog {
    alarms: VecDeque<Alarm>,
    next_id: u64,
    /// The status the certificate alarm last had.
    certificate: Option<AlarmStatus>,
}

#[derive(Debug, Default)]
pub struct Alarms {
    log: Mutex<AlarmLog>,
}

impl Alarms {
    fn push(log: &mut AlarmLog, mut alarm: Alarm) {
        if log.alarms.len() == MAX_ALARMS {
            log.alarms.pop_front();
        }
        log.next_id += 1;
        alarm.id = log.next_id;
        log.alarms.push_back(alarm);
    }

    /// Notes the provider certificate's expiry: an alarm when its status changes.
    pub fn check_certificate(&self, not_after_unix_s: i64, now_unix_s: i64) {
        let left_s = not_after_unix_s - now_unix_s;
        let status = if left_s <= 0 {
            AlarmStatus::Red
        } else if left_s <= CERT_WARNING_DAYS * 86_400 {
            AlarmStatus::Yellow
        } else {
            AlarmStatus::Green
        };
        let mut log = self.log.lock();
        let previous = log.certificate.replace(status);
        if previous == Some(status) || (previous.is_none() && status == AlarmStatus::Green) {
            return;
        }
        let message = match status {
            AlarmStatus::Red => "the VASA provider certificate has expired: rotate it".to_string(),
            AlarmStatus::Yellow => format!(
                "the VASA provider certificate expires in {} days: rotate it",
                left_s / 86_400
            ),
            AlarmStatus::Green => "the VASA provider certificate is valid".to_string(),
        };
        Self::push(
            &mut log,
            Alarm {
                id: 0,
                unix_s: now_unix_s.max(0) as u64,
                alarm_type: "Manageability",
                object: None,
                object_type: "StorageArray",
                message_id: "lacuna.vasa.certificate.expiry",
                message,
                status,
            },
        );
    }

    /// The alarms after `last_seen` (0: every one kept); LostAlarm when
    /// some after it are no longer kept.
    pub fn since(&self, last_seen: u64) -> Result<Vec<Alarm>, Fault> {
        let log = self.log.lock();
        let oldest = log.alarms.front().map_or(log.next_id + 1, |a| a.id);
        if last_seen > log.next_id || (last_seen != 0 && last_seen + 1 < oldest) {
            return Err(Fault::new(
                "LostAlarm",
                format!("alarms after {last_seen} are not kept: poll from -1"),
            ));
        }
        Ok(log
            .alarms
            .iter()
            .filter(|a| a.id > last_seen)
            .cloned()
            .collect())
    }

    /// Alarms that are not Green now, newest status per message.
    pub fn active(&self) -> Vec<Alarm> {
        let log = self.log.lock();
        let mut out: Vec<Alarm> = Vec::new();
        for alarm in log.alarms.iter().rev() {
            if !out.iter().any(|a| a.message_id == alarm.message_id) {
                out.push(alarm.clone());
            }
        }
        out.retain(|a| a.status != AlarmStatus::Green);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_certificate_alarm_is_raised_escalated_and_cleared_once_each() {
        let alarms = Alarms::default();
        let day = 86_400;
        alarms.check_certificate(100 * day, 0);
        assert!(
            alarms.since(0).unwrap().is_empty(),
            "a valid certificate raises nothing"
        );
        alarms.check_certificate(100 * day, 71 * day);
        alarms.check_certificate(100 * day, 72 * day);
        let raised = alarms.since(0).unwrap();
        assert_eq!(raised.len(), 1);
        assert_eq!(raised[0].status, AlarmStatus::Yellow);
        alarms.check_certificate(100 * day, 100 * day);
        assert_eq!(alarms.active()[0].status, AlarmStatus::Red);
        alarms.check_certificate(500 * day, 101 * day);
        let all = alarms.since(0).unwrap();
        assert_eq!(all.len(), 3);
        assert_eq!(all[2].status, AlarmStatus::Green);
        assert!(alarms.active().is_empty());
        assert_eq!(alarms.since(2).unwrap().len(), 1);
        assert_eq!(alarms.since(99).unwrap_err().kind, "LostAlarm");
    }
}
