//! Human sizes: parsing `100G`, `1.5T`, `4096` and printing `1.5 GiB`.

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
    Ok(bytes.round() as u64)
}

/// Formats bytes with a binary unit.
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{bytes} B")
    } else if value.fract() == 0.0 {
        format!("{value:.0} {}", UNITS[unit])
    } else {
        format!("{value:.2} {}", UNITS[unit])
    }
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
        for bad in ["", "G", "-1G", "abc", "1.2.3M", "99999999999999999999P"] {
            assert!(parse_size(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn formats_binary_units() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(100 << 30), "100 GiB");
        assert_eq!(format_size(3 << 19), "1.50 MiB");
    }
}
