//! SendTargets (RFC 7143 §12.3 and appendix C): the text answer that tells an initiator the
//! target's name and every portal it can be reached at.
//!
//! Why separate from the connection: the answer depends only on the configuration and the
//! portals served, so it is built and tested as plain text.

use std::net::SocketAddr;

use crate::config::PORTAL_GROUP_TAG;
use crate::text::Pairs;

/// Answer to `SendTargets=<value>`. `All` lists the target; a name lists it when it matches;
/// an empty value (allowed in normal sessions) means the session's own target.
pub fn send_targets(value: &str, target_name: &str, portals: &[SocketAddr]) -> Pairs {
    let mut answer = Pairs::default();
    let listed = value == "All" || value.is_empty() || value.eq_ignore_ascii_case(target_name);
    if !listed {
        return answer;
    }
    answer.push("TargetName", target_name);
    for portal in portals {
        answer.push(
            "TargetAddress",
            format!("{},{}", format_address(portal), PORTAL_GROUP_TAG),
        );
    }
    answer
}

/// `127.0.0.1:3260` or `[::1]:3260` (RFC 7143 §13.8: IPv6 literals in brackets).
fn format_address(portal: &SocketAddr) -> String {
    match portal {
        SocketAddr::V4(v4) => format!("{}:{}", v4.ip(), v4.port()),
        SocketAddr::V6(v6) => format!("[{}]:{}", v6.ip(), v6.port()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_lists_every_portal_with_the_group_tag() {
        let portals: Vec<SocketAddr> = vec![
            "127.0.0.1:3260".parse().unwrap(),
            "[::1]:3261".parse().unwrap(),
        ];
        let answer = send_targets("All", "iqn.t", &portals);
        assert_eq!(
            answer.encode(),
            b"TargetName=iqn.t\0TargetAddress=127.0.0.1:3260,1\0TargetAddress=[::1]:3261,1\0"
        );
    }

    #[test]
    fn a_name_lists_only_a_matching_target() {
        let portals: Vec<SocketAddr> = vec!["127.0.0.1:3260".parse().unwrap()];
        assert_eq!(
            send_targets("IQN.T", "iqn.t", &portals).get("TargetName"),
            Some("iqn.t")
        );
        assert!(send_targets("iqn.other", "iqn.t", &portals).is_empty());
    }
}
