//! Durations on the command line: `90`, `90s`, `30m`, `24h`, `7d`, and the other
//! spellings of whole units that humantime reads (`1h 30m`, `2days`, `1w`).

/// Parses a duration into whole seconds; a bare number is seconds.
pub fn parse_duration_s(text: &str) -> Result<u64, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(seconds) = text.parse::<u64>() {
        return Ok(seconds);
    }
    let invalid = || format!("invalid duration '{text}': use e.g. 90s, 30m, 24h or 7d");
    // Whole numbers of a unit only, as ever ("1.5h" is refused), and a leading '+' as
    // Rust's integers take it ("+90s").
    if text.contains('.') {
        return Err(invalid());
    }
    match humantime::parse_duration(text.strip_prefix('+').unwrap_or(text)) {
        Ok(duration) if duration.subsec_nanos() == 0 => Ok(duration.as_secs()),
        Ok(_) => Err(format!(
            "duration '{text}' is not a whole number of seconds"
        )),
        Err(humantime::DurationError::NumberOverflow) => {
            Err(format!("duration '{text}' is too long"))
        }
        Err(_) => Err(invalid()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_refuses_junk() {
        assert_eq!(parse_duration_s("90").unwrap(), 90);
        assert_eq!(parse_duration_s("0s").unwrap(), 0);
        assert_eq!(parse_duration_s("30m").unwrap(), 1800);
        assert_eq!(parse_duration_s("24h").unwrap(), 86400);
        assert_eq!(parse_duration_s("7d").unwrap(), 604800);
        for bad in ["", "h", "1.5h", "-1s", "10x", "99999999999999999999d"] {
            assert!(parse_duration_s(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn spellings_keep_their_meaning() {
        assert_eq!(parse_duration_s(" +90s ").unwrap(), 90);
        assert_eq!(parse_duration_s("+7d").unwrap(), 604800);
        assert_eq!(parse_duration_s("18446744073709551615s").unwrap(), u64::MAX);
        assert_eq!(parse_duration_s("1h 30m").unwrap(), 5400);
        assert_eq!(parse_duration_s("2days").unwrap(), 172800);
        for bad in ["++1s", "1500ms", "1.0s", "213503982334602d"] {
            assert!(parse_duration_s(bad).is_err(), "{bad}");
        }
    }
}
