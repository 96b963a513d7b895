//! Size strings: `4096`, `512K`, `1G`, `16T`, `1.5G`, `64MiB` (binary units).

/// Parses a size with an optional K/M/G/T/P suffix (powers of 1024; a
/// trailing `B` or `iB` is allowed). Errors say what was wrong.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size".into());
    }
    let lower = t.to_ascii_lowercase();
    let body = lower.strip_suffix("ib").or_else(|| lower.strip_suffix('b')).unwrap_or(&lower);
    let (num, shift) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 10),
        Some('m') => (&body[..body.len() - 1], 20),
        Some('g') => (&body[..body.len() - 1], 30),
        Some('t') => (&body[..body.len() - 1], 40),
        Some('p') => (&body[..body.len() - 1], 50),
        _ => (body, 0),
    };
    let bad = || format!("'{s}' is not a size (examples: 4096, 512M, 1G, 16T)");
    if num.is_empty() || !num.chars().all(|c| c.is_ascii_digit() || c == '.') {
        return Err(bad());
    }
    let value = if num.contains('.') {
        let f: f64 = num.parse().map_err(|_| bad())?;
        let v = f * (1u64 << shift) as f64;
        if !v.is_finite() || v >= u64::MAX as f64 {
            return Err(format!("size '{s}' is too large"));
        }
        v as u64
    } else {
        let n: u64 = num.parse().map_err(|_| format!("size '{s}' is too large"))?;
        n.checked_mul(1u64 << shift).ok_or_else(|| format!("size '{s}' is too large"))?
    };
    Ok(value)
}

/// `bytes` for people: `1.0 GiB`, `512.0 KiB`, `100 B`.
pub use cairn_core::human_bytes as human;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("1K").unwrap(), 1024);
        assert_eq!(parse_size("1g").unwrap(), 1 << 30);
        assert_eq!(parse_size("16T").unwrap(), 16 << 40);
        assert_eq!(parse_size("64MiB").unwrap(), 64 << 20);
        assert_eq!(parse_size("2GB").unwrap(), 2 << 30);
        assert_eq!(parse_size("1.5G").unwrap(), 3 << 29);
    }

    #[test]
    fn bad_sizes() {
        for s in ["", "G", "abc", "1X", "-1G", "1..2G", "99999999999P"] {
            assert!(parse_size(s).is_err(), "{s} should be refused");
        }
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human(100), "100 B");
        assert_eq!(human(1 << 30), "1.0 GiB");
    }
}
