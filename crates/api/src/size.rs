//! Human sizes: parsing `100G`, `1.5T`, `4096` and printing `1.5 GiB`, as the
//! CLI reads and prints them and the dashboard's forms and pages do too.

/// Parses a size with an optional binary unit (K, M, G, T, P; `iB`/`B` allowed).
pub fn parse_size(text: &str) -> Result<u64, String> {
    let t = text.trim();
    let lower = t.to_ascii_lowercase();
    let stripped = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (number, shift) = match stripped.chars().last() {
        Some('k') => (&stripped[..stripped.len() - 1], 10),
        Some('m') => (&stripped[..stripped.len() - 1], 20),
        Some('g') => (&stripped[..stripped.len() - 1], 30),
        Some('t') => (&stripped[..stripped.len() - 1], 40),
        Some('p') => (&stripped[..stripped.len() - 1], 50),
        _ => (stripped, 0),
    };
    let number = number.trim();
    let invalid = || format!("invalid size '{text}': use e.g. 4096, 64M, 100G, 1.5T");
    if number.is_empty() {
        return Err(invalid());
    }
    if let Ok(whole) = number.parse::<u64>() {
        return whole
            .checked_mul(1u64 << shift)
            .ok_or_else(|| format!("size '{text}' is too large"));
    }
    let value: f64 = number.parse().map_err(|_| invalid())?;
    if !value.is_finite() || value < 0.0 {
        return Err(invalid());
    }
    let bytes = value * (1u64 << shift) as f64;
    if bytes >= u64::MAX as f64 {
        return Err(format!("size '{text}' is too large"));
    }
    if bytes.fract() != 0.0 {
        return Err(format!("size '{text}' is not a whole number of bytes"));
    }
    Ok(bytes as u64)
}

/// Formats bytes with the largest binary unit that keeps the number at least 1, to
/// at most two decimals without trailing zeros: `100 GiB`, `1.5 MiB`, `1.33 TiB`.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        return format!("{bytes} B");
    }
    // 1 MiB - 1 byte would round to "1024 KiB": say "1 MiB" instead.
    if format!("{value:.2}") == "1024.00" && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    let number = format!("{value:.2}");
    let number = number.trim_end_matches('0').trim_end_matches('.');
    format!("{number} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_units_and_refuses_junk() {
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("10K"), Ok(10 << 10));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("100g"), Ok(100 << 30));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("4096B"), Ok(4096));
        assert_eq!(parse_size("1.5 MiB"), Ok(3 << 19));
        assert_eq!(parse_size("2t"), Ok(2 << 40));
        assert_eq!(parse_size("64mb"), Ok(64 << 20));
        assert_eq!(parse_size(" 8k "), Ok(8 << 10));
        assert_eq!(parse_size("0.5K"), Ok(512));
        assert!(parse_size("1.5").unwrap_err().contains("whole number"));
        assert!(parse_size("0.1K").unwrap_err().contains("whole number"));
        for bad in [
            "",
            "G",
            "-1G",
            "abc",
            "1.2.3M",
            "99999999999999999999P",
            "16384P",
            "infG",
            "nan",
            "1X",
            "1 G B",
        ] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_binary_units() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(100 << 30), "100 GiB");
        assert_eq!(format_size(3 << 19), "1.5 MiB");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(1024), "1 KiB");
        assert_eq!(format_size(4 << 40), "4 TiB");
        assert_eq!(format_size((4 << 30) / 3), "1.33 GiB");
        // Rounding never prints "1024 KiB" style overflow as a fraction.
        assert_eq!(format_size((1 << 20) - 1), "1 MiB");
        assert_eq!(format_size(u64::MAX), "16384 PiB");
    }
}
