//! Byte counts as people write them: `4096`, `64M`, `1.5G` (powers of 1024). The CLI's size
//! arguments and a storage owner's `--cold-device ...,capacity=SIZE` take this syntax.

/// Parses a byte count: digits with an optional K/M/G/T suffix (powers of 1024, `iB`/`B`
/// tolerated).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let upper = t.to_ascii_uppercase();
    let digits = upper.trim_end_matches("IB").trim_end_matches('B');
    let (num, shift) = match digits.chars().last() {
        Some('K') => (&digits[..digits.len() - 1], 10),
        Some('M') => (&digits[..digits.len() - 1], 20),
        Some('G') => (&digits[..digits.len() - 1], 30),
        Some('T') => (&digits[..digits.len() - 1], 40),
        _ => (digits, 0),
    };
    let bad = || format!("{s:?} is not a byte count (e.g. 4096, 64M, 1.5G)");
    // A decimal fraction ("1.5G") counts exactly: whole * 2^shift plus fraction * 2^shift /
    // 10^digits, which must come out a whole number of bytes.
    let (whole, fraction) = match num.trim().split_once('.') {
        Some((whole, fraction)) => (whole, fraction),
        None => (num.trim(), "0"),
    };
    let digit_string =
        |d: &str| !d.is_empty() && d.len() <= 18 && d.bytes().all(|b| b.is_ascii_digit());
    if !digit_string(whole) || !digit_string(fraction) {
        return Err(bad());
    }
    let whole: u128 = whole.parse().map_err(|_| bad())?;
    let scale = 10u128.pow(fraction.len() as u32);
    let fraction: u128 = fraction.parse().map_err(|_| bad())?;
    let fraction_bytes = (fraction << shift) / scale;
    if (fraction_bytes * scale) != (fraction << shift) {
        return Err(format!("{s:?} is not a whole number of bytes"));
    }
    let bytes = (whole << shift) + fraction_bytes;
    u64::try_from(bytes).map_err(|_| format!("{s:?} is too large"))
}

/// A byte count for people: `512 B`, `4.0 KiB`, `1.5 GiB` (powers of 1024, one decimal).
pub fn format_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_for_people() {
        assert_eq!(format_size(0), "0 B");
        assert_eq!(format_size(1023), "1023 B");
        assert_eq!(format_size(4096), "4.0 KiB");
        assert_eq!(format_size(3 << 29), "1.5 GiB");
        assert_eq!(format_size(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("4KiB"), Ok(4096));
        assert_eq!(parse_size("2MB"), Ok(2 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size(" 3T "), Ok(3 << 40));
        assert!(parse_size("").is_err());
        assert!(parse_size("x").is_err());
        assert!(parse_size("-1").is_err());
        assert!(parse_size("99999999999T").is_err());
        assert_eq!(parse_size("1.5G"), Ok(3 << 29));
        assert_eq!(parse_size("0.5k"), Ok(512));
        assert_eq!(parse_size("2.0M"), Ok(2 << 20));
        assert!(parse_size("0.1K")
            .unwrap_err()
            .contains("whole number of bytes"));
        assert!(parse_size("1.").is_err());
        assert!(parse_size(".5G").is_err());
        assert!(parse_size("1.5.1G").is_err());
        assert!(parse_size("1e3").is_err());
    }
}
