//! Durations on the command line: `90`, `90s`, `30m`, `24h`, `7d`.

/// Parses a duration into whole seconds; a bare number is seconds.
pub fn parse_duration_s(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let (digits, unit_s) = match text.char_indices().last() {
        Some((i, 's')) => (&text[..i], 1),
        Some((i, 'm')) => (&text[..i], 60),
        Some((i, 'h')) => (&text[..i], 60 * 60),
        Some((i, 'd')) => (&text[..i], 24 * 60 * 60),
        Some(_) => (text, 1),
        None => return Err("empty duration".into()),
    };
    let value: u64 = digits
        .parse()
        .map_err(|_| format!("invalid duration '{text}': use e.g. 90s, 30m, 24h or 7d"))?;
    value
        .checked_mul(unit_s)
        .ok_or_else(|| format!("duration '{text}' is too long"))
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
}
